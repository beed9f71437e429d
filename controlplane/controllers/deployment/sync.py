"""What every kind of sync shares (upstream's sync.go): finding or creating the new ReplicaSet with the
next revision, scaling one ReplicaSet with its event, proportional scaling, history clean-up and status.

A scaling event (spec.replicas changed while more than one ReplicaSet has pods, or while paused) is not
a rollout: the replicas to add or remove are spread over the active ReplicaSets in proportion to their
size, as recorded by the max-replicas annotation, so a rollout in progress keeps its ratio of old to new
pods instead of being hurried (more new pods before they proved themselves) or held back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controlplane.controllers.deployment import conditions as cond
from controlplane.controllers.deployment import util
from controlplane.controllers.deployment.context import SyncContext, terminating_namespace
from controlplane.controllers.deployment.hashing import compute_hash
from controlplane.controllers.deployment.util import meta, replicas, spec, status
from controlplane.controllers.podcontrol import controller_ref
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL, WARNING
from kubeclient.objcopy import deep_copy

Obj = dict[str, Any]


@dataclass(frozen=True)
class Scale:
    """One planned change of a ReplicaSet's size. `annotations`: write the desired/max-replicas
    annotations even when the size stays (upstream's scaleReplicaSet, as against
    scaleReplicaSetAndRecordEvent, which does nothing when the size is right)."""

    name: str
    replicas: int
    annotations: bool = False


# --- scaling one ReplicaSet ----------------------------------------------------------------------------


async def scale_replica_set(ctx: SyncContext, rs: Obj, new_scale: int) -> tuple[bool, Obj]:
    """Set the size and the replicas annotations if either is off; the ScalingReplicaSet event when the
    size changed. (scaled, the ReplicaSet as stored)."""
    d = ctx.d
    desired, most = replicas(d), replicas(d) + util.max_surge(d)
    old_scale = replicas(rs)
    size_changes = old_scale != new_scale
    if not size_changes and not util.replicas_annotations_need_update(rs, desired, most):
        return False, rs
    body = deep_copy(rs)
    util.set_replicas(body, new_scale)
    util.set_replicas_annotations(body, desired, most)
    body.setdefault("apiVersion", "apps/v1")
    body.setdefault("kind", "ReplicaSet")
    updated = await ctx.update_replicaset(body)
    if size_changes:
        direction = "up" if old_scale < new_scale else "down"
        ctx.event(
            NORMAL,
            "ScalingReplicaSet",
            f"Scaled {direction} replica set {meta(rs)['name']} from {old_scale} to {new_scale}",
        )
    return size_changes, updated


async def scale_and_record(ctx: SyncContext, rs: Obj, new_scale: int) -> tuple[bool, Obj]:
    """scaleReplicaSetAndRecordEvent: nothing at all when the size is already right."""
    if replicas(rs) == new_scale:
        return False, rs
    return await scale_replica_set(ctx, rs, new_scale)


async def apply(ctx: SyncContext, plan: list[Scale], rss: list[Obj]) -> tuple[int, dict[str, Obj]]:
    """Carry out the plan in order, each step on the ReplicaSet as the previous step left it; stops at
    the first failure (raised). (how many changed size, the ReplicaSets by name as stored now)."""
    current = {meta(rs)["name"]: rs for rs in rss}
    changed = 0
    for step in plan:
        rs = current[step.name]
        if step.annotations:
            scaled, current[step.name] = await scale_replica_set(ctx, rs, step.replicas)
        else:
            scaled, current[step.name] = await scale_and_record(ctx, rs, step.replicas)
        changed += scaled
    return changed, current


# --- new and old ReplicaSets, revisions --------------------------------------------------------------


def new_replica_set_body(d: Obj, old_rss: list[Obj]) -> Obj:
    """The ReplicaSet a Deployment's template asks for: named and labelled by the template's hash
    (with status.collisionCount), owned by the Deployment, with the next revision and as many replicas
    as the strategy allows now."""
    template = deep_copy(spec(d).get("template") or {})
    pod_hash = compute_hash(template, status(d).get("collisionCount"))
    tmeta = template.setdefault("metadata", {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), util.UNIQUE_LABEL_KEY: pod_hash}
    selector = deep_copy(spec(d).get("selector") or {})
    selector["matchLabels"] = {**(selector.get("matchLabels") or {}), util.UNIQUE_LABEL_KEY: pod_hash}
    rs: Obj = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta(d)['name']}-{pod_hash}",
            "namespace": meta(d).get("namespace", ""),
            "ownerReferences": [controller_ref(d)],
            "labels": dict(tmeta["labels"]),
        },
        "spec": {
            "replicas": 0,
            "minReadySeconds": int(spec(d).get("minReadySeconds") or 0),
            "selector": selector,
            "template": template,
        },
    }
    util.set_replicas(rs, util.new_rs_new_replicas(d, [*old_rss, rs], rs))
    util.set_new_rs_annotations(d, rs, str(util.max_revision(old_rss) + 1), exists=False)
    return rs


async def get_all_and_sync_revision(
    ctx: SyncContext, rs_list: list[Obj], create: bool
) -> tuple[Obj | None, list[Obj]]:
    _, all_old = util.find_old(ctx.d, rs_list)
    new = await get_new_replica_set(ctx, rs_list, all_old, create)
    return new, all_old


async def get_new_replica_set(
    ctx: SyncContext, rs_list: list[Obj], old_rss: list[Obj], create: bool
) -> Obj | None:
    """The new ReplicaSet with its revision brought up to date (and the Deployment's with it); created
    when missing and `create`."""
    d = ctx.d
    existing = util.find_new(d, rs_list)
    new_revision = str(util.max_revision(old_rss) + 1)
    if existing is not None:
        return await _sync_existing(ctx, existing, new_revision)
    if not create:
        return None
    body = new_replica_set_body(d, old_rss)
    name = body["metadata"]["name"]
    new_count = replicas(body)
    try:
        created = await ctx.create_replicaset(body)
    except ApiError as err:
        if err.already_exists:
            return await _name_taken(ctx, body, err)
        if terminating_namespace(err):
            raise
        message = f'Failed to create new replica set "{name}": {err.message or err}'
        if util.progress_deadline(d) is not None:
            cond.set_condition(
                d.setdefault("status", {}),
                cond.new_condition(cond.PROGRESSING, "False", cond.FAILED_RS_CREATE, message, ctx.now()),
            )
            try:
                await ctx.update_status()
            except ApiError:
                pass  # the failure to create is the news; it is reported below either way
        ctx.event(WARNING, cond.FAILED_RS_CREATE, message)
        raise
    if new_count > 0:
        ctx.event(NORMAL, "ScalingReplicaSet", f"Scaled up replica set {name} from 0 to {new_count}")
    util.set_deployment_revision(d, new_revision)
    if util.progress_deadline(d) is not None:
        cond.set_condition(
            d.setdefault("status", {}),
            cond.new_condition(
                cond.PROGRESSING, "True", cond.NEW_RS_CREATED, f'Created new replica set "{name}"', ctx.now()
            ),
        )
    await ctx.update_status()
    return created


async def _sync_existing(ctx: SyncContext, existing: Obj, new_revision: str) -> Obj:
    d = ctx.d
    rs = deep_copy(existing)
    rs.setdefault("apiVersion", "apps/v1")
    rs.setdefault("kind", "ReplicaSet")
    annotations_changed = util.set_new_rs_annotations(d, rs, new_revision, exists=True)
    min_ready = int(spec(d).get("minReadySeconds") or 0)
    if annotations_changed or int(spec(rs).get("minReadySeconds") or 0) != min_ready:
        rs["spec"]["minReadySeconds"] = min_ready
        return await ctx.update_replicaset(rs)
    util.set_deployment_revision(d, util.annotations(rs).get(util.REVISION, ""))
    if util.progress_deadline(d) is not None and cond.get_condition(status(d), cond.PROGRESSING) is None:
        cond.set_condition(
            d.setdefault("status", {}),
            cond.new_condition(
                cond.PROGRESSING,
                "True",
                cond.FOUND_NEW_RS,
                f'Found new replica set "{meta(rs)["name"]}"',
                ctx.now(),
            ),
        )
    await ctx.update_status()
    return rs


async def _name_taken(ctx: SyncContext, body: Obj, err: ApiError) -> Obj:
    """The name is taken: our own ReplicaSet the cache has not shown yet, or a hash collision, which
    bumps collisionCount so the next sync tries another name."""
    d = ctx.d
    name = body["metadata"]["name"]
    rs = ctx.cached_replicaset(name)
    if rs is None:
        raise err  # the cache is behind: look again on the retry
    ref = util.meta(rs).get("ownerReferences") or []
    owned = any(r.get("controller") and r.get("uid") == meta(d).get("uid") for r in ref)
    if owned and util.equal_ignore_hash(spec(d).get("template"), spec(rs).get("template")):
        return rs
    st = d.setdefault("status", {})
    st["collisionCount"] = int(st.get("collisionCount") or 0) + 1
    await ctx.update_status()
    raise err


# --- scaling events and paused Deployments -------------------------------------------------------------


def scale_plan(d: Obj, new: Obj | None, olds: list[Obj]) -> list[Scale]:
    """upstream's scale(): one active (or none: the newest) ReplicaSet takes spec.replicas; a saturated
    new one leaves the old ones none; otherwise a rolling Deployment spreads the difference to
    spec.replicas + maxSurge over the active ones, largest first, the leftover to the first."""
    only = util.find_active_or_latest(new, olds)
    if only is not None:
        return [] if replicas(only) == replicas(d) else [Scale(meta(only)["name"], replicas(d))]
    if util.is_saturated(d, new):
        return [Scale(meta(rs)["name"], 0) for rs in util.active(olds)]
    if not util.is_rolling_update(d):
        return []
    actives = util.active([*olds, new])
    allowed = replicas(d) + util.max_surge(d) if replicas(d) > 0 else 0
    to_add = allowed - util.total_replicas(actives)
    if to_add > 0:
        actives = util.by_size_newer(actives)
    elif to_add < 0:
        actives = util.by_size_older(actives)
    sizes: dict[str, int] = {}
    added = 0
    for rs in actives:
        if to_add != 0:
            share = util.proportion(rs, d, to_add, added)
            sizes[meta(rs)["name"]] = replicas(rs) + share
            added += share
        else:
            sizes[meta(rs)["name"]] = replicas(rs)
    if actives and to_add != 0:
        first = meta(actives[0])["name"]
        sizes[first] = max(sizes[first] + to_add - added, 0)
    return [Scale(meta(rs)["name"], sizes[meta(rs)["name"]], annotations=True) for rs in actives]


async def scale(ctx: SyncContext, new: Obj | None, olds: list[Obj]) -> None:
    await apply(ctx, scale_plan(ctx.d, new, olds), [rs for rs in [*olds, new] if rs is not None])


async def is_scaling_event(ctx: SyncContext, rs_list: list[Obj]) -> bool:
    """An active ReplicaSet was sized for another spec.replicas (its desired-replicas annotation)."""
    new, olds = await get_all_and_sync_revision(ctx, rs_list, create=False)
    for rs in util.active([*olds, new]):
        desired = util.annotation_int(rs, util.DESIRED_REPLICAS)
        if desired is not None and desired != replicas(ctx.d):
            return True
    return False


async def sync(ctx: SyncContext, rs_list: list[Obj]) -> None:
    """A scaling event or a paused Deployment: scale, clean up history when paused, report status."""
    new, olds = await get_all_and_sync_revision(ctx, rs_list, create=False)
    await scale(ctx, new, olds)
    if spec(ctx.d).get("paused") and util.rollback_to(ctx.d) is None:
        await cleanup(ctx, olds)
    await sync_status(ctx, [*olds, new], new)


async def sync_status_only(ctx: SyncContext, rs_list: list[Obj]) -> None:
    new, olds = await get_all_and_sync_revision(ctx, rs_list, create=False)
    await sync_status(ctx, [*olds, new], new)


async def check_paused_conditions(ctx: SyncContext) -> None:
    """Progressing becomes Unknown/DeploymentPaused on pause and Unknown/DeploymentResumed on resume, so
    time spent paused never counts against progressDeadlineSeconds."""
    d = ctx.d
    if util.progress_deadline(d) is None:
        return
    current = cond.get_condition(status(d), cond.PROGRESSING)
    if current is not None and current.get("reason") == cond.TIMED_OUT:
        return
    paused_there = current is not None and current.get("reason") == cond.PAUSED
    paused = bool(spec(d).get("paused"))
    if paused and not paused_there:
        new = cond.new_condition(cond.PROGRESSING, "Unknown", cond.PAUSED, "Deployment is paused", ctx.now())
    elif not paused and paused_there:
        new = cond.new_condition(
            cond.PROGRESSING, "Unknown", cond.RESUMED, "Deployment is resumed", ctx.now()
        )
    else:
        return
    cond.set_condition(d.setdefault("status", {}), new)
    await ctx.update_status()


# --- history and status --------------------------------------------------------------------------------


def cleanup_victims(d: Obj, olds: list[Obj]) -> list[Obj]:
    """The oldest revisions beyond revisionHistoryLimit that hold no pods and whose latest spec their
    controller has seen (cleanupDeployment)."""
    limit = util.revision_history_limit(d)
    if limit is None:
        return []
    alive = [rs for rs in olds if rs is not None and not meta(rs).get("deletionTimestamp")]
    surplus = len(alive) - limit
    if surplus <= 0:
        return []
    victims = []
    for rs in util.by_revision(alive)[:surplus]:
        if (
            int(status(rs).get("replicas") or 0) != 0
            or replicas(rs) != 0
            or int(meta(rs).get("generation") or 0) > int(status(rs).get("observedGeneration") or 0)
        ):
            continue
        victims.append(rs)
    return victims


async def cleanup(ctx: SyncContext, olds: list[Obj]) -> None:
    for rs in cleanup_victims(ctx.d, olds):
        await ctx.delete_replicaset(rs)  # one failure stops the round (the server may be overloaded)


def calculate_status(all_rss: list[Obj | None], new: Obj | None, d: Obj, now: Any) -> Obj:
    """The status the ReplicaSets add up to, with the Available condition."""
    available = util.available_replicas(all_rss)
    unavailable = max(util.total_replicas(all_rss) - available, 0)
    st: Obj = {
        "observedGeneration": int(meta(d).get("generation") or 0),
        "replicas": util.actual_replicas(all_rss),
        "updatedReplicas": util.actual_replicas([new]),
        "readyReplicas": util.ready_replicas(all_rss),
        "availableReplicas": available,
        "unavailableReplicas": unavailable,
    }
    if status(d).get("collisionCount") is not None:
        st["collisionCount"] = status(d)["collisionCount"]
    st = {k: v for k, v in st.items() if k == "collisionCount" or v}
    conditions = [dict(c) for c in status(d).get("conditions") or []]
    if conditions:
        st["conditions"] = conditions
    if available >= replicas(d) - util.max_unavailable(d):
        cond.set_condition(
            st,
            cond.new_condition(
                cond.AVAILABLE, "True", cond.MIN_AVAILABLE, "Deployment has minimum availability.", now
            ),
        )
    else:
        cond.set_condition(
            st,
            cond.new_condition(
                cond.AVAILABLE,
                "False",
                cond.MIN_UNAVAILABLE,
                "Deployment does not have minimum availability.",
                now,
            ),
        )
    return st


async def sync_status(ctx: SyncContext, all_rss: list[Obj | None], new: Obj | None) -> None:
    ctx.d["status"] = calculate_status(all_rss, new, ctx.d, ctx.now())
    await ctx.update_status()
