"""Masquerade and hostPort DNAT in one nftables table shared by every pod network on the node.

Layout of table `ip pykubelet-cni`:
  set pod_nets / masq_nets   pod subnets (all / those with ipMasq), so per-network setup is one
                             idempotent `add element` instead of a rule per pod;
  chain hostports            one DNAT rule per port mapping, commented "<containerID>/<ifname>" so DEL
                             and GC find them without any state of our own;
  prerouting/output          jump to hostports for traffic addressed to this host;
  postrouting                masquerade: hairpin (pod -> hostPort -> pod), 127.0.0.1 -> hostPort and
                             pod -> outside for masq_nets.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from agent.cni.netconf import PortMapping
from agent.cni.nft import Nft

TABLE = "pykubelet-cni"
LOCK_PATH = "/run/pykubelet/cni-nft.lock"

_TABLE_DEF = f"""
add table ip {TABLE}
add set ip {TABLE} pod_nets {{ type ipv4_addr; flags interval; }}
add set ip {TABLE} masq_nets {{ type ipv4_addr; flags interval; }}
add chain ip {TABLE} hostports
add chain ip {TABLE} prerouting {{ type nat hook prerouting priority -100; policy accept; }}
add chain ip {TABLE} output {{ type nat hook output priority -100; policy accept; }}
add chain ip {TABLE} postrouting {{ type nat hook postrouting priority 100; policy accept; }}
add rule ip {TABLE} prerouting fib daddr type local jump hostports
add rule ip {TABLE} output fib daddr type local jump hostports
add rule ip {TABLE} postrouting ct status dnat ip saddr @pod_nets ip daddr @pod_nets masquerade
add rule ip {TABLE} postrouting ct status dnat ip saddr 127.0.0.0/8 masquerade
add rule ip {TABLE} postrouting ip saddr @masq_nets ip daddr != @pod_nets ip daddr != 224.0.0.0/4 masquerade
"""

_thread_lock = threading.Lock()
_nft: Nft | None = None


def nft() -> Nft:
    global _nft
    if _nft is None:
        _nft = Nft()
    return _nft


@contextmanager
def _locked() -> Iterator[None]:
    """Serialise table changes across threads and across standalone plugin processes."""
    with _thread_lock:
        os.makedirs(os.path.dirname(LOCK_PATH), exist_ok=True)
        fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def attachment_key(container_id: str, ifname: str) -> str:
    return f"{container_id}/{ifname}"


def _ensure_table() -> None:
    if nft().json(f"list table ip {TABLE}") is None:
        nft().run(_TABLE_DEF)


def ensure_network(subnet: ipaddress.IPv4Network, masquerade: bool) -> None:
    """Make sure the table exists and the subnet is in the pod (and masquerade) sets.

    Runs on every ADD so a flushed ruleset heals; adding an existing element is a no-op in nftables,
    so the common case is one library call and the table is only built when that call fails."""
    cmds = f"add element ip {TABLE} pod_nets {{ {subnet} }}\n"
    if masquerade:
        cmds += f"add element ip {TABLE} masq_nets {{ {subnet} }}\n"
    with _locked():
        ok, _, _ = nft().run(cmds, check=False)
        if not ok:
            _ensure_table()
            nft().run(cmds)


def add_port_mappings(key: str, pod_ip: ipaddress.IPv4Address, mappings: list[PortMapping]) -> None:
    """One DNAT rule per mapping, all in one transaction."""
    if not mappings:
        return
    lines = []
    for pm in mappings:
        match = f"ip daddr {pm.host_ip} " if pm.host_ip else ""
        lines.append(
            f"add rule ip {TABLE} hostports {match}meta l4proto {pm.protocol} th dport {pm.host_port} "
            f'dnat to {pod_ip}:{pm.container_port} comment "{key}"'
        )
    with _locked():
        _ensure_table()
        nft().run("\n".join(lines) + "\n")


def hostport_rules() -> list[tuple[int, str, str]]:
    """(handle, comment, DNAT target address) of every hostPort rule."""
    objs = nft().json(f"list chain ip {TABLE} hostports") or []
    out = []
    for o in objs:
        rule = o.get("rule")
        if rule is None:
            continue
        target = ""
        for expr in rule.get("expr", []):
            if isinstance(expr, dict) and "dnat" in expr:
                target = str(expr["dnat"].get("addr", ""))
        out.append((rule["handle"], rule.get("comment", ""), target))
    return out


def _delete_handles(handles: list[int]) -> None:
    if handles:
        nft().run("".join(f"delete rule ip {TABLE} hostports handle {h}\n" for h in handles))


def remove_port_mappings(key: str) -> int:
    """Delete every DNAT rule of one attachment; nothing to delete is fine."""
    with _locked():
        handles = [h for h, comment, _ in hostport_rules() if comment == key]
        _delete_handles(handles)
        return len(handles)


def gc_port_mappings(subnet: ipaddress.IPv4Network, valid: set[str]) -> int:
    """Delete DNAT rules into `subnet` whose attachment is not in `valid` (CNI 1.1 GC)."""

    def in_subnet(addr: str) -> bool:
        try:
            return ipaddress.IPv4Address(addr) in subnet
        except ValueError:
            return False

    with _locked():
        handles = [h for h, comment, target in hostport_rules() if in_subnet(target) and comment not in valid]
        _delete_handles(handles)
        return len(handles)


def remove_network(subnet: ipaddress.IPv4Network) -> None:
    """Forget a pod network; the table goes when no network is left (teardown of a node/test)."""
    with _locked():
        if nft().json(f"list table ip {TABLE}") is None:
            return
        for set_name in ("pod_nets", "masq_nets"):
            nft().run(f"delete element ip {TABLE} {set_name} {{ {subnet} }}\n", check=False)
        sets = nft().json(f"list set ip {TABLE} pod_nets") or []
        empty = all(not o.get("set", {}).get("elem") for o in sets if "set" in o)
        if empty and not hostport_rules():
            nft().run(f"delete table ip {TABLE}\n")
