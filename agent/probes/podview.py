"""What the prober knows of a pod: the spec and, per container, what the pod worker last saw in CRI.

The pod worker hands it over on each pass (ProberManager.sync_pod); the manager keeps one PodView per
pod and gives the same object to that pod's probe workers, which only read it. It stands where
upstream's worker reads the status manager's pod status: the container to probe, whether it runs,
since when, and at which IP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ContainerView:
    """What the pod worker last saw of a container in CRI: all a probe needs to decide whether to run."""

    id: str
    state: str  # created / running / exited / unknown
    started_at: float = 0.0  # epoch seconds


@dataclass
class PodView:
    pod: dict[str, Any]
    pod_ip: str = ""
    containers: dict[str, ContainerView] = field(default_factory=dict)

    @property
    def uid(self) -> str:
        return self.pod["metadata"]["uid"]

    @property
    def restart_never(self) -> bool:
        return (self.pod.get("spec") or {}).get("restartPolicy") == "Never"
