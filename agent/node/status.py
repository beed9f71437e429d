"""Node status setters: pure functions from host facts, live usage, the runtime's Status and the
config to the Node's labels and status, with upstream's reasons and messages.

Kept free of I/O so every rule (allocatable arithmetic, pressure thresholds, condition transitions) is
tested directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agent.config import AgentConfig
from agent.node.facts import HostFacts, Usage
from kubeclient.kubeletlabels import REGION_LABEL, ZONE_LABEL
from kubeclient.quantity import QuantityError, format_ki, milli_value, parse_quantity, value
from kubeclient.version import KUBERNETES_VERSION


def threshold_bytes(text: str, capacity: int) -> int:
    """An eviction threshold: an absolute quantity or a percentage of capacity (upstream's forms)."""
    text = text.strip()
    if text.endswith("%"):
        return int(parse_quantity(text[:-1]) / 100 * capacity)
    return value(text)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class RuntimeHealth:
    """What the runtime's Status call said, as the node's Ready condition judges it (upstream's
    runtimeState): `reachable` False means the runtime has not answered for longer than the threshold
    (or never has); the readiness fields are then from its last answer, when `stale` says there was one."""

    reachable: bool
    runtime_ready: bool = False
    runtime_reason: str = ""
    runtime_message: str = ""
    network_ready: bool = False
    network_reason: str = ""
    network_message: str = ""
    version: str = ""  # containerd://1.6.20
    pleg: str | None = None  # "PLEG is not healthy: ..." when relisting stalled
    down: str = "container runtime is down"  # or "container runtime status check may not have completed yet"
    stale: bool = False

    def problems(self) -> list[str]:
        """Upstream's messages for a node that is not ready, in its order: the runtime's sync, the
        health checks (PLEG), the runtime's own error, then the network's."""
        out = []
        if not self.reachable:
            out.append(self.down)
        if self.pleg:
            out.append(self.pleg)
        if self.reachable or self.stale:
            if not self.runtime_ready:
                out.append(
                    f"container runtime not ready: RuntimeReady=false reason:{self.runtime_reason} "
                    f"message:{self.runtime_message}"
                )
            if not self.network_ready:
                out.append(
                    f"container runtime network not ready: NetworkReady=false reason:{self.network_reason} "
                    f"message:{self.network_message}"
                )
        return list(dict.fromkeys(out))


# updateDefaultLabels' list: the labels an adopted Node (one that existed before this agent registered) is
# brought in line with; the --node-labels beyond these are set only when the agent creates the Node.
DEFAULT_LABELS = (
    "kubernetes.io/hostname",
    ZONE_LABEL,
    REGION_LABEL,
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "node.kubernetes.io/windows-build",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
)


def node_labels(cfg: AgentConfig, facts: HostFacts) -> dict[str, str]:
    labels = {
        "kubernetes.io/hostname": cfg.node_name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": facts.architecture,
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": facts.architecture,
    }
    labels.update(cfg.node_labels)
    return labels


def binary_si(n: int) -> str:
    """A byte count in upstream's canonical BinarySI form: 0, 2Mi, 1Gi, 4096Ki, 1536."""
    if n == 0:
        return "0"
    for exp, suffix in ((60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")):
        if n % (1 << exp) == 0:
            return f"{n >> exp}{suffix}"
    return str(n)


def hugepage_resources(facts: HostFacts) -> dict[str, int]:
    """hugepages-<size> -> bytes, for every page size the host offers (as cadvisor reports them)."""
    return {f"hugepages-{binary_si(size)}": size * pages for size, pages in sorted(facts.hugepages.items())}


def capacity(cfg: AgentConfig, facts: HostFacts, usage: Usage) -> dict[str, str]:
    out = {
        "cpu": str(facts.cpus),
        "memory": format_ki(facts.memory_bytes),
        "ephemeral-storage": format_ki(usage.fs_capacity),
        "pods": str(cfg.max_pods),
    }
    out.update({name: binary_si(amount) for name, amount in hugepage_resources(facts).items()})
    return out


def _reserved(cfg: AgentConfig, name: str) -> str | None:
    total = None
    for res in (cfg.system_reserved, cfg.kube_reserved):
        if name in res:
            total = (total or 0) + (milli_value(res[name]) if name == "cpu" else value(res[name]))
    return None if total is None else str(total)


def allocatable(cfg: AgentConfig, facts: HostFacts, usage: Usage) -> dict[str, str]:
    """capacity - systemReserved - kubeReserved - hard eviction threshold, as upstream computes it."""
    cpu_m = facts.cpus * 1000 - int(_reserved(cfg, "cpu") or 0)
    mem = facts.memory_bytes - int(_reserved(cfg, "memory") or 0)
    disk = usage.fs_capacity - int(_reserved(cfg, "ephemeral-storage") or 0)
    try:
        if "memory.available" in cfg.eviction_hard:
            mem -= threshold_bytes(cfg.eviction_hard["memory.available"], facts.memory_bytes)
        if "nodefs.available" in cfg.eviction_hard:
            disk -= threshold_bytes(cfg.eviction_hard["nodefs.available"], usage.fs_capacity)
    except (QuantityError, ArithmeticError):
        pass
    cpu = str(cpu_m // 1000) if cpu_m % 1000 == 0 else f"{cpu_m}m"
    pages = hugepage_resources(facts)
    mem -= sum(pages.values())  # memory held in huge pages is not allocatable as memory
    out = {
        "cpu": cpu,
        "memory": format_ki(max(mem, 0)),
        "ephemeral-storage": str(max(disk, 0)),
        "pods": str(cfg.max_pods),
    }
    for name, amount in pages.items():
        out[name] = binary_si(max(amount - int(_reserved(cfg, name) or 0), 0))
    return out


def _below(threshold: str | None, available: int, capacity_: int) -> bool:
    if not threshold:
        return False
    try:
        return available < threshold_bytes(threshold, capacity_)
    except (QuantityError, ArithmeticError):
        return False


@dataclass(frozen=True)
class CondSpec:
    type: str
    status: str
    reason: str
    message: str


def condition_specs(
    cfg: AgentConfig, facts: HostFacts, usage: Usage, health: RuntimeHealth
) -> list[CondSpec]:
    hard = cfg.eviction_hard
    mem_pressure = _below(hard.get("memory.available"), usage.memory_available, facts.memory_bytes)
    disk_pressure = _below(hard.get("nodefs.available"), usage.fs_available, usage.fs_capacity) or _below(
        hard.get("nodefs.inodesFree"), usage.inodes_free, usage.inodes_total
    )
    pid_pressure = _below(hard.get("pid.available"), usage.pids_max - usage.pids_used, usage.pids_max)
    specs = [
        CondSpec(
            "MemoryPressure",
            "True",
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
        )
        if mem_pressure
        else CondSpec(
            "MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"
        ),
        CondSpec("DiskPressure", "True", "KubeletHasDiskPressure", "kubelet has disk pressure")
        if disk_pressure
        else CondSpec("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        CondSpec("PIDPressure", "True", "KubeletHasInsufficientPID", "kubelet has insufficient PID available")
        if pid_pressure
        else CondSpec(
            "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"
        ),
    ]
    problems = health.problems()
    if problems:
        message = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
        specs.append(CondSpec("Ready", "False", "KubeletNotReady", message))
    else:
        specs.append(CondSpec("Ready", "True", "KubeletReady", "kubelet is posting ready status"))
    return specs


def merge_conditions(previous: list[dict[str, Any]], specs: list[CondSpec], now: str) -> list[dict[str, Any]]:
    """New conditions: lastHeartbeatTime is now; lastTransitionTime moves only when status changes."""
    prev = {c.get("type"): c for c in previous or []}
    out = []
    for spec in specs:
        old = prev.get(spec.type)
        transition = old.get("lastTransitionTime") if old and old.get("status") == spec.status else now
        out.append(
            {
                "type": spec.type,
                "status": spec.status,
                "lastHeartbeatTime": now,
                "lastTransitionTime": transition or now,
                "reason": spec.reason,
                "message": spec.message,
            }
        )
    return out


def node_status(
    cfg: AgentConfig,
    facts: HostFacts,
    usage: Usage,
    health: RuntimeHealth,
    internal_ip: str,
    previous_conditions: list[dict[str, Any]],
    now: str | None = None,
) -> dict[str, Any]:
    now = now or now_rfc3339()
    return {
        "capacity": capacity(cfg, facts, usage),
        "allocatable": allocatable(cfg, facts, usage),
        "conditions": merge_conditions(previous_conditions, condition_specs(cfg, facts, usage, health), now),
        "addresses": [
            {"type": "InternalIP", "address": internal_ip},
            {"type": "Hostname", "address": cfg.node_name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": cfg.port}},
        "nodeInfo": {
            "machineID": facts.machine_id,
            "systemUUID": facts.system_uuid,
            "bootID": facts.boot_id,
            "kernelVersion": facts.kernel_version,
            "osImage": facts.os_image,
            "containerRuntimeVersion": health.version,
            "kubeletVersion": KUBERNETES_VERSION
            if KUBERNETES_VERSION.startswith("v")
            else f"v{KUBERNETES_VERSION}",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": facts.architecture,
        },
    }


def without_heartbeats(status: dict[str, Any]) -> dict[str, Any]:
    """The status with heartbeat times removed: what decides whether anything changed."""
    conds = [{k: v for k, v in c.items() if k != "lastHeartbeatTime"} for c in status.get("conditions", [])]
    return {**status, "conditions": conds}


# The event a condition's new status is announced with (upstream's setters record them on the Node).
_CONDITION_EVENTS = {
    ("MemoryPressure", "True"): "NodeHasInsufficientMemory",
    ("MemoryPressure", "False"): "NodeHasSufficientMemory",
    ("DiskPressure", "True"): "NodeHasDiskPressure",
    ("DiskPressure", "False"): "NodeHasNoDiskPressure",
    ("PIDPressure", "True"): "NodeHasInsufficientPID",
    ("PIDPressure", "False"): "NodeHasSufficientPID",
    ("Ready", "True"): "NodeReady",
    ("Ready", "False"): "NodeNotReady",
}


def condition_events(previous: list[dict[str, Any]], specs: list[CondSpec]) -> list[str]:
    """The events upstream's condition setters record against the Node the API holds: a pressure
    condition announces every change of status (a new one counts as changed from Unknown); Ready only a
    change of a condition that was there."""
    held = {c.get("type"): c.get("status") for c in previous or []}
    out = []
    for spec in specs:
        old = held.get(spec.type)
        if spec.type == "Ready":
            changed = old is not None and old != spec.status
        else:
            changed = (old or "Unknown") != spec.status
        if changed and (spec.type, spec.status) in _CONDITION_EVENTS:
            out.append(_CONDITION_EVENTS[(spec.type, spec.status)])
    return out


def status_event_message(node_name: str, event: str) -> str:
    """upstream's recordNodeStatusEvent text."""
    return f"Node {node_name} status is now: {event}"


def rebooted(previous_status: dict[str, Any], facts: HostFacts) -> bool:
    """The Node the API holds was reported from another boot of this host."""
    boot = (previous_status.get("nodeInfo") or {}).get("bootID")
    return bool(boot) and boot != facts.boot_id
