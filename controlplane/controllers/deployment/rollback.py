"""Rollback through the deprecated `deprecated.deployment.rollback.to` annotation (upstream's
rollback.go), which extensions/v1beta1 clients' spec.rollbackTo round-trips as.

`kubectl rollout undo` does not use it: it copies the old ReplicaSet's template (and annotations) into
the Deployment itself, and the controller then finds that ReplicaSet new again and gives it the next
revision. This path does the same on the server side for a Deployment annotated with the revision to
go back to (0: the previous one), then removes the annotation, with upstream's events:
DeploymentRollback `Rolled back deployment "web" to revision 1`, DeploymentRollbackRevisionNotFound,
DeploymentRollbackTemplateUnchanged.
"""

from __future__ import annotations

from typing import Any

from controlplane.controllers.deployment import util
from controlplane.controllers.deployment.context import SyncContext
from controlplane.controllers.deployment.sync import get_all_and_sync_revision
from controlplane.controllers.deployment.util import spec
from kubeclient.events import NORMAL, WARNING
from kubeclient.objcopy import deep_copy

Obj = dict[str, Any]

REVISION_NOT_FOUND = "DeploymentRollbackRevisionNotFound"
TEMPLATE_UNCHANGED = "DeploymentRollbackTemplateUnchanged"
ROLLBACK_DONE = "DeploymentRollback"


async def _clear_and_update(ctx: SyncContext) -> None:
    ctx.d["metadata"].get("annotations", {}).pop(util.ROLLBACK_TO, None)
    await ctx.update()


async def rollback(ctx: SyncContext, rs_list: list[Obj]) -> None:
    d = ctx.d
    new, olds = await get_all_and_sync_revision(ctx, rs_list, create=True)
    all_rss = [rs for rs in [*olds, new] if rs is not None]
    to = util.rollback_to(d) or 0
    if to == 0:
        to = util.last_revision(all_rss)
        if to == 0:
            ctx.event(WARNING, REVISION_NOT_FOUND, "Unable to find last revision.")
            return await _clear_and_update(ctx)
    for rs in all_rss:
        try:
            if util.revision(rs) != to:
                continue
        except ValueError:
            continue
        if not util.equal_ignore_hash(spec(d).get("template"), spec(rs).get("template")):
            d["spec"]["template"] = util.template_without_hash(deep_copy(spec(rs).get("template") or {}))
            util.set_annotations_from_rs(d, rs)
            await _clear_and_update(ctx)
            ctx.event(NORMAL, ROLLBACK_DONE, f'Rolled back deployment "{ctx.name}" to revision {to}')
            return None
        ctx.event(
            WARNING,
            TEMPLATE_UNCHANGED,
            f'The rollback revision contains the same template as current deployment "{ctx.name}"',
        )
        return await _clear_and_update(ctx)
    ctx.event(WARNING, REVISION_NOT_FOUND, "Unable to find the revision to rollback to.")
    return await _clear_and_update(ctx)
