"""A bridge name and a pod CIDR of a session's own, so two sessions on one host never share either.

Sessions (the test suite, the e2e stack, each benchmark, a `pykubelet up` under test) used to pick
fixed names and ranges; two of them on one machine then fought over one bridge and one route. A lease
takes the first /24 of POOL whose lock file nobody holds (flock: the kernel releases it when its
holder exits, even by SIGKILL) and that no route on the host overlaps (a crashed session's bridge
keeps its route until someone removes it), and names the bridge after it.

Only every other /24 is handed out, so no two leased ranges are adjacent: the CNI's nftables sets
auto-merge adjacent ranges into one interval, from which nftables 1.0.6 cannot delete one /24 again
(removing one network would fail and leave both in the sets).
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

POOL = ipaddress.IPv4Network("10.200.0.0/16")
LEASE_DIR = Path("/run/pykubelet/network-leases")


@dataclass
class NetworkLease:
    bridge: str
    pod_cidr: str
    _fd: int | None = field(default=None, repr=False)

    @property
    def service_cidr(self) -> str:
        """The service range of this lease's stack: see `service_range_for`."""
        service = service_range_for(self.pod_cidr)
        assert service is not None
        return service

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> NetworkLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _routed_networks() -> list[ipaddress.IPv4Network]:
    out = subprocess.run(
        ["ip", "-j", "-4", "route", "show", "table", "all"], capture_output=True, text=True, check=False
    )
    nets = []
    for route in json.loads(out.stdout or "[]") if out.returncode == 0 else []:
        dst = route.get("dst", "")
        if dst and dst != "default":
            try:
                nets.append(ipaddress.IPv4Network(dst, strict=False))
            except ValueError:
                continue
    return nets


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True, check=False).returncode == 0


def lease_network(tag: str = "s") -> NetworkLease:
    """The first free (bridge, /24) of POOL, held until release() or until this process exits.
    `tag` (a letter or two) goes into the bridge name, so a leftover bridge tells whose it was."""
    LEASE_DIR.mkdir(parents=True, exist_ok=True)
    routed = _routed_networks()
    for index, subnet in enumerate(POOL.subnets(new_prefix=24)):
        if index == 0 or index % 2:
            continue  # never adjacent to another lease; 10.200.0.0/24 stays free for experiments
        bridge = f"pyk{tag[:4]}{index}"
        fd = os.open(
            LEASE_DIR / f"{subnet.network_address}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if any(subnet.overlaps(r) for r in routed) or _link_exists(bridge):
            os.close(fd)
            continue
        return NetworkLease(bridge, str(subnet), fd)
    raise RuntimeError(f"no free /24 left in {POOL} (every lease in {LEASE_DIR} is held)")


CLUSTER_POOL = ipaddress.IPv4Network("10.201.0.0/16")
CLUSTER_PREFIX = 20  # 16 node blocks of /24


def lease_cluster_network(tag: str = "m") -> NetworkLease:
    """A cluster CIDR of a session's own (the first free /20 of CLUSTER_POOL, every other one, as
    lease_network does) for a multi-node stack whose node IPAM hands out /24s from it; `bridge` is the
    first node's bridge, the others' are named after it."""
    LEASE_DIR.mkdir(parents=True, exist_ok=True)
    routed = _routed_networks()
    for index, subnet in enumerate(CLUSTER_POOL.subnets(new_prefix=CLUSTER_PREFIX)):
        if index % 2:
            continue
        bridge = f"pyk{tag[:3]}c{index}"
        fd = os.open(
            LEASE_DIR / f"{subnet.network_address}-{CLUSTER_PREFIX}.lock",
            os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
            0o600,
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if any(subnet.overlaps(r) for r in routed) or _link_exists(bridge):
            os.close(fd)
            continue
        return NetworkLease(bridge, str(subnet), fd)
    raise RuntimeError(
        f"no free /{CLUSTER_PREFIX} left in {CLUSTER_POOL} (every lease in {LEASE_DIR} is held)"
    )


SERVICE_POOL = ipaddress.IPv4Network("10.202.0.0/15")


def service_range_for(pod_or_cluster_cidr: str) -> str | None:
    """The /24 service range that goes with a leased pod network, or None for a range no lease hands out.

    A stack's service proxy DNATs its cluster IPs on the whole host, so two stacks on one range (the
    kubernetes Service's .1 and cluster DNS's .10 in each) would catch each other's traffic. Each lease
    therefore implies a service range of its own, as unique as the lease itself: 10.200.N.0/24 (a pod
    network) gives 10.202.N.0/24, 10.201.M.0/20 (a cluster network) gives 10.203.M.0/24.
    """
    try:
        net = ipaddress.IPv4Network(pod_or_cluster_cidr, strict=False)
    except ValueError:
        return None
    third = int(net.network_address) >> 8 & 0xFF
    if net.subnet_of(POOL):
        return f"10.202.{third}.0/24"
    if net.subnet_of(CLUSTER_POOL):
        return f"10.203.{third}.0/24"
    return None


def loopback_for(pod_or_cluster_cidr: str, host: int = 1) -> str | None:
    """A loopback address of a leased network's own, or None for a range no lease hands out.

    Stacks on one host bind their ingress controller here, so each can serve ports 80 and 443 and every
    Gateway listener's port without meeting another stack's: every 127.0.0.0/8 address binds on Linux
    with no configuration, and the address is as unique as the lease: 10.200.N.0/24 (a pod network)
    gives 127.200.N.`host`, 10.201.M.0/20 (a cluster network) 127.201.M.`host`. Only the host reaches it
    (not the pods, whose loopback is their own): nothing of the stack's reaches its ingress from a pod.
    """
    try:
        net = ipaddress.IPv4Network(pod_or_cluster_cidr, strict=False)
    except ValueError:
        return None
    third = int(net.network_address) >> 8 & 0xFF
    for pool in (POOL, CLUSTER_POOL):
        if net.subnet_of(pool):
            return f"127.{int(pool.network_address) >> 16 & 0xFF}.{third}.{host}"
    return None
