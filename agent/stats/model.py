"""What one stats pass found, as upstream's stats/v1alpha1 types hold it (Summary, NodeStats, PodStats,
ContainerStats, CPUStats, MemoryStats, NetworkStats, FsStats, VolumeStats). Times are unix seconds;
a field the source did not give is None and is left out of the JSON, as upstream's omitempty pointers.
The Summary JSON and the Prometheus collectors both read these, so they never disagree."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CpuStats:
    time: float
    usage_core_nano_seconds: int | None = None
    usage_nano_cores: int | None = None


@dataclass(frozen=True)
class MemoryStats:
    time: float
    available_bytes: int | None = None
    usage_bytes: int | None = None
    working_set_bytes: int | None = None
    rss_bytes: int | None = None
    page_faults: int | None = None
    major_page_faults: int | None = None


@dataclass(frozen=True)
class SwapStats:
    time: float
    swap_available_bytes: int | None = None
    swap_usage_bytes: int | None = None


@dataclass(frozen=True)
class InterfaceStats:
    name: str
    rx_bytes: int
    rx_errors: int
    tx_bytes: int
    tx_errors: int


@dataclass(frozen=True)
class NetworkStats:
    time: float
    interfaces: tuple[InterfaceStats, ...] = ()

    def default(self, name: str = "eth0") -> InterfaceStats | None:
        """The kubelet's default interface (network.DefaultInterfaceName), inlined in the JSON."""
        return next((i for i in self.interfaces if i.name == name), None)


@dataclass(frozen=True)
class FsStats:
    time: float
    available_bytes: int | None = None
    capacity_bytes: int | None = None
    used_bytes: int | None = None
    inodes_free: int | None = None
    inodes: int | None = None
    inodes_used: int | None = None


@dataclass(frozen=True)
class ContainerStats:
    name: str
    id: str
    start_time: float
    cpu: CpuStats | None = None
    memory: MemoryStats | None = None
    rootfs: FsStats | None = None
    logs: FsStats | None = None
    image: str = ""
    rootfs_device: str = ""  # the device holding the writable layer (cadvisor's `device` label)
    swap: SwapStats | None = None


@dataclass(frozen=True)
class VolumeStats:
    name: str
    fs: FsStats
    pvc: tuple[str, str] | None = None  # (namespace, name) of the claim behind the volume (pvcRef)


@dataclass(frozen=True)
class PodRef:
    name: str
    namespace: str
    uid: str


@dataclass(frozen=True)
class PodStats:
    ref: PodRef
    start_time: float
    sandbox_id: str = ""
    cgroup: str = ""
    containers: tuple[ContainerStats, ...] = ()
    cpu: CpuStats | None = None
    memory: MemoryStats | None = None
    network: NetworkStats | None = None
    volumes: tuple[VolumeStats, ...] = ()
    ephemeral_storage: FsStats | None = None
    process_count: int | None = None
    swap: SwapStats | None = None


@dataclass(frozen=True)
class SystemContainer:
    name: str
    start_time: float
    cpu: CpuStats | None = None
    memory: MemoryStats | None = None
    swap: SwapStats | None = None


@dataclass(frozen=True)
class NodeStats:
    name: str
    start_time: float
    cpu: CpuStats | None = None
    memory: MemoryStats | None = None
    network: NetworkStats | None = None
    fs: FsStats | None = None
    image_fs: FsStats | None = None
    system_containers: tuple[SystemContainer, ...] = ()
    rlimit_maxpid: int | None = None
    rlimit_curproc: int | None = None
    rlimit_time: float = 0.0
    swap: SwapStats | None = None


@dataclass(frozen=True)
class Summary:
    node: NodeStats
    pods: tuple[PodStats, ...] = field(default=())
