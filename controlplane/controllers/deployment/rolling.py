"""The RollingUpdate strategy (upstream's rolling.go): grow the new ReplicaSet as far as maxSurge lets,
shrink the old ones as far as maxUnavailable lets, one step per sync, until only the new one is left.

Scaling down is bounded twice. At most spec.replicas + maxSurge - (spec.replicas - maxUnavailable)
pods may go, less the new ReplicaSet's pods that are not yet available (so a broken new template never
lets the old pods drain away). Old pods that are not available go first (they serve nothing; keeping
them would stall the rollout until its deadline), then available old pods while the Deployment keeps
spec.replicas - maxUnavailable available ones. The decisions are pure functions of the ReplicaSets;
`rollout_rolling` carries them out.
"""

from __future__ import annotations

from typing import Any

from controlplane.controllers.deployment import util
from controlplane.controllers.deployment.context import SyncContext
from controlplane.controllers.deployment.progress import sync_rollout_status
from controlplane.controllers.deployment.sync import Scale, apply, cleanup, get_all_and_sync_revision
from controlplane.controllers.deployment.util import meta, replicas, status
from kubeclient.errors import ApiError
from kubeclient.objcopy import deep_copy

Obj = dict[str, Any]


class InvalidScaleDown(ValueError):
    """A computed scale-down that would grow a ReplicaSet (upstream's "got invalid request")."""


def new_rs_target(d: Obj, all_rss: list[Obj], new: Obj) -> int | None:
    """What reconcileNewReplicaSet scales the new ReplicaSet to; None when it is at spec.replicas."""
    if replicas(new) == replicas(d):
        return None
    if replicas(new) > replicas(d):
        return replicas(d)
    return util.new_rs_new_replicas(d, all_rss, new)


def _available(rs: Obj) -> int:
    return int(status(rs).get("availableReplicas") or 0)


def cleanup_unhealthy(olds: list[Obj], most: int) -> tuple[list[Obj], list[Scale], int]:
    """Scale old ReplicaSets down by their unavailable replicas, oldest first, at most `most` in all.
    (the old ReplicaSets as they will be, the steps, how many replicas go)."""
    result = [deep_copy(rs) for rs in util.by_creation(olds)]
    steps: list[Scale] = []
    total = 0
    for rs in result:
        if total >= most:
            break
        if replicas(rs) == 0 or replicas(rs) == _available(rs):
            continue
        count = min(most - total, replicas(rs) - _available(rs))
        target = replicas(rs) - count
        if target > replicas(rs):
            raise InvalidScaleDown(
                f"when cleaning up unhealthy replicas, got invalid request to scale down "
                f"{meta(rs).get('namespace')}/{meta(rs).get('name')} {replicas(rs)} -> {target}"
            )
        steps.append(Scale(meta(rs)["name"], target))
        util.set_replicas(rs, target)
        total += count
    return result, steps, total


def scale_down_old(all_rss: list[Obj | None], olds: list[Obj], d: Obj) -> tuple[list[Scale], int]:
    """Scale old ReplicaSets down, oldest first, while more than spec.replicas - maxUnavailable pods
    stay available (scaleDownOldReplicaSetsForRollingUpdate)."""
    floor = replicas(d) - util.max_unavailable(d)
    available = util.available_replicas(all_rss)
    if available <= floor:
        return [], 0
    steps: list[Scale] = []
    wanted, total = available - floor, 0
    for rs in util.by_creation(olds):
        if total >= wanted:
            break
        if replicas(rs) == 0:
            continue
        count = min(replicas(rs), wanted - total)
        target = replicas(rs) - count
        if target > replicas(rs):
            raise InvalidScaleDown(
                f"when scaling down old RS, got invalid request to scale down "
                f"{meta(rs).get('namespace')}/{meta(rs).get('name')} {replicas(rs)} -> {target}"
            )
        steps.append(Scale(meta(rs)["name"], target))
        total += count
    return steps, total


def max_scaled_down(all_rss: list[Obj | None], new: Obj, d: Obj) -> int:
    """allPods - minAvailable - the new ReplicaSet's unavailable pods."""
    floor = replicas(d) - util.max_unavailable(d)
    new_unavailable = replicas(new) - _available(new)
    return util.total_replicas(all_rss) - floor - new_unavailable


def old_scale_down_plan(
    all_rss: list[Obj | None], olds: list[Obj], new: Obj, d: Obj
) -> tuple[list[Scale], bool]:
    """reconcileOldReplicaSets' steps: the unhealthy old replicas, then available ones. (steps, whether
    the plan is whole: an invalid computation stops it where upstream's loop stops)."""
    if util.total_replicas(olds) == 0:
        return [], True
    most = max_scaled_down(all_rss, new, d)
    if most <= 0:
        return [], True
    try:
        cleaned, steps, _ = cleanup_unhealthy(olds, most)
    except InvalidScaleDown:
        return [], False
    try:
        more, _ = scale_down_old([*cleaned, new], cleaned, d)
    except InvalidScaleDown:
        return steps, False
    return steps + more, True


async def reconcile_new(ctx: SyncContext, all_rss: list[Obj], new: Obj) -> bool:
    target = new_rs_target(ctx.d, all_rss, new)
    if target is None:
        return False
    changed, _ = await apply(ctx, [Scale(meta(new)["name"], target)], [new])
    return changed > 0


async def reconcile_old(ctx: SyncContext, all_rss: list[Obj], olds: list[Obj], new: Obj) -> bool:
    steps, whole = old_scale_down_plan(all_rss, olds, new, ctx.d)
    try:
        changed, _ = await apply(ctx, steps, olds)
    except ApiError:
        return False  # upstream gives up on this round without an error; the next sync tries again
    return whole and changed > 0


async def rollout_rolling(ctx: SyncContext, rs_list: list[Obj]) -> None:
    new, olds = await get_all_and_sync_revision(ctx, rs_list, create=True)
    if new is None:  # cannot happen: created above, or the create raised
        raise RuntimeError(f"deployment {ctx.namespace}/{ctx.name}: no new replica set after creating it")
    all_rss: list[Obj | None] = [*olds, new]
    if await reconcile_new(ctx, [*olds, new], new):
        return await sync_rollout_status(ctx, all_rss, new)
    if await reconcile_old(ctx, [*olds, new], util.active(olds), new):
        return await sync_rollout_status(ctx, all_rss, new)
    if util.complete(ctx.d, status(ctx.d)):
        await cleanup(ctx, olds)
    await sync_rollout_status(ctx, all_rss, new)
