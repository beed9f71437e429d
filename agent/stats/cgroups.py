"""CPU and memory of one cgroup, read as cadvisor reads them (v1: cpuacct + memory hierarchies; v2: the
unified hierarchy), so the node's and the pods' figures mean what upstream's do.

Working set is usage minus inactive file pages (cadvisor's setMemoryStats), never below 0; the limit is
None when the cgroup has none (v1's near-2^63 value, v2's "max").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agent.stats.kernelfiles import read_small as _read

CGROUP_FS = Path("/sys/fs/cgroup")
# cgroup v1 writes an unlimited limit as the largest page-aligned int64.
_V1_UNLIMITED = 1 << 62
_V1_STAT = ("total_inactive_file", "total_rss", "total_pgfault", "total_pgmajfault")
_V2_STAT = ("inactive_file", "anon", "pgfault", "pgmajfault")


@dataclass(frozen=True)
class CgroupUsage:
    cpu_usage_ns: int | None = None
    memory_usage: int | None = None
    working_set: int | None = None
    rss: int | None = None
    page_faults: int | None = None
    major_page_faults: int | None = None
    memory_limit: int | None = None
    # Swap in use and its limit (None: no swap accounting, or unlimited), as cadvisor: v2's
    # memory.swap.current / memory.swap.max; v1's memsw (memory+swap) usage minus memory usage, and the
    # memsw limit, only where the kernel accounts swap (swapaccount=1).
    swap_usage: int | None = None
    swap_limit: int | None = None


def parse_flat_keyed(text: str | bytes, keys: tuple[str, ...] | None = None) -> dict[str, int]:
    """`key value` lines (memory.stat, cpu.stat) as a dict (only `keys` when given); lines that are no
    such pair are skipped. A stats pass parses a few hundred of these: a well-formed file (every line
    one pair, as the kernel writes them) is split in one call, anything else line by line."""
    raw = text.encode() if isinstance(text, str) else text
    tokens = raw.split()
    table: dict[bytes, bytes] = {}
    if len(tokens) == 2 * raw.count(b"\n") + (0 if raw.endswith(b"\n") or not raw else 2):
        pairs = iter(tokens)
        table = dict(zip(pairs, pairs, strict=True))
    else:
        for line in raw.splitlines():
            parts = line.split()
            if len(parts) == 2:
                table[parts[0]] = parts[1]
    wanted = [k.encode() for k in keys] if keys is not None else list(table)
    out: dict[str, int] = {}
    for key in wanted:
        value = table.get(key)
        if value is not None and value.lstrip(b"-").isdigit():
            out[key.decode()] = int(value)
    return out


def _read_int(path: str) -> int | None:
    text = _read(path)
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.lstrip(b"-").isdigit() else None


def working_set(usage: int, inactive_file: int) -> int:
    return max(usage - inactive_file, 0) if usage > inactive_file else 0


@dataclass(frozen=True)
class Cgroups:
    """The host's cgroup file system: v2 when /sys/fs/cgroup is the unified hierarchy (decided once).
    Paths are plain strings: a stats pass reads a few hundred small files, and pathlib's objects cost
    more than the reads."""

    root: Path = CGROUP_FS
    unified: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "unified", (self.root / "cgroup.controllers").exists())

    def _dir(self, controller: str, path: str) -> str:
        rel = path.strip("/")
        base = str(self.root) if self.unified else f"{self.root}/{controller}"
        return f"{base}/{rel}" if rel else base

    def usage(self, path: str, memory_path: str | None = None) -> CgroupUsage | None:
        """The cgroup's figures, or None when it does not exist (a pod being removed). On v1 a process
        may sit in different groups per controller (`memory_path`: its memory group, when not `path`)."""
        if self.unified:
            return self._v2(self._dir("", path))
        return self._v1(path, path if memory_path is None else memory_path)

    def pids(self, path: str) -> int | None:
        """Processes (tasks) in the cgroup now: pids.current of the pids controller."""
        return _read_int(self._dir("pids", path) + "/pids.current")

    def _v1(self, path: str, memory_path: str) -> CgroupUsage | None:
        cpu_dir = self._dir("cpuacct", path)
        mem_dir = self._dir("memory", memory_path)
        cpu = _read_int(cpu_dir + "/cpuacct.usage")
        stat_text = _read(mem_dir + "/memory.stat")
        usage = _read_int(mem_dir + "/memory.usage_in_bytes")
        if cpu is None and usage is None:
            return None
        stat = parse_flat_keyed(stat_text or b"", _V1_STAT)
        limit = _read_int(mem_dir + "/memory.limit_in_bytes")
        memsw = _read_int(mem_dir + "/memory.memsw.usage_in_bytes")
        memsw_limit = _read_int(mem_dir + "/memory.memsw.limit_in_bytes") if memsw is not None else None
        return CgroupUsage(
            cpu_usage_ns=cpu,
            memory_usage=usage,
            working_set=None if usage is None else working_set(usage, stat.get("total_inactive_file", 0)),
            rss=stat.get("total_rss"),
            page_faults=stat.get("total_pgfault"),
            major_page_faults=stat.get("total_pgmajfault"),
            memory_limit=None if limit is None or limit >= _V1_UNLIMITED else limit,
            swap_usage=max(memsw - usage, 0) if memsw is not None and usage is not None else None,
            swap_limit=None if memsw_limit is None or memsw_limit >= _V1_UNLIMITED else memsw_limit,
        )

    def _v2(self, d: str) -> CgroupUsage | None:
        cpu_text = _read(d + "/cpu.stat")
        if cpu_text is None:
            return None
        cpu = parse_flat_keyed(cpu_text, ("usage_usec",))
        stat = parse_flat_keyed(_read(d + "/memory.stat") or b"", _V2_STAT)
        usage = _read_int(d + "/memory.current")
        limit_text = (_read(d + "/memory.max") or b"").strip()
        swap_max = (_read(d + "/memory.swap.max") or b"").strip()
        return CgroupUsage(
            cpu_usage_ns=cpu["usage_usec"] * 1000 if "usage_usec" in cpu else None,
            memory_usage=usage,
            working_set=None if usage is None else working_set(usage, stat.get("inactive_file", 0)),
            rss=stat.get("anon"),
            page_faults=stat.get("pgfault"),
            major_page_faults=stat.get("pgmajfault"),
            memory_limit=int(limit_text) if limit_text.isdigit() else None,
            swap_usage=_read_int(d + "/memory.swap.current"),
            swap_limit=int(swap_max) if swap_max.isdigit() else None,
        )


def cgroupfs_path(parent: str) -> str:
    """The cgroup path of a CRI cgroup_parent: cgroupfs paths as they are, systemd slices expanded
    (kubepods-burstable-pod1.slice -> kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice)."""
    if not parent.endswith(".slice") or "/" in parent.strip("/"):
        return parent
    name = parent.strip("/")[: -len(".slice")]
    parts = name.split("-")
    return "/" + "/".join("-".join(parts[: i + 1]) + ".slice" for i in range(len(parts)))


def container_cgroup(pod_parent: str, container_id: str) -> str:
    """The cgroup runc makes for a CRI container under its sandbox's cgroup parent, as containerd's CRI
    plugin names it: `<parent>/<id>` with cgroupfs, `<parent slice>/cri-containerd-<id>.scope` with the
    systemd driver (cgroupsPath `<parent>:cri-containerd:<id>`)."""
    if pod_parent.endswith(".slice"):
        return f"{cgroupfs_path(pod_parent).rstrip('/')}/cri-containerd-{container_id}.scope"
    return f"{pod_parent.rstrip('/')}/{container_id}"


def parse_proc_cgroup(text: str) -> tuple[str, str]:
    """(cpu path, memory path) of a process from /proc/<pid>/cgroup: v2's one `0::` path for both, else
    the v1 cpuacct and memory controllers' own lines (upstream's getContainer reads the same file)."""
    unified = cpu = memory = ""
    for line in text.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        names = controllers.split(",")
        if controllers == "":
            unified = path
        if "cpuacct" in names:
            cpu = path
        if "memory" in names:
            memory = path
    if cpu or memory:
        return cpu or "/", memory or "/"
    return unified or "/", unified or "/"
