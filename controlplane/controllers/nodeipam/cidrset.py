"""Which node-sized blocks of the cluster CIDR are taken: upstream's cidrset (pkg/controller/nodeipam/
ipam/cidrset) as a pure object, so the allocator's rules are tested without an API server.

Block i of a cluster CIDR C with node mask m is C's address with i in the bits between C's prefix and m.
`allocate_next` hands out the first free block at or after the one after the last handed out (wrapping
around), as upstream's nextCandidate does, so a block just released is not reused at once. `occupy` and
`release` take any CIDR overlapping the cluster range (a larger one marks every block it covers) and
never double-count.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

# Upstream's texts (cidr_set.go).
NO_CIDRS_REMAINING = (
    "CIDR allocation failed; there are no remaining CIDRs left to allocate in the accepted range"
)
SUBNET_TOO_BIG = "New CIDR set failed; the node CIDR size is too big"


class CIDRSetError(ValueError):
    pass


@dataclass
class CIDRSet:
    cluster: ipaddress.IPv4Network
    node_mask: int
    used: set[int] = field(default_factory=set)
    next_candidate: int = 0

    def __post_init__(self) -> None:
        if self.node_mask < self.cluster.prefixlen or self.node_mask > 32:
            raise CIDRSetError(SUBNET_TOO_BIG)

    @classmethod
    def parse(cls, cluster_cidr: str, node_mask: int) -> CIDRSet:
        return cls(ipaddress.IPv4Network(cluster_cidr, strict=False), node_mask)

    @property
    def max_cidrs(self) -> int:
        return 1 << (self.node_mask - self.cluster.prefixlen)

    @property
    def allocated(self) -> int:
        return len(self.used)

    def block(self, index: int) -> ipaddress.IPv4Network:
        base = int(self.cluster.network_address) | (index << (32 - self.node_mask))
        return ipaddress.IPv4Network((base, self.node_mask))

    def allocate_next(self) -> ipaddress.IPv4Network:
        if len(self.used) >= self.max_cidrs:
            raise CIDRSetError(NO_CIDRS_REMAINING)
        candidate = self.next_candidate
        while candidate in self.used:
            candidate = (candidate + 1) % self.max_cidrs
        self.next_candidate = (candidate + 1) % self.max_cidrs
        self.used.add(candidate)
        return self.block(candidate)

    def _indices(self, cidr: ipaddress.IPv4Network) -> range:
        if not cidr.overlaps(self.cluster):
            raise CIDRSetError(f"cidr {cidr} is out the range of cluster cidr {self.cluster}")
        if cidr.prefixlen <= self.cluster.prefixlen:
            return range(self.max_cidrs)  # it covers the whole cluster range
        shift = 32 - self.node_mask
        offset = int(self.cluster.network_address)
        first = (int(cidr.network_address) - offset) >> shift
        last = (int(cidr.broadcast_address) - offset) >> shift
        return range(first, last + 1)

    def occupy(self, cidr: ipaddress.IPv4Network) -> None:
        self.used.update(self._indices(cidr))

    def release(self, cidr: ipaddress.IPv4Network) -> None:
        self.used.difference_update(self._indices(cidr))
