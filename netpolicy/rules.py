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
INTERVAL_SETS = (PENDING_INGRESS, PENDING_EGRESS)  # pod CIDRs


@dataclass(frozen=True)
class Cluster:
    """What the rules are computed from."""

    policies: tuple[Policy, ...]
    pods: tuple[PodInfo, ...]
    namespaces: Mapping[str, Mapping[str, str]]  # name -> labels
    local_nodes: frozenset[str]
    pending: tuple[PodInfo, ...] = ()  # pods bound to a node, address not known yet (ip "")
    node_cidrs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # node -> IPv4 pod CIDRs


@dataclass
class Ruleset:
    chains: dict[str, list[str]] = field(default_factory=dict)
    sets: dict[str, frozenset[str]] = field(default_factory=dict)  # peers-<hash> -> pod IPv4 addresses
    # the guard's sets, always there: known-pods (local pods' addresses, while a guard is up) and the
    # pod CIDRs of nodes with a pending pod isolated for ingress / egress
    guards: dict[str, frozenset[str]] = field(
        default_factory=lambda: {
            KNOWN: frozenset(),
            PENDING_INGRESS: frozenset(),
            PENDING_EGRESS: frozenset(),
        }
    )
    ingress: dict[str, str] = field(default_factory=dict)  # pod IP -> chain
    egress: dict[str, str] = field(default_factory=dict)

    def script(self, table: str = TABLE) -> str:
        """One `nft -f` transaction replacing the whole table (atomic: all of it or nothing)."""
        at = f"{FAMILY} {table}"
        lines = [
            f"add table {at}",
            f"delete table {at}",
            f'add table {at} {{ comment "network policies (pykubelet netpolicy)" ; }}',
            f"add chain {at} forward {{ type filter hook forward priority filter ; policy accept ; }}",
            f"add map {at} {INGRESS_MAP} {{ type ipv4_addr : verdict ; }}",
            f"add map {at} {EGRESS_MAP} {{ type ipv4_addr : verdict ; }}",
        ]
        for name, ips in [*self.guards.items(), *self.sets.items()]:
            lines += set_lines(at, name, ips)
        lines += [
            f"add rule {at} forward ct state established,related accept",
            f"add rule {at} forward ip daddr @{PENDING_INGRESS} ip daddr != @{KNOWN} drop",
            f"add rule {at} forward ip saddr @{PENDING_EGRESS} ip saddr != @{KNOWN} drop",
            f"add rule {at} forward ip saddr vmap @{EGRESS_MAP}",
            f"add rule {at} forward ip daddr vmap @{INGRESS_MAP}",
        ]
        for name, rules in self.chains.items():
            lines.append(f"add chain {at} {name}")
            lines += [f"add rule {at} {name} {rule}" for rule in rules]
        for map_name, elements in ((INGRESS_MAP, self.ingress), (EGRESS_MAP, self.egress)):
            if elements:
                body = ", ".join(f"{ip} : jump {chain}" for ip, chain in elements.items())
                lines.append(f"add element {at} {map_name} {{ {body} }}")
        return "\n".join(lines) + "\n"


def set_lines(at: str, name: str, ips: frozenset[str]) -> list[str]:
    """A named set of pod addresses (of CIDRs for the guard's pending sets), declared and filled."""
    flags = " flags interval ;" if name in INTERVAL_SETS else ""
    lines = [f"add set {at} {name} {{ type ipv4_addr ;{flags} }}"]
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
def _ip_key(ip: str) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(ip)


@functools.lru_cache(maxsize=65536)
def _net_key(text: str) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(text)


def address_set(ips: Iterable[str]) -> str:
    """`{ a, b }` of addresses or CIDRs, in address order."""
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

    def in_block(self, peer: Peer) -> tuple[PodInfo, ...]:
        if peer not in self._blocks:
            network = ipaddress.ip_network(peer.cidr)
            holes = [ipaddress.ip_network(e) for e in peer.excepts]
            self._blocks[peer] = (
                ()
                if network.version != 4  # pods here have IPv4 addresses only
                else tuple(
                    p
                    for p in self.cluster.pods
                    if _ip_key(p.ip) in network and not any(_ip_key(p.ip) in h for h in holes)
                )
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
                out.append(_Target(match, block=peer))
                continue
            pods = self._selected(policy, peer.pods, peer.namespaces)
            name = peer_set_name(policy.namespace, peer)
            self.sets[name] = frozenset(p.ip for p in pods)
            out.append(_Target(f"ip {end} @{name}", tuple(pods)))
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
        by_number: dict[int, list[str]] = {}
        for peer in self.in_block(target.block) if target.block is not None else target.pods:
            number = peer.named_ports.get((port.name, port.protocol))
            if number is not None:
                by_number.setdefault(number, []).append(peer.ip)
        return [
            f"ip daddr {address_set(ips)} {_port_match(port.protocol, number)}"
            for number, ips in sorted(by_number.items())
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
    return {
        KNOWN: frozenset(p.ip for p in local) if up else frozenset(),
        PENDING_INGRESS: frozenset(pending["ingress"]),
        PENDING_EGRESS: frozenset(pending["egress"]),
    }


def build(cluster: Cluster, withheld: frozenset[str] = frozenset()) -> Ruleset:
    """The ruleset for the local pods; policies in `withheld` (keys nft refused) isolate but admit
    nothing (fail closed)."""
    builder = _Builder(cluster)
    ruleset = Ruleset()
    local = sorted((p for p in cluster.pods if p.node in cluster.local_nodes), key=lambda p: p.key)
    for pod in local:
        for direction, elements in (("ingress", ruleset.ingress), ("egress", ruleset.egress)):
            selecting = _selecting(cluster, pod, direction)
            if not selecting or pod.ip in elements:
                continue
            rules: list[str] = []
            for policy in sorted(selecting, key=lambda p: p.key):
                if policy.key in withheld:
                    continue
                for rule in getattr(policy, direction):
                    rules += builder.statements(policy, rule, direction, pod)
            name = chain_name(direction, pod)
            ruleset.chains[name] = [*dict.fromkeys(rules), "drop"]
            elements[pod.ip] = name
    ruleset.sets = dict(sorted(builder.sets.items()))
    ruleset.guards = _guards(cluster, local)
    return ruleset
