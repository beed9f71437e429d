"""The Recreate strategy (upstream's recreate.go): every old pod goes before any new one starts.

Old ReplicaSets are scaled to 0 first; the new ReplicaSet is not even created until no pod of an old
one is left that could still be running (a pod being deleted counts until it is gone, a Succeeded or
Failed one does not), so two versions never run side by side. Then the new ReplicaSet gets every
replica at once.
"""

from __future__ import annotations

from typing import Any

from controlplane.controllers.deployment import util
from controlplane.controllers.deployment.context import SyncContext
from controlplane.controllers.deployment.progress import sync_rollout_status
from controlplane.controllers.deployment.sync import Scale, apply, cleanup, get_all_and_sync_revision
from controlplane.controllers.deployment.util import meta, replicas

Obj = dict[str, Any]


def old_pods_running(new: Obj | None, olds: list[Obj], pod_map: dict[str, list[Obj]]) -> bool:
    """An old ReplicaSet still reports pods, or a pod of one is in no terminal phase (Unknown counts:
    it may be running where we cannot see)."""
    if util.actual_replicas(olds) > 0:
        return True
    new_uid = meta(new).get("uid") if new is not None else None
    for rs_uid, pods in pod_map.items():
        if rs_uid == new_uid:
            continue
        if any((p.get("status") or {}).get("phase") not in ("Failed", "Succeeded") for p in pods):
            return True
    return False


async def rollout_recreate(ctx: SyncContext, rs_list: list[Obj], pod_map: dict[str, list[Obj]]) -> None:
    # Not created yet if missing, so nothing scales up before the old pods are down.
    new, olds = await get_all_and_sync_revision(ctx, rs_list, create=False)
    changed, current = await apply(ctx, [Scale(meta(rs)["name"], 0) for rs in util.active(olds)], olds)
    olds = [current.get(meta(rs)["name"], rs) for rs in olds]
    if changed:
        return await sync_rollout_status(ctx, [*olds, new], new)
    if old_pods_running(new, olds, pod_map):
        return await sync_rollout_status(ctx, [*olds, new], new)
    if new is None:
        new, olds = await get_all_and_sync_revision(ctx, rs_list, create=True)
        if new is None:  # cannot happen: created above, or the create raised
            raise RuntimeError(f"deployment {ctx.namespace}/{ctx.name}: no new replica set after creating it")
    _, current = await apply(ctx, [Scale(meta(new)["name"], replicas(ctx.d))], [new])
    new = current[meta(new)["name"]]
    if util.complete(ctx.d, ctx.d.get("status") or {}):
        await cleanup(ctx, olds)
    await sync_rollout_status(ctx, [*olds, new], new)
