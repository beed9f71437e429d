"""Addresses for simulated nodes and their pods: node i gets one address from the node range and a /24
of pod addresses of its own, so every pod IP is unique and says which node it is on."""

from __future__ import annotations

import ipaddress


class Addresses:
    def __init__(self, node_base: str, pod_base: str) -> None:
        self._node_base = int(ipaddress.IPv4Address(node_base))
        self._pod_base = int(ipaddress.IPv4Address(pod_base))
        self._next: dict[int, int] = {}
        self._free: dict[int, list[int]] = {}

    def node_ip(self, index: int) -> str:
        return str(ipaddress.IPv4Address(self._node_base + 1 + index))

    def pod_cidr(self, index: int) -> str:
        return f"{ipaddress.IPv4Address(self._pod_base + index * 256)}/24"

    def take_pod_ip(self, index: int) -> str:
        """The next free address of node `index`'s /24 (.1 to .254, reused once released)."""
        free = self._free.setdefault(index, [])
        if free:
            host = free.pop()
        else:
            host = self._next.get(index, 0) + 1
            if host > 254:
                raise ValueError(f"node {index} has no pod address left")
            self._next[index] = host
        return str(ipaddress.IPv4Address(self._pod_base + index * 256 + host))

    def release_pod_ip(self, index: int, ip: str) -> None:
        host = int(ipaddress.IPv4Address(ip)) - (self._pod_base + index * 256)
        if 0 < host < 255:
            self._free.setdefault(index, []).append(host)
