"""The Summary API's JSON (k8s.io/kubelet/pkg/apis/stats/v1alpha1): field names and nesting as upstream,
times as RFC 3339 (metav1.Time), and fields whose value is unknown left out (upstream's omitempty
pointers). `only_cpu_and_memory` trims to what upstream's GetCPUAndMemoryStats fills."""

from __future__ import annotations

import datetime
import functools
from typing import Any

from agent.stats.model import (
    ContainerStats,
    CpuStats,
    FsStats,
    MemoryStats,
    NetworkStats,
    NodeStats,
    PodStats,
    Summary,
    SwapStats,
    SystemContainer,
    VolumeStats,
)


@functools.lru_cache(maxsize=256)
def _rfc3339(seconds: int) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339(t: float) -> str:
    # A Summary holds thousands of times, most of them the pass's own: each second formatted once.
    return _rfc3339(int(t))


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def cpu_json(c: CpuStats | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return _drop_none(
        {
            "time": rfc3339(c.time),
            "usageNanoCores": c.usage_nano_cores,
            "usageCoreNanoSeconds": c.usage_core_nano_seconds,
        }
    )


def memory_json(m: MemoryStats | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return _drop_none(
        {
            "time": rfc3339(m.time),
            "availableBytes": m.available_bytes,
            "usageBytes": m.usage_bytes,
            "workingSetBytes": m.working_set_bytes,
            "rssBytes": m.rss_bytes,
            "pageFaults": m.page_faults,
            "majorPageFaults": m.major_page_faults,
        }
    )


def swap_json(w: SwapStats | None) -> dict[str, Any] | None:
    if w is None:
        return None
    return _drop_none(
        {
            "time": rfc3339(w.time),
            "swapAvailableBytes": w.swap_available_bytes,
            "swapUsageBytes": w.swap_usage_bytes,
        }
    )


def fs_json(f: FsStats | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return _drop_none(
        {
            "time": rfc3339(f.time),
            "availableBytes": f.available_bytes,
            "capacityBytes": f.capacity_bytes,
            "usedBytes": f.used_bytes,
            "inodesFree": f.inodes_free,
            "inodes": f.inodes,
            "inodesUsed": f.inodes_used,
        }
    )


def network_json(n: NetworkStats | None) -> dict[str, Any] | None:
    if n is None:
        return None
    out: dict[str, Any] = {"time": rfc3339(n.time)}
    default = n.default()
    interfaces = [
        {
            "name": i.name,
            "rxBytes": i.rx_bytes,
            "rxErrors": i.rx_errors,
            "txBytes": i.tx_bytes,
            "txErrors": i.tx_errors,
        }
        for i in n.interfaces
    ]
    if default is not None:
        out.update(next(i for i in interfaces if i["name"] == default.name))
    if interfaces:
        out["interfaces"] = interfaces
    return out


def container_json(c: ContainerStats, full: bool) -> dict[str, Any]:
    out = _drop_none(
        {
            "name": c.name,
            "startTime": rfc3339(c.start_time),
            "cpu": cpu_json(c.cpu),
            "memory": memory_json(c.memory),
        }
    )
    if full:
        out.update(_drop_none({"rootfs": fs_json(c.rootfs), "logs": fs_json(c.logs)}))
    # swap last, where upstream's types added it
    out.update(_drop_none({"swap": swap_json(c.swap)}))
    return out


def volume_json(v: VolumeStats) -> dict[str, Any]:
    """upstream's VolumeStats: the file system figures inline, the name, the claim as pvcRef."""
    out: dict[str, Any] = {**(fs_json(v.fs) or {}), "name": v.name}
    if v.pvc is not None:
        out["pvcRef"] = {"name": v.pvc[1], "namespace": v.pvc[0]}
    return out


def pod_json(p: PodStats, full: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "podRef": {"name": p.ref.name, "namespace": p.ref.namespace, "uid": p.ref.uid},
        "startTime": rfc3339(p.start_time),
        "containers": [container_json(c, full) for c in p.containers],
    }
    out.update(_drop_none({"cpu": cpu_json(p.cpu), "memory": memory_json(p.memory)}))
    if full:
        if p.network is not None:
            out["network"] = network_json(p.network)
        if p.volumes:
            out["volume"] = [volume_json(v) for v in p.volumes]
        if p.ephemeral_storage is not None:
            out["ephemeral-storage"] = fs_json(p.ephemeral_storage)
        if p.process_count is not None:
            out["process_stats"] = {"process_count": p.process_count}
    out.update(_drop_none({"swap": swap_json(p.swap)}))
    return out


def system_container_json(s: SystemContainer) -> dict[str, Any]:
    return _drop_none(
        {
            "name": s.name,
            "startTime": rfc3339(s.start_time),
            "cpu": cpu_json(s.cpu),
            "memory": memory_json(s.memory),
            "swap": swap_json(s.swap),
        }
    )


def node_json(n: NodeStats, full: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "nodeName": n.name,
        "systemContainers": [system_container_json(s) for s in n.system_containers],
        "startTime": rfc3339(n.start_time),
    }
    out.update(_drop_none({"cpu": cpu_json(n.cpu), "memory": memory_json(n.memory)}))
    if full:
        out.update(_drop_none({"network": network_json(n.network), "fs": fs_json(n.fs)}))
        if n.image_fs is not None:
            out["runtime"] = {"imageFs": fs_json(n.image_fs)}
        if n.rlimit_maxpid is not None or n.rlimit_curproc is not None:
            out["rlimit"] = _drop_none(
                {"time": rfc3339(n.rlimit_time), "maxpid": n.rlimit_maxpid, "curproc": n.rlimit_curproc}
            )
    out.update(_drop_none({"swap": swap_json(n.swap)}))
    return out


def summary_json(s: Summary, only_cpu_and_memory: bool = False) -> dict[str, Any]:
    full = not only_cpu_and_memory
    return {"node": node_json(s.node, full), "pods": [pod_json(p, full) for p in s.pods]}
