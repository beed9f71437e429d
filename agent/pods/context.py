"""What every pod worker shares: configuration, clients, the node-wide managers, and the runtime the
workers act through. The agent builds one with containerd behind it (`runtime` is then made from the
CRI pieces on first use); unit tests hand in a fake runtime instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agent.config import AgentConfig
from agent.cri import CRIClient
from agent.metrics import KubeletMetrics
from agent.pods.backoff import BackoffTable
from agent.pods.dns import DNS
from agent.pods.env import Fetch
from agent.pods.events import EventRecorder
from agent.pods.images import ImageManager
from agent.pods.runtime import RuntimeInspector
from agent.pods.runtime_service import RuntimeService
from agent.pods.status_manager import StatusManager
from agent.probes.hooks import HookRunner
from agent.probes.manager import ProberManager
from agent.volumes import VolumeManager


async def _no_objects(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    return None


@dataclass
class PodContext:
    cfg: AgentConfig
    recorder: EventRecorder
    status: StatusManager
    crash_backoff: BackoffTable
    host_ip: Callable[[], str]
    cri: CRIClient | None = None
    inspector: RuntimeInspector | None = None
    images: ImageManager | None = None
    fetch: Fetch = _no_objects
    node_hostname: str = ""
    host_dns: DNS = field(default_factory=DNS)
    node_memory: int = 0
    # The node's status.allocatable as last posted: the limits of a container that sets none, for
    # resourceFieldRef (upstream's defaultPodLimitsForDownwardAPI).
    node_allocatable: Callable[[], dict[str, str]] = dict
    # The Node as last read or posted, for admission (allocatable, labels, taints).
    node: Callable[[], dict[str, Any] | None] = lambda: None
    # The Node read from the API now (None: not available): admission asks it before refusing a pod on
    # labels or taints the cached Node may not show yet.
    fresh_node: Callable[[], Awaitable[dict[str, Any] | None]] | None = None
    volumes: VolumeManager | None = None
    prober: ProberManager | None = None
    hooks: HookRunner | None = None
    runtime: RuntimeService | None = None
    # Every Service the agent's informer holds (None until it has listed once), for service env vars.
    services: Callable[[], list[dict[str, Any]] | None] = list
    # The kubelet_* metrics the workers and the relist report into (served at /metrics).
    metrics: KubeletMetrics = field(default_factory=KubeletMetrics)

    @property
    def service(self) -> RuntimeService:
        """The runtime the workers act through (containerd's CRI unless one was handed in)."""
        if self.runtime is None:
            from agent.pods.cri_runtime import CRIRuntime

            assert self.cri is not None and self.inspector is not None and self.images is not None
            self.runtime = CRIRuntime(
                self.cfg,
                self.cri,
                self.inspector,
                self.images,
                self.recorder,
                self.fetch,
                self.host_ip,
                self.node_hostname,
                self.host_dns,
                lambda: self.node_memory,
                lambda: self.node_allocatable(),
                self.volumes,
                self.hooks,
                lambda: self.services(),
            )
        return self.runtime

    @property
    def runtime_name(self) -> str:
        return self.service.runtime_name
