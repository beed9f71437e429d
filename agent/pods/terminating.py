"""The terminating phase of a pod worker (upstream's SyncTerminatingPod and SyncTerminatingRuntimePod):
stop every running container and every sandbox of the pod, with the grace period in force (each
container's own when none is), preStop hooks and Killing events included, then record the status the
stopped containers leave. Raises when something still runs afterwards, so the worker tries again.
"""

from __future__ import annotations

import logging
from typing import Any

from agent.pods.context import PodContext
from agent.pods.executor import pod_ip_of
from agent.pods.killing import kill_pod
from agent.pods.podstate import PodState
from agent.pods.sync import pod_status

log = logging.getLogger("agent.pods.terminating")

ORPHAN_GRACE = 1  # upstream kills pods it knows nothing about with a grace period of 1 (then at least 2 s)


class StillRunning(Exception):
    """Containers still ran after a kill (the runtime did not stop them): terminate again."""


async def sync_terminating_pod(
    ctx: PodContext, state: PodState, pod: dict[str, Any], grace: int | None
) -> None:
    rt = await ctx.service.pod_state(state.uid)
    await ctx.status.update(pod, pod_status(ctx, state, pod, rt, terminal=False))
    if ctx.prober is not None:
        ctx.prober.stop_liveness_and_startup(state.uid)
    log.info("terminating pod=%s grace=%s", state.name, grace)
    await kill_pod(ctx.service, ctx.recorder, pod, rt, grace, pod_ip_of(pod, rt))
    if ctx.prober is not None:
        ctx.prober.remove_pod(state.uid)
    stopped = await ctx.service.pod_state(state.uid)
    if stopped.running():
        raise StillRunning(f"containers still running after a kill: {[r.name for r in stopped.running()]}")
    # The IP the pod had stays in its status (the stopped sandbox no longer reports one).
    await ctx.status.update(pod, pod_status(ctx, state, pod, stopped, terminal=True))


async def sync_terminating_runtime_pod(ctx: PodContext, state: PodState) -> None:
    """A pod only the runtime knows (found after a restart, its API object gone): stop what runs."""
    rt = await ctx.service.pod_state(state.uid)
    log.info("stopping orphaned pod uid=%s", state.uid)
    await kill_pod(ctx.service, ctx.recorder, None, rt, ORPHAN_GRACE)
