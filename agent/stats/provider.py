"""One stats pass: CRI's snapshot (cri_source.py) joined with the cgroups, network namespaces and file
systems of the node into a Summary (model.py), as upstream's CRI stats provider joins CRI with cadvisor.

Containers: which exist from ListContainers; CPU and memory from each running container's own cgroup
(under its sandbox's cgroup parent), as upstream's kubelet takes them from cadvisor, so
`only_cpu_and_memory` and /metrics/resource need no ListContainerStats at all; only a running container
whose cgroup cannot be read (its sandbox's parent unknown) falls back to a fresh ListContainerStats.
usageNanoCores from the previous sample (cpurate.py), start time the container's creation, rootfs its
writable layer (ListContainerStats, remembered for WRITABLE_LAYER_PERIOD), logs its log files.
Pods: CPU and memory from the pod's cgroup (the sandbox's cgroup parent), else the sum of its
containers; network from the sandbox's network namespace; volumes from the pod's volume folders, their
du remembered for VOLUME_STATS_PERIOD (upstream's volumeStatsAggPeriod); ephemeral storage is rootfs +
logs + local ephemeral volumes. Node: the root cgroup (or /proc/meminfo on cgroup v2), the host's
network devices, the root dir's and the image file system. File reads run in a worker thread.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from agent.cri import CRIClient, pb
from agent.pods import labels as L
from agent.stats import host, syscontainers
from agent.stats.cgroups import Cgroups, CgroupUsage, cgroupfs_path, container_cgroup
from agent.stats.cpurate import CpuRates
from agent.stats.cri_source import WRITABLE_LAYER_PERIOD, CriSnapshot, CriSource
from agent.stats.model import (
    ContainerStats,
    CpuStats,
    FsStats,
    MemoryStats,
    NetworkStats,
    NodeStats,
    PodRef,
    PodStats,
    Summary,
    SwapStats,
    SystemContainer,
    VolumeStats,
)
from agent.volumes.emptydir import disk_usage
from agent.volumes.plugin import VolumeUsage

VOLUME_STATS_PERIOD = 60.0
# Volume plugins whose data lives on the node's root file system (upstream's IsLocalEphemeralVolume).
# Plugins whose volumes only the plugin measures (a CSI volume: its driver's NodeGetVolumeStats; a local
# PersistentVolume: the statfs of its path).
_MEASURED_BY_PLUGIN = ("kubernetes.io~csi", "kubernetes.io~local-volume")
_EPHEMERAL_PLUGINS = (
    "kubernetes.io~empty-dir",
    "kubernetes.io~configmap",
    "kubernetes.io~secret",
    "kubernetes.io~downward-api",
)


@dataclass(frozen=True)
class StatsConfig:
    node_name: str
    root_dir: str = "/var/lib/kubelet"
    pod_logs_dir: str = "/var/log/pods"
    pods_cgroup: str = "/kubepods"  # the node's pods cgroup (cgroupRoot + kubepods)
    kubelet_cgroups: str = ""  # upstream's kubeletCgroups ("": this process's own cgroup)
    runtime_cgroups: str = ""  # upstream's runtimeCgroups ("": the CRI socket's serving process's)
    runtime_endpoint: str = ""  # the CRI endpoint, to find the runtime's process


def _ns(seconds_ns: int) -> float:
    return seconds_ns / 1e9


def _wrapped(msg: object, name: str) -> int | None:
    """A CRI UInt64Value field's value, None when not set."""
    return getattr(msg, name).value if msg.HasField(name) else None  # type: ignore[attr-defined]


@dataclass(frozen=True)
class _CgroupReads:
    """The running containers' cgroup figures, read at one time (seconds, the provider's clock)."""

    at: float
    usage: dict[str, CgroupUsage]


@dataclass
class _VolumeUsage:
    used: int
    inodes_used: int
    at: float


@dataclass
class StatsProvider:
    cri: CRIClient
    config: StatsConfig
    cgroups: Cgroups = field(default_factory=Cgroups)
    clock: Callable[[], float] = time.time
    rates: CpuRates = field(default_factory=CpuRates)
    # The volume figures the volume plugins measure themselves, for a pod uid (VolumeManager.stats).
    plugin_volumes: Callable[[str], Awaitable[list[VolumeUsage]]] | None = None
    _source: CriSource = field(init=False)
    _volumes: dict[str, _VolumeUsage] = field(init=False, default_factory=dict)
    _boot: float = field(init=False, default=0.0)
    _devices: dict[str, str] = field(init=False, default_factory=dict)
    _lock: asyncio.Lock = field(init=False, default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        self._source = CriSource(self.cri)

    async def summary(self, only_cpu_and_memory: bool = False) -> Summary:
        # One pass at a time: the CPU samples and volume figures it keeps are not shared across threads.
        async with self._lock:
            # The writable layers' figures, when due, are asked beside the pass's other CRI calls.
            early = None
            if not only_cpu_and_memory and self._source.stats_due(WRITABLE_LAYER_PERIOD):
                early = asyncio.ensure_future(self._source.container_stats())
            try:
                snap = await self._source.snapshot(with_image_fs=not only_cpu_and_memory)
                measured = {} if only_cpu_and_memory else await self._measured(snap)
                reads = await asyncio.to_thread(self._read_containers, snap)
                stats = await self._container_stats(snap, reads, only_cpu_and_memory, early)
            finally:
                if early is not None and not early.done():
                    early.cancel()
                elif early is not None and not early.cancelled():
                    early.exception()  # retrieved: a failed pass reports its own error
            summary = await asyncio.to_thread(
                self._build, replace(snap, stats=stats), reads, only_cpu_and_memory, measured
            )
            self.rates.sweep()
            return summary

    async def _container_stats(
        self,
        snap: CriSnapshot,
        reads: _CgroupReads,
        cpu_mem_only: bool,
        early: asyncio.Future[dict[str, pb.ContainerStats]] | None,
    ) -> dict[str, pb.ContainerStats]:
        """ListContainerStats when the pass needs it: fresh for a running container whose cgroup could
        not be read (its CPU and memory come from it), else for the writable layers of a full pass
        (remembered WRITABLE_LAYER_PERIOD), else not at all."""
        running = frozenset(c.id for c in snap.containers if c.state == pb.CONTAINER_RUNNING)
        if early is not None:
            return await early
        if not running <= reads.usage.keys():
            return await self._source.container_stats()
        if not cpu_mem_only:
            return await self._source.container_stats(WRITABLE_LAYER_PERIOD, want=running)
        return {}

    def _read_containers(self, snap: CriSnapshot) -> _CgroupReads:
        at = self.clock()
        out: dict[str, CgroupUsage] = {}
        for c in snap.containers:
            info = snap.info.get(c.pod_sandbox_id)
            if c.state != pb.CONTAINER_RUNNING or info is None or not info.cgroup_parent:
                continue
            usage = self.cgroups.usage(container_cgroup(info.cgroup_parent, c.id))
            if usage is not None:
                out[c.id] = usage
        return _CgroupReads(at, out)

    # -- building (in a worker thread: file reads) ----------------------------------------------------

    async def claim_volumes(self) -> list[VolumeUsage]:
        """The plugin-measured figures of every volume with a claim behind it, of every pod on the node
        (for the kubelet_volume_stats_* series), each claim once."""
        if self.plugin_volumes is None:
            return []
        uids = await asyncio.to_thread(_subdirs, os.path.join(self.config.root_dir, "pods"))
        out: dict[tuple[str, str], VolumeUsage] = {}
        for uid in uids:
            for usage in await self.plugin_volumes(os.path.basename(uid)):
                if usage.claim is not None:
                    out.setdefault(usage.claim, usage)
        return list(out.values())

    async def _measured(self, snap: CriSnapshot) -> dict[str, list[VolumeUsage]]:
        if self.plugin_volumes is None:
            return {}
        uids = {sb.labels.get(L.POD_UID, sb.metadata.uid) for sb in snap.sandboxes}
        return {uid: await self.plugin_volumes(uid) for uid in sorted(uids)}

    def _build(
        self,
        snap: CriSnapshot,
        reads: _CgroupReads,
        cpu_mem_only: bool,
        measured: dict[str, list[VolumeUsage]] | None = None,
    ) -> Summary:
        now = self.clock()
        if not self._boot:
            self._boot = host.boot_time()
        by_sandbox: dict[str, list[pb.Container]] = {}
        for c in snap.containers:
            by_sandbox.setdefault(c.pod_sandbox_id, []).append(c)
        fs_cache: dict[str, FsStats | None] = {}
        pods = []
        for sb in snap.sandboxes:
            containers = [
                c
                for c in by_sandbox.get(sb.id, [])
                if c.id in reads.usage or c.id in snap.stats or c.state != pb.CONTAINER_RUNNING
            ]
            if not containers:
                continue  # upstream builds a pod from its containers' stats
            pods.append(self._pod(sb, containers, snap, reads, now, cpu_mem_only, fs_cache, measured or {}))
        node = self._node(snap, now, cpu_mem_only, fs_cache)
        return Summary(node, tuple(pods))

    def _cpu(self, key: str, usage: CgroupUsage | None, now: float) -> CpuStats | None:
        if usage is None or usage.cpu_usage_ns is None:
            return None
        ts = int(now * 1e9)
        return CpuStats(now, usage.cpu_usage_ns, self.rates.update(key, ts, usage.cpu_usage_ns))

    @staticmethod
    def _swap(usage: CgroupUsage | None, now: float) -> SwapStats | None:
        """upstream's cadvisorInfoToSwapStats: usage, and what the limit leaves when there is one."""
        if usage is None or usage.swap_usage is None:
            return None
        limit = usage.swap_limit
        available = max(limit - usage.swap_usage, 0) if limit is not None else None
        return SwapStats(now, available, usage.swap_usage)

    @staticmethod
    def _memory(usage: CgroupUsage | None, now: float, capacity: int | None = None) -> MemoryStats | None:
        if usage is None or usage.working_set is None:
            return None
        limit = usage.memory_limit if usage.memory_limit is not None else capacity
        return MemoryStats(
            time=now,
            available_bytes=max(limit - usage.working_set, 0) if limit is not None else None,
            usage_bytes=usage.memory_usage,
            working_set_bytes=usage.working_set,
            rss_bytes=usage.rss,
            page_faults=usage.page_faults,
            major_page_faults=usage.major_page_faults,
        )

    def _container(
        self,
        c: pb.Container,
        stats: pb.ContainerStats | None,
        reads: _CgroupReads,
        now: float,
        cpu_mem_only: bool,
        logs_dir: str,
        fs_cache: dict[str, FsStats | None],
    ) -> ContainerStats:
        rootfs = logs = None
        device = ""
        usage = reads.usage.get(c.id)
        if usage is not None:
            cpu, mem = self._cpu(c.id, usage, reads.at), self._memory(usage, reads.at)
            swap = self._swap(usage, reads.at)
        elif stats is not None and c.state == pb.CONTAINER_RUNNING:
            cpu, mem = self._cri_cpu_memory(c.id, stats, now)
            swap = None
        else:
            cpu = mem = swap = None
        if not cpu_mem_only:
            if stats is not None:
                rootfs = self._rootfs(stats, now, fs_cache)
                device = self._device(stats.writable_layer.fs_id.mountpoint)
            logs = self._logs(os.path.join(logs_dir, c.metadata.name), now, fs_cache)
        return ContainerStats(
            name=c.metadata.name,
            id=c.id,
            start_time=_ns(c.created_at),
            cpu=cpu,
            memory=mem,
            swap=swap,
            rootfs=rootfs,
            logs=logs,
            image=c.image.image,
            rootfs_device=device,
        )

    def _cri_cpu_memory(
        self, cid: str, stats: pb.ContainerStats, now: float
    ) -> tuple[CpuStats | None, MemoryStats | None]:
        """A container's CPU and memory as ListContainerStats gives them (its cgroup unknown)."""
        cpu = mem = None
        if stats.HasField("cpu") and stats.cpu.HasField("usage_core_nano_seconds"):
            usage = stats.cpu.usage_core_nano_seconds.value
            ts = stats.cpu.timestamp or int(now * 1e9)
            rate = self.rates.update(cid, ts, usage)
            given = _wrapped(stats.cpu, "usage_nano_cores")
            cpu = CpuStats(_ns(ts), usage, given if given else rate)
        if stats.HasField("memory") and stats.memory.HasField("working_set_bytes"):
            m = stats.memory
            available = _wrapped(m, "available_bytes")
            mem = MemoryStats(
                time=_ns(m.timestamp) if m.timestamp else now,
                available_bytes=available or None,
                usage_bytes=_wrapped(m, "usage_bytes"),
                working_set_bytes=m.working_set_bytes.value,
                rss_bytes=_wrapped(m, "rss_bytes"),
                page_faults=_wrapped(m, "page_faults"),
                major_page_faults=_wrapped(m, "major_page_faults"),
            )
        return cpu, mem

    def _device(self, mountpoint: str) -> str:
        if not mountpoint:
            return ""
        if mountpoint not in self._devices:
            self._devices[mountpoint] = host.device_of(mountpoint, host.mounts())
        return self._devices[mountpoint]

    def _shared_fs(self, path: str, now: float, fs_cache: dict[str, FsStats | None]) -> FsStats | None:
        if path not in fs_cache:
            fs_cache[path] = host.fs_stats(path, now)
        return fs_cache[path]

    def _rootfs(
        self, stats: pb.ContainerStats, now: float, fs_cache: dict[str, FsStats | None]
    ) -> FsStats | None:
        if not stats.HasField("writable_layer"):
            return None
        layer = stats.writable_layer
        fs = self._shared_fs(layer.fs_id.mountpoint, now, fs_cache) if layer.fs_id.mountpoint else None
        return FsStats(
            time=_ns(layer.timestamp) if layer.timestamp else now,
            available_bytes=fs.available_bytes if fs else None,
            capacity_bytes=fs.capacity_bytes if fs else None,
            used_bytes=_wrapped(layer, "used_bytes") or 0,
            inodes_free=fs.inodes_free if fs else None,
            inodes=fs.inodes if fs else None,
            inodes_used=_wrapped(layer, "inodes_used") or 0,
        )

    def _logs(self, folder: str, now: float, fs_cache: dict[str, FsStats | None]) -> FsStats | None:
        used = files = 0
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.is_file(follow_symlinks=False):
                        used += entry.stat(follow_symlinks=False).st_blocks * 512
                        files += 1
        except OSError:
            return None
        fs = self._shared_fs(self.config.pod_logs_dir, now, fs_cache)
        return FsStats(
            time=now,
            available_bytes=fs.available_bytes if fs else None,
            capacity_bytes=fs.capacity_bytes if fs else None,
            used_bytes=used,
            inodes_free=fs.inodes_free if fs else None,
            inodes=fs.inodes if fs else None,
            inodes_used=files,
        )

    def _pod(
        self,
        sb: pb.PodSandbox,
        containers: list[pb.Container],
        snap: CriSnapshot,
        reads: _CgroupReads,
        now: float,
        cpu_mem_only: bool,
        fs_cache: dict[str, FsStats | None],
        measured: dict[str, list[VolumeUsage]],
    ) -> PodStats:
        meta = sb.metadata
        ref = PodRef(
            sb.labels.get(L.POD_NAME, meta.name),
            sb.labels.get(L.POD_NAMESPACE, meta.namespace),
            sb.labels.get(L.POD_UID, meta.uid),
        )
        logs_dir = os.path.join(self.config.pod_logs_dir, f"{ref.namespace}_{ref.name}_{ref.uid}")
        cstats = tuple(
            self._container(c, snap.stats.get(c.id), reads, now, cpu_mem_only, logs_dir, fs_cache)
            for c in containers
        )
        info = snap.info.get(sb.id)
        cgroup = cgroupfs_path(info.cgroup_parent) if info and info.cgroup_parent else ""
        usage = self.cgroups.usage(cgroup) if cgroup else None
        cpu = self._cpu(f"pod:{ref.uid}", usage, now) or _sum_cpu(cstats, now)
        mem = self._memory(usage, now) or _sum_memory(cstats, now)
        swap = self._swap(usage, now)
        network = volumes = ephemeral = None
        if not cpu_mem_only:
            ifaces = host.net_dev(info.pid) if info and info.pid else None
            network = NetworkStats(now, ifaces) if ifaces is not None else None
            volumes = self._pod_volumes(ref.uid, now, measured.get(ref.uid, []))
            ephemeral = _ephemeral(cstats, volumes, now, self._shared_fs(self.config.root_dir, now, fs_cache))
        return PodStats(
            ref=ref,
            start_time=_ns(sb.created_at),
            sandbox_id=sb.id,
            cgroup=cgroup,
            containers=cstats,
            cpu=cpu,
            memory=mem,
            swap=swap,
            network=network,
            volumes=tuple(v for v, _ in volumes or ()),
            ephemeral_storage=ephemeral,
            process_count=self.cgroups.pids(cgroup) if cgroup and not cpu_mem_only else None,
        )

    def _pod_volumes(
        self, uid: str, now: float, measured: list[VolumeUsage]
    ) -> list[tuple[VolumeStats, bool]]:
        """The du-measured folders of the pod's volumes, then what the plugins measured (CSI volumes:
        not local ephemeral ones)."""
        base = os.path.join(self.config.root_dir, "pods", uid, "volumes")
        out: list[tuple[VolumeStats, bool]] = []
        for plugin in _subdirs(base):
            if os.path.basename(plugin) in _MEASURED_BY_PLUGIN:
                continue
            for folder in _subdirs(plugin):
                fs = host.fs_stats(folder, now)
                used = self._volume_usage(folder, now)
                stats = FsStats(
                    time=now,
                    available_bytes=fs.available_bytes if fs else None,
                    capacity_bytes=fs.capacity_bytes if fs else None,
                    used_bytes=used.used,
                    inodes_free=fs.inodes_free if fs else None,
                    inodes=fs.inodes if fs else None,
                    inodes_used=used.inodes_used,
                )
                name = os.path.basename(folder)
                out.append((VolumeStats(name, stats), os.path.basename(plugin) in _EPHEMERAL_PLUGINS))
        for m in measured:
            fs = FsStats(m.time, m.available, m.capacity, m.used, m.inodes_free, m.inodes, m.inodes_used)
            out.append((VolumeStats(m.name, fs, m.claim), False))
        return out

    def _volume_usage(self, folder: str, now: float) -> _VolumeUsage:
        known = self._volumes.get(folder)
        if known is not None and now - known.at < VOLUME_STATS_PERIOD:
            return known
        inodes = sum(len(d) + len(f) for _, d, f in os.walk(folder)) + 1
        usage = self._volumes[folder] = _VolumeUsage(disk_usage(Path(folder)), inodes, now)
        return usage

    def _system_containers(self, now: float, capacity: int | None) -> tuple[SystemContainer, ...]:
        """kubelet, runtime and pods, as upstream's GetSystemContainersStats (system containers have no
        filesystem stats; the kubelet's start is its own)."""
        cfg = self.config
        found = [
            (c.name, c.start_time or self._boot, self.cgroups.usage(c.cpu_path, c.memory_path))
            for c in syscontainers.locate(
                cfg.kubelet_cgroups, cfg.runtime_cgroups, cfg.runtime_endpoint, self._boot
            )
        ]
        found.append(("pods", self._boot, self.cgroups.usage(cfg.pods_cgroup)))
        return tuple(
            SystemContainer(
                name,
                start,
                self._cpu(f"system:{name}", usage, now),
                self._memory(usage, now, capacity),
                self._swap(usage, now),
            )
            for name, start, usage in found
            if usage is not None
        )

    def _node(
        self, snap: CriSnapshot, now: float, cpu_mem_only: bool, fs_cache: dict[str, FsStats | None]
    ) -> NodeStats:
        root = self.cgroups.usage("/")
        info = host.meminfo()
        capacity = info.get("MemTotal")
        if root is None or root.working_set is None:
            used = capacity - info.get("MemFree", 0) if capacity is not None else None
            root = CgroupUsage(
                cpu_usage_ns=root.cpu_usage_ns if root else None,
                memory_usage=used,
                working_set=None if used is None else max(used - info.get("Inactive(file)", 0), 0),
            )
        system = self._system_containers(now, capacity)
        node = NodeStats(
            name=self.config.node_name,
            start_time=self._boot,
            cpu=self._cpu("node", root, now),
            memory=self._memory(replace(root, memory_limit=None), now, capacity),
            swap=_node_swap(info, now),
            system_containers=system,
        )
        if cpu_mem_only:
            return node
        ifaces = host.net_dev()
        maxpid, curproc = host.pid_limits()
        return NodeStats(
            name=node.name,
            start_time=node.start_time,
            cpu=node.cpu,
            memory=node.memory,
            swap=node.swap,
            network=NetworkStats(now, ifaces) if ifaces is not None else None,
            fs=self._shared_fs(self.config.root_dir, now, fs_cache),
            image_fs=_image_fs(snap.image_fs, now, lambda p: self._shared_fs(p, now, fs_cache)),
            system_containers=system,
            rlimit_maxpid=maxpid,
            rlimit_curproc=curproc,
            rlimit_time=now,
        )


def _node_swap(info: dict[str, int], now: float) -> SwapStats | None:
    """The node's swap from /proc/meminfo, as runc's root-cgroup stats give cadvisor (the root cgroup
    has no swap files of its own): in use = SwapTotal - SwapFree, available = SwapFree."""
    total, free = info.get("SwapTotal"), info.get("SwapFree")
    if total is None or free is None:
        return None
    return SwapStats(now, free, max(total - free, 0))


def _subdirs(path: str) -> list[str]:
    try:
        with os.scandir(path) as entries:
            return sorted(e.path for e in entries if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def pods_cgroup(cgroup_root: str, driver: str) -> str:
    """The cgroup all pods live under (upstream's kubepods, under cgroupRoot)."""
    if driver == "systemd":
        return "/kubepods.slice"
    return cgroup_root.rstrip("/") + "/kubepods"


def _sum_cpu(cs: tuple[ContainerStats, ...], now: float) -> CpuStats | None:
    parts = [c.cpu for c in cs if c.cpu is not None]
    if not parts:
        return None
    rates = [p.usage_nano_cores for p in parts]
    return CpuStats(
        max(p.time for p in parts),
        sum(p.usage_core_nano_seconds or 0 for p in parts),
        None if any(r is None for r in rates) else sum(r or 0 for r in rates),
    )


def _sum_memory(cs: tuple[ContainerStats, ...], now: float) -> MemoryStats | None:
    parts = [c.memory for c in cs if c.memory is not None]
    if not parts:
        return None
    return MemoryStats(
        time=max(p.time for p in parts),
        usage_bytes=sum(p.usage_bytes or 0 for p in parts),
        working_set_bytes=sum(p.working_set_bytes or 0 for p in parts),
        rss_bytes=sum(p.rss_bytes or 0 for p in parts),
        page_faults=sum(p.page_faults or 0 for p in parts),
        major_page_faults=sum(p.major_page_faults or 0 for p in parts),
    )


def _ephemeral(
    cs: tuple[ContainerStats, ...],
    volumes: list[tuple[VolumeStats, bool]],
    now: float,
    rootfs: FsStats | None,
) -> FsStats:
    """upstream's calcEphemeralStorage: containers' rootfs and logs plus the local ephemeral volumes."""
    used = inodes = 0
    for c in cs:
        for part in (c.rootfs, c.logs):
            if part is not None:
                used += part.used_bytes or 0
                inodes += part.inodes_used or 0
    for v, ephemeral in volumes:
        if ephemeral:
            used += v.fs.used_bytes or 0
            inodes += v.fs.inodes_used or 0
    return FsStats(
        time=now,
        available_bytes=rootfs.available_bytes if rootfs else None,
        capacity_bytes=rootfs.capacity_bytes if rootfs else None,
        used_bytes=used,
        inodes_free=rootfs.inodes_free if rootfs else None,
        inodes=rootfs.inodes if rootfs else None,
        inodes_used=inodes,
    )


def _image_fs(
    usages: tuple[pb.FilesystemUsage, ...], now: float, fs_of: Callable[[str], FsStats | None]
) -> FsStats | None:
    if not usages:
        return None
    u = usages[0]
    fs = fs_of(u.fs_id.mountpoint) if u.fs_id.mountpoint else None
    return FsStats(
        time=_ns(u.timestamp) if u.timestamp else now,
        available_bytes=fs.available_bytes if fs else None,
        capacity_bytes=fs.capacity_bytes if fs else None,
        used_bytes=_wrapped(u, "used_bytes") or 0,
        inodes_free=fs.inodes_free if fs else None,
        inodes=fs.inodes if fs else None,
        inodes_used=_wrapped(u, "inodes_used") or 0,
    )
