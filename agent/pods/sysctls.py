"""Which sysctls a pod may set, as upstream's kubelet admits them (pkg/kubelet/sysctl): the safe set
(namespaced and isolated from other pods, some only on kernels that namespace them) plus the node's
allowedUnsafeSysctls (names or prefixes ending in `*`, each known to be namespaced). Anything else, or a
network sysctl in a hostNetwork pod (an IPC one with hostIPC), is refused at admission with reason
SysctlForbidden, so the pod fails on this node instead of changing the host's kernel settings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

FORBIDDEN_REASON = "SysctlForbidden"

# (name, the first kernel that namespaces it; "" for any)
_SAFE: tuple[tuple[str, str], ...] = (
    ("kernel.shm_rmid_forced", ""),
    ("net.ipv4.ip_local_port_range", ""),
    ("net.ipv4.tcp_syncookies", ""),
    ("net.ipv4.ping_group_range", ""),
    ("net.ipv4.ip_unprivileged_port_start", ""),
    ("net.ipv4.ip_local_reserved_ports", "3.16"),
    ("net.ipv4.tcp_keepalive_time", "4.5"),
    ("net.ipv4.tcp_fin_timeout", "4.6"),
    ("net.ipv4.tcp_keepalive_intvl", "4.5"),
    ("net.ipv4.tcp_keepalive_probes", "4.5"),
    ("net.ipv4.tcp_rmem", ""),
    ("net.ipv4.tcp_wmem", ""),
)

_NAMESPACES = {"kernel.sem": "ipc"}
_PREFIX_NAMESPACES = {"kernel.shm": "ipc", "kernel.msg": "ipc", "fs.mqueue.": "ipc", "net.": "net"}


def dotted(name: str) -> str:
    """A sysctl written with slashes (net/ipv4/conf/eth0.100/forwarding) in its dotted form, the two
    separators swapped as upstream's convertSysctlVariableToDotsSeparator does."""
    first = next((ch for ch in name if ch in "./"), "")
    if first != "/":
        return name
    return name.translate(str.maketrans("./", "/."))


def namespaced_by(name: str) -> str:
    """The kernel namespace that isolates a sysctl ("ipc", "net"), "" when none is known."""
    if name in _NAMESPACES:
        return _NAMESPACES[name]
    return next((ns for prefix, ns in _PREFIX_NAMESPACES.items() if name.startswith(prefix)), "")


def _kernel_at_least(release: str, want: str) -> bool:
    def parts(text: str) -> tuple[int, ...]:
        out = []
        for piece in text.split("-", 1)[0].split(".")[:3]:
            digits = "".join(ch for ch in piece if ch.isdigit())
            out.append(int(digits or 0))
        return tuple(out)

    return parts(release) >= parts(want)


def safe_sysctls(kernel_release: str | None = None) -> list[str]:
    release = kernel_release if kernel_release is not None else os.uname().release
    return [name for name, kernel in _SAFE if not kernel or _kernel_at_least(release, kernel)]


@dataclass(frozen=True)
class Allowlist:
    names: dict[str, str]  # sysctl -> its namespace
    prefixes: dict[str, str]

    @classmethod
    def build(cls, unsafe: list[str] | tuple[str, ...] = (), kernel_release: str | None = None) -> Allowlist:
        names: dict[str, str] = {}
        prefixes: dict[str, str] = {}
        for pattern in [*safe_sysctls(kernel_release), *unsafe]:
            pattern = dotted(pattern)
            if pattern.endswith("*"):
                ns = namespaced_by(pattern[:-1])
                if not ns:
                    raise ValueError(f'the sysctls "{pattern}" are not known to be namespaced')
                prefixes[pattern[:-1]] = ns
            else:
                ns = namespaced_by(pattern)
                if not ns:
                    raise ValueError(f'the sysctl "{pattern}" are not known to be namespaced')
                names[pattern] = ns
        return cls(names, prefixes)

    def problem(self, name: str, host_net: bool, host_ipc: bool) -> str | None:
        """Why the sysctl may not be set (upstream's validateSysctl wording), None when it may."""
        name = dotted(name)
        ns = self.names.get(name)
        if ns is None:
            ns = next((v for prefix, v in self.prefixes.items() if name.startswith(prefix)), None)
        if ns is None:
            return f'"{name}" not allowlisted'
        if (ns == "ipc" and host_ipc) or (ns == "net" and host_net):
            return f'"{name}" not allowed with host {ns} enabled'
        return None


def forbidden(pod: dict[str, Any], allowlist: Allowlist) -> str | None:
    """The admission message for a pod asking for a sysctl it may not set, else None."""
    spec = pod.get("spec") or {}
    for sysctl in (spec.get("securityContext") or {}).get("sysctls") or []:
        problem = allowlist.problem(
            sysctl.get("name", ""), bool(spec.get("hostNetwork")), bool(spec.get("hostIPC"))
        )
        if problem is not None:
            return f"forbidden sysctl: {problem}"
    return None
