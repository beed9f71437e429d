"""Reading the host's shared state: mounts, processes, network links and our nftables entries.

The leak checks (what a session still owns) and the sweep of `pykubelet down` (remove whatever a state
dir still owns) ask the same questions of the host, so they share these readers. Each answers for
things named by where they live (paths under a state dir, a bridge name, a pod CIDR), never "what is
new on the host", because the host is shared with its own services and with other sessions.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import psutil

SHIM_NAMES = ("containerd-shim-runc-v2", "containerd-shim")
_OCTAL = re.compile(r"\\([0-7]{3})")


def is_under(path: str, roots: Iterable[str]) -> bool:
    """True when `path` (absolute, normalised) is one of `roots` or inside one, component by component
    (/tmp/a-1 is not inside /tmp/a)."""
    for root in roots:
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return True
    return False


def resolved(paths: Iterable[os.PathLike[str] | str]) -> tuple[str, ...]:
    """Absolute, symlink-free spellings, as the kernel reports mount points and cwds."""
    return tuple(os.path.realpath(p) for p in paths)


# -- mounts -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    source: str

    @property
    def is_netns(self) -> bool:
        """A network namespace kept alive by a bind mount (what `ip netns add` and containerd make)."""
        return self.fstype == "nsfs"


def _unescape(field: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def mounts() -> list[Mount]:
    """This mount namespace's mounts, from /proc/self/mountinfo."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-", 6)
            found.append(Mount(_unescape(fields[4]), fields[sep + 1], _unescape(fields[sep + 2])))
    return found


def mounts_under(roots: Iterable[str]) -> list[Mount]:
    roots = tuple(roots)
    return [m for m in mounts() if is_under(m.point, roots)]


def unmount_all_under(roots: Iterable[str]) -> None:
    """Lazily unmount everything under roots, deepest first (a busy mount goes once its users do)."""
    for mount in sorted(mounts_under(roots), key=lambda m: len(m.point), reverse=True):
        subprocess.run(["umount", "-l", mount.point], capture_output=True, check=False)


# -- processes --------------------------------------------------------------------------------------


def _own_lineage() -> set[int]:
    """This process and its ancestors: the test runner or `pykubelet down` whose own command line may
    name the state dir it checks."""
    pids = {os.getpid()}
    try:
        for parent in psutil.Process().parents():
            pids.add(parent.pid)
    except psutil.Error:
        pass
    return pids


def _names_path_under(cmdline: list[str], cwd: str | None, roots: tuple[str, ...]) -> bool:
    for arg in cmdline:
        candidates = [arg]
        if "=" in arg:
            candidates.append(arg.split("=", 1)[1])
        for candidate in candidates:
            if not candidate:
                continue
            if candidate.startswith("/"):
                if is_under(os.path.normpath(candidate), roots):
                    return True
            elif cwd and is_under(os.path.normpath(os.path.join(cwd, candidate)), roots):
                return True
        # a path inside a longer argument (`sh -c "... /state/x"`)
        if any(root + "/" in arg for root in roots):
            return True
    return False


@dataclass(frozen=True)
class OwnedProcess:
    pid: int
    name: str
    cmdline: tuple[str, ...]
    is_shim: bool

    def describe(self) -> str:
        return f"{self.pid} {' '.join(self.cmdline)[:160] or self.name}"


def processes_of(roots: Iterable[str]) -> list[OwnedProcess]:
    """Processes that belong to roots: their command line names a path under one (absolute, or relative
    to their working directory), or they work inside one; a shim counts when its -address (the socket
    of the containerd it serves) is under one, and so does everything running under such a shim
    (the sandboxes' and containers' processes). This process and its ancestors never count."""
    roots = tuple(roots)
    skip = _own_lineage()
    owned: dict[int, OwnedProcess] = {}
    shims: list[psutil.Process] = []
    for proc in psutil.process_iter(["name", "cmdline", "cwd", "status"]):
        info = proc.info
        if proc.pid in skip or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cmdline = info["cmdline"] or []
        cwd = info["cwd"]
        is_shim = (info["name"] or "") in SHIM_NAMES
        if is_shim:
            ours = _flag_value(cmdline, "-address") is not None and is_under(
                os.path.normpath(_flag_value(cmdline, "-address") or ""), roots
            )
        else:
            ours = _names_path_under(cmdline, cwd, roots) or (cwd is not None and is_under(cwd, roots))
        if ours:
            owned[proc.pid] = OwnedProcess(proc.pid, info["name"] or "", tuple(cmdline), is_shim)
            if is_shim:
                shims.append(proc)
    for shim in shims:
        try:
            family = shim.children(recursive=True)
        except psutil.Error:
            continue
        for child in family:
            if child.pid in owned or child.pid in skip:
                continue
            try:
                owned[child.pid] = OwnedProcess(child.pid, child.name(), tuple(child.cmdline()), False)
            except psutil.Error:
                continue
    return sorted(owned.values(), key=lambda p: p.pid)


def _flag_value(cmdline: list[str], flag: str) -> str | None:
    for i, arg in enumerate(cmdline):
        if arg == flag and i + 1 < len(cmdline):
            return cmdline[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


# -- links ------------------------------------------------------------------------------------------


def links() -> list[dict]:
    """Every network link of the host namespace (`ip -j -d link`: name, kind, master)."""
    out = subprocess.run(["ip", "-j", "-d", "link", "show"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return []
    return json.loads(out.stdout or "[]")


def link_kind(link: dict) -> str:
    return (link.get("linkinfo") or {}).get("info_kind", "")


# -- nftables ---------------------------------------------------------------------------------------


def _elements(objs: list[dict]) -> Iterator[ipaddress.IPv4Network]:
    for obj in objs:
        for elem in (obj.get("set") or {}).get("elem") or []:
            if isinstance(elem, str):
                yield ipaddress.IPv4Network(elem, strict=False)
            elif "prefix" in elem:
                yield ipaddress.IPv4Network(f"{elem['prefix']['addr']}/{elem['prefix']['len']}", strict=False)
            elif "range" in elem:
                low, high = (ipaddress.IPv4Address(a) for a in elem["range"])
                yield from ipaddress.summarize_address_range(low, high)


def nft_entries_for(pod_cidrs: Iterable[str]) -> list[str]:
    """Our CNI's nftables entries (table ip pykubelet-cni, shared by every pod network on the host) that
    belong to these pod networks: their subnet in the pod_nets/masq_nets sets, hostPort DNAT rules
    into them."""
    nets = [ipaddress.IPv4Network(c, strict=False) for c in pod_cidrs]
    if not nets or os.geteuid() != 0:
        return []
    from agent.cni import nat

    try:
        found = []
        for set_name in ("pod_nets", "masq_nets"):
            for element in _elements(nat.nft().json(f"list set ip {nat.TABLE} {set_name}") or []):
                if any(element.overlaps(n) for n in nets):
                    found.append(f"{nat.TABLE} {set_name} {element}")
        if nat.nft().json(f"list table ip {nat.TABLE}") is not None:
            for handle, comment, target in nat.hostport_rules():
                try:
                    address = ipaddress.IPv4Address(target)
                except ValueError:
                    continue
                if any(address in n for n in nets):
                    found.append(f"{nat.TABLE} hostports rule {handle} ({comment}) -> {target}")
        return found
    except Exception:  # no nftables on this host (CniError, OSError): nothing of ours can be there
        return []
