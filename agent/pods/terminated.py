"""The terminated phase of a pod worker and what follows it:

- `sync_terminated_pod` (upstream's SyncTerminatedPod and the status manager's TerminatePod): nothing
  of the pod runs any more, so its final status goes out (a terminal phase now, the status manager no
  longer holds it back), its cgroups are released, and a pod being deleted is deleted for good (the
  final DELETE with grace 0 and a UID precondition).
- `remove_pod` (upstream's container GC and pod cleanup, for a pod the API no longer has): every
  container and sandbox, with their log files, the pod's folders and cgroups.
"""

from __future__ import annotations

import logging
from typing import Any

from agent.pods.context import PodContext
from agent.pods.podstate import PodState
from agent.pods.spec import being_deleted
from agent.pods.status import terminate_pod

log = logging.getLogger("agent.pods.terminated")


async def sync_terminated_pod(ctx: PodContext, state: PodState, pod: dict[str, Any] | None) -> None:
    if pod is None:
        return  # gone from the API: nothing to report to
    status = ctx.status.last(state.uid)
    if status is not None:
        await ctx.status.update(pod, terminate_pod(pod, status))
    await ctx.status.flush(state.uid)
    if being_deleted(pod):
        await ctx.status.delete(pod)
        log.info("pod deleted pod=%s", state.name)


async def remove_pod(ctx: PodContext, state: PodState, pod: dict[str, Any] | None) -> None:
    rt = await ctx.service.pod_state(state.uid)
    for rec in rt.all_containers():
        await ctx.service.remove_container(rec)
    for sb in rt.sandboxes:
        await ctx.service.remove_sandbox(sb.id)
    await ctx.service.remove_pod_files(state.uid, pod)
    ctx.crash_backoff.forget_prefix(state.uid)
    if ctx.images is not None:
        ctx.images.backoff.forget_prefix(state.uid)
    if ctx.prober is not None:
        ctx.prober.remove_pod(state.uid)
    ctx.status.forget(state.uid)
    log.info("pod removed from runtime uid=%s pod=%s", state.uid, state.name)
