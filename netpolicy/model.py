"""NetworkPolicies, Pods and Namespaces parsed once into frozen dataclasses, the only shapes the rules
are built from. A policy that cannot be parsed raises `PolicyError` on its own (the agent reports it
and keeps the others); a pod that cannot carry traffic under a policy (no IP yet, host network,
finished) is no `PodInfo` at all. A pod may have an IPv4 address, an IPv6 one or both (dual-stack
`status.podIPs`); each of its addresses gets the same rules."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeclient.selectors import Selector, SelectorError, from_label_selector

Obj = dict[str, Any]
PROTOCOLS = ("TCP", "UDP", "SCTP")


class PolicyError(ValueError):
    """A stored policy the agent cannot turn into rules (the API server would refuse it today)."""


@dataclass(frozen=True)
class Port:
    """One NetworkPolicyPort: a protocol and a number, a range (number..end), a name, or every port."""

    protocol: str = "TCP"
    number: int | None = None
    end: int | None = None
    name: str = ""


@dataclass(frozen=True)
class Peer:
    """One NetworkPolicyPeer: pods (by selector, in the policy's namespace unless `namespaces` is
    given), every pod of some namespaces, or an IPv4 or IPv6 block with holes of its own family."""

    pods: Selector | None = None
    namespaces: Selector | None = None
    cidr: str = ""
    excepts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    """One ingress or egress rule: empty `peers` admits every peer, empty `ports` every port."""

    peers: tuple[Peer, ...] = ()
    ports: tuple[Port, ...] = ()


@dataclass(frozen=True)
class Policy:
    namespace: str
    name: str
    selector: Selector
    ingress: tuple[Rule, ...] | None  # None: not an Ingress policy (policyTypes)
    egress: tuple[Rule, ...] | None  # None: not an Egress policy

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class PodInfo:
    namespace: str
    name: str
    node: str
    ip: str  # IPv4, "" when it has none
    labels: Mapping[str, str] = field(default_factory=dict)
    # (name, protocol) -> number: the containers' named ports
    named_ports: Mapping[tuple[str, str], int] = field(default_factory=dict)
    ip6: str = ""  # IPv6, "" when it has none

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def addresses(self) -> tuple[str, ...]:
        """Its addresses, IPv4 first."""
        return tuple(a for a in (self.ip, self.ip6) if a)


def _selector(value: Any, where: str) -> Selector:
    try:
        return from_label_selector(value if value is not None else {})
    except SelectorError as err:
        raise PolicyError(f"{where}: {err}") from None


def _port(raw: Any) -> Port:
    if not isinstance(raw, dict):
        raise PolicyError("a port must be an object")
    protocol = raw.get("protocol") or "TCP"
    if protocol not in PROTOCOLS:
        raise PolicyError(f"unsupported protocol {protocol!r}")
    number, end = raw.get("port"), raw.get("endPort")
    if isinstance(number, str):
        return Port(protocol, name=number)
    if number is not None and not (isinstance(number, int) and 1 <= number <= 65535):
        raise PolicyError(f"invalid port {number!r}")
    if end is not None and (number is None or not isinstance(end, int) or not number <= end <= 65535):
        raise PolicyError(f"invalid endPort {end!r}")
    return Port(protocol, number, end)


def _network(text: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(str(text), strict=False)
    except ValueError:
        raise PolicyError(f"invalid CIDR {text!r}") from None


def _peer(raw: Any) -> Peer:
    if not isinstance(raw, dict):
        raise PolicyError("a peer must be an object")
    block = raw.get("ipBlock")
    if block is not None:
        cidr = _network((block or {}).get("cidr"))
        holes = (_network(x) for x in (block or {}).get("except") or [])
        # the API server keeps an except inside its cidr (so of the same family)
        excepts = tuple(str(e) for e in holes if e.version == cidr.version)
        return Peer(cidr=str(cidr), excepts=excepts)
    pods, namespaces = raw.get("podSelector"), raw.get("namespaceSelector")
    if pods is None and namespaces is None:
        raise PolicyError("a peer needs a podSelector, a namespaceSelector or an ipBlock")
    return Peer(
        pods=_selector(pods, "podSelector") if pods is not None else None,
        namespaces=_selector(namespaces, "namespaceSelector") if namespaces is not None else None,
    )


def _rules(raw: Any, peers_field: str) -> tuple[Rule, ...]:
    rules = []
    for item in raw or []:
        item = item if isinstance(item, dict) else {}
        peers = tuple(_peer(x) for x in item.get(peers_field) or [])
        rules.append(Rule(peers, tuple(_port(p) for p in item.get("ports") or [])))
    return tuple(rules)


def policy_types(spec: Obj) -> list[str]:
    """spec.policyTypes, or the API server's default for a policy stored without them."""
    return spec.get("policyTypes") or (["Ingress", "Egress"] if spec.get("egress") else ["Ingress"])


def parse_policy(obj: Obj) -> Policy:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    types = policy_types(spec)
    return Policy(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        selector=_selector(spec.get("podSelector"), "podSelector"),
        ingress=_rules(spec.get("ingress"), "from") if "Ingress" in types else None,
        egress=_rules(spec.get("egress"), "to") if "Egress" in types else None,
    )


def parse_pod(obj: Obj, pending: bool = False) -> PodInfo | None:
    """The pod as policies see it; None when it has no address of its own (IPv4 or IPv6), runs in the
    host's network or has finished (its address may already be another pod's). With `pending`, the other
    way round: a pod bound to a node whose address the API does not know yet (ip and ip6 ""), else None."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    if spec.get("hostNetwork") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    ips = [p.get("ip") for p in status.get("podIPs") or [] if isinstance(p, dict)] or [status.get("podIP")]
    ip, ip6 = _address(ips, 4), _address(ips, 6)
    if pending and (ip or ip6 or not spec.get("nodeName") or meta.get("deletionTimestamp")):
        return None
    if not (ip or ip6) and not pending:
        return None
    named: dict[tuple[str, str], int] = {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for port in (container or {}).get("ports") or []:
            if isinstance(port, dict) and port.get("name") and isinstance(port.get("containerPort"), int):
                named.setdefault((port["name"], port.get("protocol") or "TCP"), port["containerPort"])
    return PodInfo(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        node=spec.get("nodeName") or "",
        ip=ip,
        labels=dict(meta.get("labels") or {}),
        named_ports=named,
        ip6=ip6,
    )


def _address(candidates: list[Any], version: int) -> str:
    """The first valid address of one family among status.podIPs, in its canonical text ("" if none)."""
    for text in candidates:
        try:
            address = ipaddress.ip_address(str(text))
        except ValueError:
            continue
        if address.version == version:
            return str(address)
    return ""


def node_cidrs(obj: Obj) -> tuple[str, ...]:
    """A Node's pod CIDRs of both families (spec.podCIDRs, else spec.podCIDR)."""
    spec = obj.get("spec") or {}
    cidrs = spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else [])
    out = []
    for cidr in cidrs:
        try:
            network = ipaddress.ip_network(str(cidr), strict=False)
        except ValueError:
            continue
        out.append(str(network))
    return tuple(out)


def isolation_only(obj: Obj) -> Policy | None:
    """A policy whose rules cannot be used still isolates the pods it selects (fail closed): the same
    selection and policyTypes, no rule admitting anything. None when even its selector is unusable."""
    spec = obj.get("spec") or {}
    types = policy_types(spec)
    meta = obj.get("metadata") or {}
    try:
        selector = _selector(spec.get("podSelector"), "podSelector")
    except PolicyError:
        return None
    return Policy(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        selector=selector,
        ingress=() if "Ingress" in types else None,
        egress=() if "Egress" in types else None,
    )
