"""Dead containers and sandboxes of a live pod, collected as upstream's container GC does for it
(MaxPerPodContainer 1): the newest dead instance of each container stays (for `kubectl logs
--previous` and lastState), older ones go with their log files; stopped sandboxes left without
containers go, except the newest.
"""

from __future__ import annotations

from typing import Any

from agent.pods.runtime import PodRuntime
from agent.pods.runtime_service import RuntimeService


async def collect_dead(runtime: RuntimeService, pod: dict[str, Any] | None, rt: PodRuntime) -> int:
    """Remove what the pod no longer needs; how many containers went."""
    removed: set[str] = set()
    for records in rt.containers.values():
        dead = [r for r in records if r.state != "running"]
        for rec in dead[1:]:
            await runtime.remove_container(rec)
            removed.add(rec.id)
    kept = {r.sandbox_id for r in rt.all_containers() if r.id not in removed}
    for sb in rt.sandboxes[1:]:
        if not sb.ready and sb.id not in kept:
            await runtime.remove_sandbox(sb.id)
    return len(removed)
