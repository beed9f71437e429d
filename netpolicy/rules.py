"""The wanted ruleset, pure: from the parsed policies, pods and namespaces to the chains of one nftables
table (`inet pykubelet-netpol` by default) for the pods on this agent's nodes.

Upstream's semantics (the NetworkPolicy API's own definition): a pod selected by any policy whose
policyTypes hold Ingress is isolated for ingress, and then admits only what the union of those
policies' ingress rules allows; the same for Egress. A connection needs both ends' consent: the
sender's egress rules (when the sender is isolated for egress) and the receiver's ingress rules (when
the receiver is isolated for ingress). Replies and related packets of an admitted connection pass
(conntrack), and a policy written later does not cut a connection already established.

Where packets meet the rules: the `forward` base chain of an inet table, which sees pod traffic routed
between bridges (pods of different nodes) and, through br_netfilter (net.bridge.bridge-nf-call-iptables,
which kube-proxy and kubeadm need too), pod traffic bridged between two pods of one bridge. Traffic
between a pod and its own node (the kubelet's probes, the node's DNS) goes through the node's input and
output hooks and is never filtered, as the upstream CNI plugins leave it.

Shape: `forward` accepts established/related traffic, then jumps through the `egress-pods` verdict map
(source address -> `egress-<ns>/<pod>`) and the `ingress-pods` map (destination address ->
`ingress-<ns>/<pod>`); each per-pod chain `return`s on an allowing rule and ends in `drop`.

Before the maps, a guard for pods bound to a local node whose address the API does not know yet (the
sandbox has one before the kubelet reports it): while such a pod is selected by a policy, traffic to
(ingress) or from (egress) an address of its node's pod CIDR that is no known pod's is dropped, so a new
pod is never reachable before its rules exist (Calico drops traffic of workloads it does not know yet
the same way).

A peer given by selectors is a named set of pod addresses (`peers-<hash>`, one per distinct selection,
shared by every rule naming it), so a pod coming or going changes set elements, not rules (delta.py
writes only what changed). An ipBlock matches with `ip` or `ip6` by its own family (the inet table
holds both).

IPv6: a pod's IPv6 address (dual-stack `status.podIPs`) gets what its IPv4 address gets, in sets and
maps of their own family (`-v6` names: `ingress-pods-v6`, `peers-<hash>-v6`, `known-pods-v6`, ...):
both addresses jump to the pod's one chain, and once any pod has an IPv6 address each selector peer
matches as `ip ... @peers-<hash>` and `ip6 ... @peers-<hash>-v6`. Neighbour discovery (ICMPv6 types
133 to 136, IPv6's ARP, which is no IP traffic to filter in IPv4) always passes.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kubeclient.selectors import Selector
from netpolicy.model import Peer, PodInfo, Policy, Port, Rule

TABLE = "pykubelet-netpol"
FAMILY = "inet"
INGRESS_MAP, EGRESS_MAP = "ingress-pods", "egress-pods"
KNOWN, PENDING_INGRESS, PENDING_EGRESS = "known-pods", "pending-ingress", "pending-egress"
V6 = "-v6"  # the name of a set or map of IPv6 addresses: its IPv4 twin's and this
INTERVAL_SETS = (PENDING_INGRESS, PENDING_EGRESS, PENDING_INGRESS + V6, PENDING_EGRESS + V6)  # pod CIDRs
NEIGHBOUR_DISCOVERY = "nd-router-solicit, nd-router-advert, nd-neighbor-solicit, nd-neighbor-advert"


def is_v6(address: str) -> bool:
    """An IPv6 address or CIDR (else IPv4)."""
    return ":" in address


def family_name(name: str, address: str) -> str:
    """The set or map of `name` that holds `address`'s family."""
    return name + V6 if is_v6(address) else name


def by_family(name: str, addresses: Iterable[str]) -> dict[str, list[str]]:
    """`addresses` split between `name` (IPv4) and its IPv6 twin, each in the given order."""
    out: dict[str, list[str]] = {}
    for address in addresses:
        out.setdefault(family_name(name, address), []).append(address)
    return out


@dataclass(frozen=True)
class Cluster:
    """What the rules are computed from."""

    policies: tuple[Policy, ...]
    pods: tuple[PodInfo, ...]
    namespaces: Mapping[str, Mapping[str, str]]  # name -> labels
    local_nodes: frozenset[str]
    pending: tuple[PodInfo, ...] = ()  # pods bound to a node, address not known yet (ip and ip6 "")
    node_cidrs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # node -> pod CIDRs


@dataclass
class Ruleset:
    chains: dict[str, list[str]] = field(default_factory=dict)
    # peers-<hash> -> pod IPv4 addresses, peers-<hash>-v6 -> pod IPv6 addresses
    sets: dict[str, frozenset[str]] = field(default_factory=dict)
    # the guard's sets, always there, each with its IPv6 twin: known-pods (local pods' addresses, while
    # a guard is up) and the pod CIDRs of nodes with a pending pod isolated for ingress / egress
    guards: dict[str, frozenset[str]] = field(
        default_factory=lambda: {
            name + suffix: frozenset()
            for name in (KNOWN, PENDING_INGRESS, PENDING_EGRESS)
            for suffix in ("", V6)
        }
    )
    ingress: dict[str, str] = field(default_factory=dict)  # pod address (either family) -> chain
    egress: dict[str, str] = field(default_factory=dict)

    def script(self, table: str = TABLE) -> str:
        """One `nft -f` transaction replacing the whole table (atomic: all of it or nothing)."""
        at = f"{FAMILY} {table}"
        lines = [
            f"add table {at}",
            f"delete table {at}",
            f'add table {at} {{ comment "network policies (pykubelet netpolicy)" ; }}',
            f"add chain {at} forward {{ type filter hook forward priority filter ; policy accept ; }}",
        ]
        for name in (INGRESS_MAP, EGRESS_MAP):
            lines += [
                f"add map {at} {name} {{ type ipv4_addr : verdict ; }}",
                f"add map {at} {name}{V6} {{ type ipv6_addr : verdict ; }}",
            ]
        for name, ips in [*self.guards.items(), *self.sets.items()]:
            lines += set_lines(at, name, ips)
        lines += [
            f"add rule {at} forward ct state established,related accept",
            f"add rule {at} forward icmpv6 type {{ {NEIGHBOUR_DISCOVERY} }} accept",
        ]
        for proto, suffix in (("ip", ""), ("ip6", V6)):
            lines += [
                f"add rule {at} forward {proto} daddr @{PENDING_INGRESS}{suffix} "
                f"{proto} daddr != @{KNOWN}{suffix} drop",
                f"add rule {at} forward {proto} saddr @{PENDING_EGRESS}{suffix} "
                f"{proto} saddr != @{KNOWN}{suffix} drop",
            ]
        lines += [
            f"add rule {at} forward ip saddr vmap @{EGRESS_MAP}",
            f"add rule {at} forward ip6 saddr vmap @{EGRESS_MAP}{V6}",
            f"add rule {at} forward ip daddr vmap @{INGRESS_MAP}",
            f"add rule {at} forward ip6 daddr vmap @{INGRESS_MAP}{V6}",
        ]
        for name, rules in self.chains.items():
            lines.append(f"add chain {at} {name}")
            lines += [f"add rule {at} {name} {rule}" for rule in rules]
        for base, elements in ((INGRESS_MAP, self.ingress), (EGRESS_MAP, self.egress)):
            lines += map_lines(at, "add", base, elements)
        return "\n".join(lines) + "\n"


def map_lines(at: str, verb: str, base: str, elements: Mapping[str, str]) -> list[str]:
    """`add` (address -> jump chain) or `delete` (by address) elements of a verdict map and its IPv6 twin."""
    out = []
    for name, addresses in by_family(base, elements).items():
        if verb == "add":
            body = ", ".join(f"{a} : jump {elements[a]}" for a in addresses)
        else:
            body = ", ".join(addresses)
        out.append(f"{verb} element {at} {name} {{ {body} }}")
    return out


def set_lines(at: str, name: str, ips: frozenset[str]) -> list[str]:
    """A named set of pod addresses (of CIDRs for the guard's pending sets), declared and filled; of
    IPv6 addresses when its name ends in -v6."""
    flags = " flags interval ;" if name in INTERVAL_SETS else ""
    kind = "ipv6_addr" if name.endswith(V6) else "ipv4_addr"
    lines = [f"add set {at} {name} {{ type {kind} ;{flags} }}"]
    if ips:
        lines.append(f"add element {at} {name} {address_set(ips)}")
    return lines


def chain_name(direction: str, pod: PodInfo) -> str:
    """`ingress-<ns>/<pod>` (a hash for names nft would find too long)."""
    name = f"{direction}-{pod.key}"
    if len(name) > 200:
        name = f"{direction}-{hashlib.sha256(pod.key.encode()).hexdigest()[:16]}"
    return name


@functools.lru_cache(maxsize=65536)
def _ip_key(ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(ip)


@functools.lru_cache(maxsize=65536)
def _net_key(text: str) -> tuple[int, ipaddress.IPv4Network | ipaddress.IPv6Network]:
    network = ipaddress.ip_network(text)
    return network.version, network


def address_set(ips: Iterable[str]) -> str:
    """`{ a, b }` of addresses or CIDRs (of one family), in address order."""
    return "{ " + ", ".join(sorted(set(ips), key=_net_key)) + " }"


def _port_match(protocol: str, number: int | None = None, end: int | None = None) -> str:
    text = f"meta l4proto {protocol.lower()}"
    if number is None:
        return text
    return f"{text} th dport {number}" + (f"-{end}" if end is not None and end != number else "")


@dataclass(frozen=True)
class _Target:
    """Who a peer stands for: an address match (empty: anyone) and the pods it covers, against which
    an egress rule resolves its named ports (for an ipBlock: the pods inside it, found when needed)."""

    match: str
    pods: tuple[PodInfo, ...] = ()
    block: Peer | None = None
    family: int = 0  # 4 or 6: only the pods' addresses of that family; 0: both


def peer_set_name(namespace: str, peer: Peer) -> str:
    """The set of a selector peer: named for the selection, so every rule naming the same pods shares it."""
    scope = namespace if peer.namespaces is None else "*"
    digest = hashlib.sha256(f"{scope}|{peer.pods!r}|{peer.namespaces!r}".encode()).hexdigest()
    return f"peers-{digest[:16]}"


class _Builder:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.by_namespace: dict[str, list[PodInfo]] = {}
        for pod in cluster.pods:
            self.by_namespace.setdefault(pod.namespace, []).append(pod)
        # A rule's peers are the same for every pod the policy selects: resolved once per build.
        self._targets: dict[tuple[int, str], list[_Target]] = {}
        self._blocks: dict[Peer, tuple[PodInfo, ...]] = {}
        self.sets: dict[str, frozenset[str]] = {}
        # once any pod has an IPv6 address, selector peers match in both families
        self.dual = any(p.ip6 for p in cluster.pods)

    def in_block(self, peer: Peer) -> tuple[PodInfo, ...]:
        if peer not in self._blocks:
            network = ipaddress.ip_network(peer.cidr)
            holes = [ipaddress.ip_network(e) for e in peer.excepts]
            field_name = "ip6" if network.version == 6 else "ip"
            self._blocks[peer] = tuple(
                p
                for p in self.cluster.pods
                if (address := getattr(p, field_name))
                and _ip_key(address) in network
                and not any(_ip_key(address) in h for h in holes)
            )
        return self._blocks[peer]

    def _selected(
        self, policy: Policy, peer_pods: Selector | None, peer_namespaces: Selector | None
    ) -> list[PodInfo]:
        if peer_namespaces is None:
            spaces = [policy.namespace]
        else:
            spaces = [n for n, labels in self.cluster.namespaces.items() if peer_namespaces.matches(labels)]
        pods = [p for n in spaces for p in self.by_namespace.get(n, [])]
        return [p for p in pods if peer_pods is None or peer_pods.matches(p.labels)]

    def targets(self, policy: Policy, rule: Rule, direction: str) -> list[_Target]:
        key = (id(rule), direction)
        if key not in self._targets:
            self._targets[key] = self._resolve(policy, rule, "saddr" if direction == "ingress" else "daddr")
        return self._targets[key]

    def _resolve(self, policy: Policy, rule: Rule, end: str) -> list[_Target]:
        if not rule.peers:
            return [_Target("", self.cluster.pods)]
        out = []
        for peer in rule.peers:
            if peer.cidr:
                field_name = f"{'ip6' if ':' in peer.cidr else 'ip'} {end}"
                match = f"{field_name} {peer.cidr}"
                if peer.excepts:
                    match += f" {field_name} != {{ {', '.join(peer.excepts)} }}"
                out.append(_Target(match, block=peer, family=6 if is_v6(peer.cidr) else 4))
                continue
            pods = tuple(self._selected(policy, peer.pods, peer.namespaces))
            name = peer_set_name(policy.namespace, peer)
            self.sets[name] = frozenset(p.ip for p in pods if p.ip)
            out.append(_Target(f"ip {end} @{name}", pods, family=4))
            if self.dual:
                self.sets[name + V6] = frozenset(p.ip6 for p in pods if p.ip6)
                out.append(_Target(f"ip6 {end} @{name}{V6}", pods, family=6))
        return out

    def statements(self, policy: Policy, rule: Rule, direction: str, pod: PodInfo) -> list[str]:
        """The `return` rules one policy rule gives `pod`'s chain for `direction`."""
        out: list[str] = []
        for target in self.targets(policy, rule, direction):
            if not rule.ports:
                out.append(f"{target.match} return".strip())
            for port in rule.ports:
                out += [f"{m} return".strip() for m in self._port_matches(port, direction, pod, target)]
        return out

    def _port_matches(self, port: Port, direction: str, pod: PodInfo, target: _Target) -> list[str]:
        if not port.name:
            return [f"{target.match} {_port_match(port.protocol, port.number, port.end)}"]
        if direction == "ingress":  # the name is the receiving pod's
            number = pod.named_ports.get((port.name, port.protocol))
            return [] if number is None else [f"{target.match} {_port_match(port.protocol, number)}"]
        # egress: the name is each destination pod's, which may map it to different numbers
        by_number: dict[tuple[int, int], list[str]] = {}
        for peer in self.in_block(target.block) if target.block is not None else target.pods:
            number = peer.named_ports.get((port.name, port.protocol))
            if number is None:
                continue
            for version, address in ((4, peer.ip), (6, peer.ip6)):
                if address and target.family in (0, version):
                    by_number.setdefault((version, number), []).append(address)
        return [
            f"{'ip6' if version == 6 else 'ip'} daddr {address_set(ips)} {_port_match(port.protocol, number)}"
            for (version, number), ips in sorted(by_number.items())
        ]


def _selecting(cluster: Cluster, pod: PodInfo, direction: str) -> list[Policy]:
    """The policies of the pod's namespace that select it and have `direction` among their types."""
    return [
        policy
        for policy in cluster.policies
        if policy.namespace == pod.namespace
        and getattr(policy, direction) is not None
        and policy.selector.matches(pod.labels)
    ]


def _guards(cluster: Cluster, local: list[PodInfo]) -> dict[str, frozenset[str]]:
    pending: dict[str, set[str]] = {"ingress": set(), "egress": set()}
    for pod in cluster.pending:
        cidrs = cluster.node_cidrs.get(pod.node, ()) if pod.node in cluster.local_nodes else ()
        for direction, found in pending.items():
            if cidrs and _selecting(cluster, pod, direction):
                found.update(cidrs)
    up = pending["ingress"] or pending["egress"]
    known = [a for p in local for a in p.addresses] if up else []
    guards = {name: frozenset() for name in Ruleset().guards}
    for name, found in (
        (KNOWN, known),
        (PENDING_INGRESS, pending["ingress"]),
        (PENDING_EGRESS, pending["egress"]),
    ):
        guards.update((twin, frozenset(items)) for twin, items in by_family(name, found).items())
    return guards


def build(cluster: Cluster, withheld: frozenset[str] = frozenset()) -> Ruleset:
    """The ruleset for the local pods; policies in `withheld` (keys nft refused) isolate but admit
    nothing (fail closed)."""
    builder = _Builder(cluster)
    ruleset = Ruleset()
    local = sorted((p for p in cluster.pods if p.node in cluster.local_nodes), key=lambda p: p.key)
    for pod in local:
        for direction, elements in (("ingress", ruleset.ingress), ("egress", ruleset.egress)):
            selecting = _selecting(cluster, pod, direction)
            if not selecting or any(a in elements for a in pod.addresses):
                continue
            rules: list[str] = []
            for policy in sorted(selecting, key=lambda p: p.key):
                if policy.key in withheld:
                    continue
                for rule in getattr(policy, direction):
                    rules += builder.statements(policy, rule, direction, pod)
            name = chain_name(direction, pod)
            ruleset.chains[name] = [*dict.fromkeys(rules), "drop"]
            elements.update((a, name) for a in pod.addresses)
    ruleset.sets = dict(sorted(builder.sets.items()))
    ruleset.guards = _guards(cluster, local)
    return ruleset
