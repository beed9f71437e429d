"""The ranges Services are given addresses and node ports from (kube-apiserver's
--service-cluster-ip-range and --service-node-port-range), in one place for the allocator, the
`kubernetes` Service and the serving certificate.

The first address of the cluster IP range is the `kubernetes` Service's (upstream's rule); the
allocator hands out the rest, keeping the first ten for addresses people pin (cluster DNS's .10).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

DEFAULT_CLUSTER_IP_RANGE = "10.96.0.0/16"
DEFAULT_NODE_PORT_RANGE = "30000-32767"
_PINNED = 10  # addresses at the start of the range left to Services that name their clusterIP


def parse_port_range(text: str) -> range:
    """utilnet.PortRange's syntax: "N-M", "N+OFFSET" or "N"; ValueError in upstream's words."""
    value = text.strip()
    try:
        if "-" in value:
            low_text, high_text = value.split("-", 1)
            low, high = int(low_text), int(high_text)
        elif "+" in value:
            low_text, offset = value.split("+", 1)
            low = int(low_text)
            high = low + int(offset)
        else:
            low = high = int(value)
    except ValueError:
        raise ValueError(f"unable to parse port range: {text}: invalid syntax") from None
    if not (0 <= low <= 65535 and 0 <= high <= 65535) or high < low:
        raise ValueError(f"range {text!r} is not a valid port range")
    return range(low, high + 1)


def parse_cidr(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        net = ipaddress.ip_network(text.strip(), strict=True)
    except ValueError as err:
        raise ValueError(f"invalid CIDR {text!r}: {err}") from None
    if net.num_addresses < 8:
        raise ValueError(f"service IP range {text} is too small (at least 8 addresses)")
    return net


@dataclass(frozen=True)
class ServiceRanges:
    cluster_ip_range: ipaddress.IPv4Network | ipaddress.IPv6Network = field(
        default_factory=lambda: parse_cidr(DEFAULT_CLUSTER_IP_RANGE)
    )
    node_ports: range = field(default_factory=lambda: parse_port_range(DEFAULT_NODE_PORT_RANGE))

    @property
    def kubernetes_service_ip(self) -> str:
        return str(self.cluster_ip_range.network_address + 1)

    @property
    def ip_count(self) -> int:
        """How many addresses are handed out (the network, broadcast and pinned ones left out)."""
        net = self.cluster_ip_range
        last = net.num_addresses - 1 if net.version == 4 else net.num_addresses
        return max(0, last - _PINNED)

    def ip_at(self, index: int) -> str:
        """The allocator's `index`th address, in order."""
        return str(self.cluster_ip_range.network_address + _PINNED + index)

    def contains_ip(self, ip: str) -> bool:
        try:
            return ipaddress.ip_address(ip) in self.cluster_ip_range
        except ValueError:
            return False

    def port_range_text(self) -> str:
        return f"{self.node_ports.start}-{self.node_ports.stop - 1}"
