"""The ruleset the Services need, as kube-proxy's nftables mode lays it out (pkg/proxy/nftables),
without I/O: pure from the service ports, their endpoints and this node's settings.

Traffic path: the nat hooks jump to `services`, whose verdict maps send a ClusterIP/externalIP/LB IP
(`service-ips`) or a node port on any local address (`service-nodeports`) to the service port's chain;
that chain picks an endpoint evenly (`numgen random mod N vmap`) among the ready ones (serving-
terminating ones only when none is ready), first honouring ClientIP affinity sets, and each endpoint
chain masquerades hairpin traffic (a pod reaching itself) and DNATs. External traffic (node ports, LB
IPs, external IPs) goes through an `external-` chain that masquerades (Cluster policy) or keeps the
source and uses node-local endpoints only (Local policy). Services without endpoints are rejected at
once by the filter hooks (`no-endpoint-services` / `no-endpoint-nodeports` -> `reject-chain`); an
unserved port of a ClusterIP is rejected by `cluster-ips-check`. Masquerading is marked (0x4000) and
done in postrouting, as upstream.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import ipaddress
from dataclasses import dataclass

from serviceproxy.model import Endpoint, ServicePort, ServicePortName, categorize
from serviceproxy.ruleset import Chain, NftSet, Ruleset

MASQ_MARK = "0x00004000"
NO_LOCALHOST = "ip daddr != 127.0.0.0/8"
SERVICES, MASQUERADING, MARK_MASQ = "services", "masquerading", "mark-for-masquerade"
ENDPOINTS_CHECK, CLUSTER_IPS_CHECK, REJECT = "service-endpoints-check", "cluster-ips-check", "reject-chain"
SERVICE_IPS, SERVICE_NODEPORTS = "service-ips", "service-nodeports"
NO_ENDPOINT_SERVICES, NO_ENDPOINT_NODEPORTS, CLUSTER_IPS = (
    "no-endpoint-services",
    "no-endpoint-nodeports",
    "cluster-ips",
)
FIREWALL_CHECK, FIREWALL_IPS, NODEPORT_IPS = "firewall-check", "firewall-ips", "nodeport-ips"
# name -> hook line (priorities: dstnat -100, srcnat 100; the filter chains see pre-DNAT addresses)
BASE_CHAINS = {
    "filter-prerouting": "type filter hook prerouting priority -110",
    "filter-input": "type filter hook input priority -110",
    "filter-forward": "type filter hook forward priority -110",
    "filter-output": "type filter hook output priority -110",
    "filter-output-post-dnat": "type filter hook output priority -90",
    "nat-prerouting": "type nat hook prerouting priority -100",
    "nat-output": "type nat hook output priority -100",
    "nat-postrouting": "type nat hook postrouting priority 100",
}
JUMPS = {
    "filter-prerouting": (f"ct state new jump {FIREWALL_CHECK}",),
    "filter-input": (f"ct state new jump {ENDPOINTS_CHECK}",),
    "filter-forward": (f"ct state new jump {ENDPOINTS_CHECK}", f"ct state new jump {CLUSTER_IPS_CHECK}"),
    "filter-output": (f"ct state new jump {ENDPOINTS_CHECK}", f"ct state new jump {FIREWALL_CHECK}"),
    "filter-output-post-dnat": (f"ct state new jump {CLUSTER_IPS_CHECK}",),
    "nat-prerouting": (f"jump {SERVICES}",),
    "nat-output": (f"jump {SERVICES}",),
    "nat-postrouting": (f"jump {MASQUERADING}",),
}
NAME_MAX = 256 - 16


@dataclass(frozen=True)
class NodeSettings:
    node_name: str
    cluster_cidr: str = ""  # pod traffic is "local" (upstream's detect-local-mode ClusterCIDR); "" = unknown
    masquerade_all: bool = False
    # The addresses NodePorts answer on (--nodeport-addresses resolved); None: every local address.
    nodeport_ips: tuple[str, ...] | None = None
    node_ips: tuple[str, ...] = ()  # this node's addresses (a source range holding one admits the node)
    service_cidrs: tuple[str, ...] = ()  # unallocated ClusterIPs in these ranges are dropped

    @property
    def nodeport_match(self) -> str:
        """What selects a node port's destination: any local address, or the nodeport-ips set."""
        if self.nodeport_ips is None:
            return f"fib daddr type local {NO_LOCALHOST}"
        return f"ip daddr @{NODEPORT_IPS}"


@functools.lru_cache(maxsize=1 << 16)
def hash_and_truncate(name: str) -> str:
    """upstream's hashAndTruncate: an 8-character base32 hash of the name, then the name."""
    digest = base64.b32encode(hashlib.sha256(name.encode()).digest()).decode()
    out = f"{digest[:8]}-{name}"
    return out if len(out) <= NAME_MAX else out[: NAME_MAX - 3] + "..."


def endpoint_base(svc: ServicePortName, ep: Endpoint) -> str:
    return hash_and_truncate(f"{svc.chain_base}__{ep.ip}/{ep.port}")


@dataclass(frozen=True)
class ChainNames:
    cluster: str
    local: str
    external: str
    firewall: str

    @classmethod
    def of(cls, name: ServicePortName) -> ChainNames:
        base = hash_and_truncate(name.chain_base)
        return cls(f"service-{base}", f"local-{base}", f"external-{base}", f"firewall-{base}")


def _fixed_chains(rs: Ruleset, settings: NodeSettings) -> None:
    for name, hook in BASE_CHAINS.items():
        rs.add_chain(Chain(name, JUMPS.get(name, ()), hook=hook))
    rs.add_chain(Chain(MARK_MASQ, (f"mark set mark or {MASQ_MARK}",)))
    rs.add_chain(
        Chain(
            MASQUERADING,
            (
                f"mark and {MASQ_MARK} == 0 return",
                f"mark set mark xor {MASQ_MARK}",
                "masquerade fully-random",
            ),
        )
    )
    rs.add_chain(
        Chain(REJECT, ("reject",), comment="helper for @no-endpoint-services / @no-endpoint-nodeports")
    )
    rs.add_chain(
        Chain(
            ENDPOINTS_CHECK,
            (
                f"ip daddr . meta l4proto . th dport vmap @{NO_ENDPOINT_SERVICES}",
                f"{settings.nodeport_match} meta l4proto . th dport vmap @{NO_ENDPOINT_NODEPORTS}",
            ),
        )
    )
    cluster_ips_check = [
        f'ip daddr @{CLUSTER_IPS} reject comment "Reject traffic to invalid ports of ClusterIPs"'
    ]
    if settings.service_cidrs:
        cidrs = ", ".join(settings.service_cidrs)
        cluster_ips_check.append(
            f'ip daddr {{ {cidrs} }} drop comment "Drop traffic to unallocated ClusterIPs"'
        )
    rs.add_chain(Chain(CLUSTER_IPS_CHECK, tuple(cluster_ips_check)))
    rs.add_chain(Chain(FIREWALL_CHECK, (f"ip daddr . meta l4proto . th dport vmap @{FIREWALL_IPS}",)))
    rs.add_chain(
        Chain(
            SERVICES,
            (
                f"ip daddr . meta l4proto . th dport vmap @{SERVICE_IPS}",
                f"{settings.nodeport_match} meta l4proto . th dport vmap @{SERVICE_NODEPORTS}",
            ),
        )
    )


class _Builder:
    def __init__(self, settings: NodeSettings) -> None:
        self.settings = settings
        self.rs = Ruleset()
        self.service_ips: list[tuple[str, str]] = []
        self.nodeports: list[tuple[str, str]] = []
        self.no_endpoint_services: list[tuple[str, str]] = []
        self.no_endpoint_nodeports: list[tuple[str, str]] = []
        self.firewall_ips: list[tuple[str, str]] = []
        self.cluster_ips: set[str] = set()

    def if_local(self) -> str:
        return f"ip saddr {self.settings.cluster_cidr}"

    def if_not_local(self) -> str:
        return f"ip saddr != {self.settings.cluster_cidr}"

    def service(self, svc: ServicePort, endpoints: tuple[Endpoint, ...]) -> None:
        names = ChainNames.of(svc.name)
        cat = categorize(svc, endpoints, self.settings.node_name)
        proto, port = svc.protocol, svc.port
        self.cluster_ips.add(svc.cluster_ip)
        internal_chain = names.local if svc.internal_local else names.cluster
        has_internal = cat.has_any and (not svc.internal_local or bool(cat.local))
        has_external = cat.has_any and (not svc.external_local or bool(cat.local))
        external_policy_chain = names.local if svc.external_local else names.cluster
        uses_external = cat.has_any and svc.externally_accessible
        internal_verdict = f"goto {REJECT}" if not cat.has_any else "drop"
        external_verdict = internal_verdict

        key = f"{svc.cluster_ip} . {proto} . {port}"
        if has_internal:
            self.service_ips.append((key, f"goto {internal_chain}"))
        else:
            self.no_endpoint_services.append((key, internal_verdict))
        for ip in (*svc.external_ips, *svc.load_balancer_ips):
            ext_key = f"{ip} . {proto} . {port}"
            if cat.has_any:
                self.service_ips.append((ext_key, f"goto {names.external}"))
            if not has_external:
                self.no_endpoint_services.append((ext_key, external_verdict))
        if svc.load_balancer_ips and svc.source_ranges:
            self._firewall(svc, names.firewall)
        if svc.node_port:
            np_key = f"{proto} . {svc.node_port}"
            if cat.has_any:
                self.nodeports.append((np_key, f"goto {names.external}"))
            if not has_external:
                self.no_endpoint_nodeports.append((np_key, external_verdict))

        masq_internal: list[str] = []
        if has_internal:
            if self.settings.masquerade_all:
                masq_internal = [f"ip daddr {svc.cluster_ip} {proto} dport {port} jump {MARK_MASQ}"]
            elif self.settings.cluster_cidr:
                masq_internal = [
                    f"ip daddr {svc.cluster_ip} {proto} dport {port} {self.if_not_local()} jump {MARK_MASQ}"
                ]
        if uses_external:
            cluster_chain = names.cluster if cat.cluster and svc.uses_cluster_endpoints else ""
            self._external(svc, names, external_policy_chain, has_external, cluster_chain)
        if cat.cluster and svc.uses_cluster_endpoints:
            prefix = masq_internal if internal_chain == names.cluster else []
            self._service_chain(svc, names.cluster, cat.cluster, prefix)
        if cat.local and svc.uses_local_endpoints:
            prefix = masq_internal if internal_chain == names.local else []
            self._service_chain(svc, names.local, cat.local, prefix)
        for ep in cat.reachable:
            self._endpoint_chain(svc, ep)

    def _firewall(self, svc: ServicePort, chain: str) -> None:
        """loadBalancerSourceRanges: new connections to the LB IPs from elsewhere are dropped (before
        DNAT, in filter-prerouting/output). A range holding this node admits the LB IPs as sources
        too: traffic from the node to a local VIP arrives from the VIP itself."""
        sources = list(svc.source_ranges)
        ranges = [ipaddress.ip_network(r) for r in svc.source_ranges]
        if any(ipaddress.ip_address(ip) in net for ip in self.settings.node_ips for net in ranges):
            sources += list(svc.load_balancer_ips)
        self.rs.add_chain(Chain(chain, (f"ip saddr != {{ {', '.join(sources)} }} drop",)))
        for ip in svc.load_balancer_ips:
            self.firewall_ips.append((f"{ip} . {svc.protocol} . {svc.port}", f"goto {chain}"))

    def _external(
        self, svc: ServicePort, names: ChainNames, policy_chain: str, has_external: bool, cluster_chain: str
    ) -> None:
        rules: list[str] = []
        if not svc.external_local:
            rules.append(f"jump {MARK_MASQ}")
        else:
            # Pods and the node itself reach the Service as from inside (any endpoint), as upstream.
            if self.settings.cluster_cidr and cluster_chain:
                rules.append(f'{self.if_local()} goto {cluster_chain} comment "short-circuit pod traffic"')
            rules.append(f'fib saddr type local jump {MARK_MASQ} comment "masquerade local traffic"')
            if cluster_chain:
                rules.append(
                    f'fib saddr type local goto {cluster_chain} comment "short-circuit local traffic"'
                )
        if has_external:
            rules.append(f"goto {policy_chain}")
        self.rs.add_chain(Chain(names.external, tuple(rules)))

    def _service_chain(
        self, svc: ServicePort, chain: str, endpoints: tuple[Endpoint, ...], prefix: list[str]
    ) -> None:
        rules = list(prefix)
        if svc.affinity_timeout is not None:
            for ep in endpoints:
                base = endpoint_base(svc.name, ep)
                rules.append(f"ip saddr @affinity-{base} goto endpoint-{base}")
        targets = ", ".join(
            f"{i} : goto endpoint-{endpoint_base(svc.name, ep)}" for i, ep in enumerate(endpoints)
        )
        rules.append(f"numgen random mod {len(endpoints)} vmap {{ {targets} }}")
        self.rs.add_chain(Chain(chain, tuple(rules)))

    def _endpoint_chain(self, svc: ServicePort, ep: Endpoint) -> None:
        base = endpoint_base(svc.name, ep)
        rules = [f"ip saddr {ep.ip} jump {MARK_MASQ}"]
        if svc.affinity_timeout is not None:
            self.rs.add_set(
                NftSet(
                    f"affinity-{base}",
                    "ipv4_addr",
                    flags=("dynamic", "timeout"),
                    timeout=svc.affinity_timeout,
                    dynamic=True,
                )
            )
            rules.append(f"update @affinity-{base} {{ ip saddr }}")
        rules.append(f"meta l4proto {svc.protocol} dnat to {ep.ip}:{ep.port}")
        self.rs.add_chain(Chain(f"endpoint-{base}", tuple(rules)))

    def maps(self) -> None:
        addr = "ipv4_addr . inet_proto . inet_service"
        port = "inet_proto . inet_service"
        for name, type_, elements, comment in (
            (SERVICE_IPS, addr, self.service_ips, "ClusterIP, ExternalIP and LoadBalancer IP traffic"),
            (SERVICE_NODEPORTS, port, self.nodeports, "NodePort traffic"),
            (
                NO_ENDPOINT_SERVICES,
                addr,
                self.no_endpoint_services,
                "vmap to drop or reject packets to services with no endpoints",
            ),
            (
                NO_ENDPOINT_NODEPORTS,
                port,
                self.no_endpoint_nodeports,
                "vmap to drop or reject packets to service nodeports with no endpoints",
            ),
            (
                FIREWALL_IPS,
                addr,
                self.firewall_ips,
                "destinations that are subject to LoadBalancerSourceRanges",
            ),
        ):
            self.rs.add_set(
                NftSet(name, type_, is_map=True, comment=comment, elements=tuple(sorted(elements)))
            )
        self.rs.add_set(
            NftSet(
                CLUSTER_IPS,
                "ipv4_addr",
                comment="Active ClusterIPs",
                elements=tuple((ip, None) for ip in sorted(self.cluster_ips)),
            )
        )
        if self.settings.nodeport_ips is not None:
            self.rs.add_set(
                NftSet(
                    NODEPORT_IPS,
                    "ipv4_addr",
                    comment="IPs that accept NodePort traffic",
                    elements=tuple((ip, None) for ip in sorted(set(self.settings.nodeport_ips))),
                )
            )


def _claims(svc: ServicePort) -> list[tuple[str, str]]:
    """The map keys a service port's rules take: its addresses and node port with protocol and port.
    Two service ports taking one key cannot both be written (nft: "File exists")."""
    proto = svc.protocol
    keys = [(SERVICE_IPS, f"{ip} . {proto} . {svc.port}") for ip in (svc.cluster_ip, *svc.external_ips)]
    keys += [(SERVICE_IPS, f"{ip} . {proto} . {svc.port}") for ip in svc.load_balancer_ips]
    if svc.node_port:
        keys.append((SERVICE_NODEPORTS, f"{proto} . {svc.node_port}"))
    return keys


def conflicts(services: list[ServicePort]) -> dict[ServicePortName, str]:
    """Service ports whose addresses or node port an earlier one (in name order) already takes, each
    with the reason: they get no rules, the others are written (a node port given twice before the
    API server checked them, an externalIP two Services name)."""
    owner: dict[tuple[str, str], ServicePortName] = {}
    refused: dict[ServicePortName, str] = {}
    for svc in sorted(services, key=lambda s: s.name):
        keys = dict.fromkeys(_claims(svc))  # a port's own repeats (externalIP = its cluster IP) are fine
        taken = next(((k, owner[k]) for k in keys if k in owner and owner[k] != svc.name), None)
        if taken is not None:
            (kind, key), holder = taken
            what = "node port" if kind == SERVICE_NODEPORTS else "address and port"
            refused[svc.name] = f"{what} {key} is already programmed for service port {holder}"
            continue
        for key in keys:
            owner[key] = svc.name
    return refused


def build(
    services: list[ServicePort],
    endpoints: dict[ServicePortName, tuple[Endpoint, ...]],
    settings: NodeSettings,
) -> Ruleset:
    """The wanted table. Service ports in conflict with an earlier one (`conflicts`) are left out."""
    builder = _Builder(settings)
    _fixed_chains(builder.rs, settings)
    refused = conflicts(services)
    for svc in sorted(services, key=lambda s: s.name):
        if svc.name not in refused:
            builder.service(svc, endpoints.get(svc.name, ()))
    builder.maps()
    return builder.rs
