"""What a simulation is asked for: how many nodes, what each offers, and how fast its pods move.

The defaults are the kubelet's own cadences (a Lease of 40 s renewed every quarter of it, the node status
reported every 5 minutes when nothing changes), so the control plane sees from N simulated nodes the load
N real kubelets would put on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodesim.stagefile import Stage


@dataclass(frozen=True)
class SimSettings:
    nodes: int = 1
    prefix: str = "sim-"
    cpu: str = "32"
    memory: str = "256Gi"
    pods: int = 110
    ephemeral_storage: str = "1Ti"
    labels: dict[str, str] = field(default_factory=dict)
    # How long a bound pod takes to go from Pending to Running (the image pull and start it stands for).
    start_delay: float = 1.0
    # How long a Job's pod runs before its container exits 0 (pods of other owners run until deleted
    # unless their annotation says otherwise: see stages.py).
    job_duration: float = 1.0
    # Per pod selector, how its pods move (a --stage-file; stagefile.py): the first match wins.
    stages: tuple[Stage, ...] = ()
    lease_duration: int = 40
    status_report_frequency: float = 300.0
    # Requests in flight at once, across every node and pod: what keeps a refusing server (429s, a dying
    # replica) from being hammered however many nodes are simulated.
    concurrency: int = 32
    workers: int = 16
    # Leave the Node objects (and the pods bound to them) behind when the simulation stops.
    keep_nodes: bool = False
    # Where node addresses and pod addresses come from (RFC 2544's benchmarking range and the shared
    # address space: never a real network's).
    node_ip_base: str = "198.18.0.0"
    pod_ip_base: str = "100.64.0.0"

    def node_names(self) -> list[str]:
        width = max(1, len(str(self.nodes - 1)))
        return [f"{self.prefix}{i:0{width}d}" for i in range(self.nodes)]

    @property
    def lease_interval(self) -> float:
        return self.lease_duration * 0.25
