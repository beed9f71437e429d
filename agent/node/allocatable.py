"""Node allocatable enforced on the pods' cgroup, as upstream's container manager does for
enforceNodeAllocatable "pods" (cm/node_container_manager_linux.go): the kubepods cgroup, parent of
every pod's, is limited to capacity minus kubeReserved and systemReserved (eviction thresholds are not
taken off here, as upstream), so pods together can never take what is reserved for the system.

Only for the cgroupfs driver with cgroupsPerQOS; the systemd driver's slices are systemd's to set.
"""

from __future__ import annotations

import logging
from pathlib import Path

from agent.config import AgentConfig
from agent.node.facts import HostFacts
from kubeclient.quantity import QuantityError, milli_value, value

log = logging.getLogger("agent.node.allocatable")

CGROUP_FS = Path("/sys/fs/cgroup")
MIN_SHARES = 2
MAX_SHARES = 262144


def _reserved(cfg: AgentConfig, name: str) -> int:
    total = 0
    for res in (cfg.system_reserved, cfg.kube_reserved):
        if name in res:
            total += milli_value(res[name]) if name == "cpu" else value(res[name])
    return total


def pods_limits(cfg: AgentConfig, facts: HostFacts) -> tuple[int, int]:
    """(cpu shares, memory bytes) for the kubepods cgroup: upstream's allocatable without eviction."""
    cpu_m = max(facts.cpus * 1000 - _reserved(cfg, "cpu"), 0)
    shares = min(max(cpu_m * 1024 // 1000, MIN_SHARES), MAX_SHARES)
    memory = max(facts.memory_bytes - _reserved(cfg, "memory"), 0)
    return shares, memory


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def enforce_node_allocatable(cfg: AgentConfig, facts: HostFacts, root: Path = CGROUP_FS) -> bool:
    """Set the kubepods cgroup's cpu and memory limits; True when done (the NodeAllocatableEnforced
    event is then due)."""
    if not cfg.cgroups_per_qos or cfg.cgroup_driver != "cgroupfs":
        return False
    try:
        shares, memory = pods_limits(cfg, facts)
    except QuantityError as err:
        log.warning("reservations not understood, allocatable not enforced error=%r", str(err))
        return False
    pods = cfg.cgroup_root.strip("/") + "/kubepods" if cfg.cgroup_root.strip("/") else "kubepods"
    try:
        if (root / "cgroup.controllers").exists():
            weight = 1 + ((shares - 2) * 9999) // 262142  # upstream's CpuSharesToCpuWeight
            _write(root / pods / "cpu.weight", str(weight))
            _write(root / pods / "memory.max", str(memory))
        else:
            _write(root / "cpu" / pods / "cpu.shares", str(shares))
            _write(root / "memory" / pods / "memory.limit_in_bytes", str(memory))
    except OSError as err:
        log.warning("node allocatable not enforced cgroup=%s error=%r", pods, str(err))
        return False
    log.info("node allocatable enforced cgroup=%s cpu_shares=%d memory=%d", pods, shares, memory)
    return True
