"""networking.k8s.io/v1 NetworkPolicy (upstream's pkg/registry/networking/networkpolicy/strategy.go,
pkg/apis/networking/v1/defaults.go and pkg/apis/networking/validation): which traffic may reach and leave
the pods a policy selects. The API server only stores it; the network-policy agent on each node
(`netpolicy/`) enforces it.

Defaults are upstream's: a port without a protocol is TCP; a policy without policyTypes is an Ingress
policy, and an Egress one too when it has egress rules. Validation is upstream's ValidateNetworkPolicy:
label selectors, ports (a number 1-65535 or an IANA port name; endPort only after a numeric port and
not below it), peers (at least one selector or an ipBlock, never an ipBlock with another), ipBlock CIDRs
and their `except` entries strict subsets of the block, at most two known policyTypes. A spec change
counts in metadata.generation.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, forbidden, invalid, not_supported, required
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.meta import age
from controlplane.apiserver.rbac.validation import label_selector
from controlplane.apiserver.validation import port_number
from kubeclient.names import port_name

Obj = dict[str, Any]

PROTOCOLS = ["TCP", "UDP", "SCTP"]
POLICY_TYPES = ["Ingress", "Egress"]
TYPE_MARKS = {("V1NetworkPolicyPort", "port"): "int-or-string"}
POD_SELECTOR_DOC = (
    "Selects the pods to which this NetworkPolicy object applies. The array of ingress rules is applied to "
    "any pods selected by this field. Multiple network policies can select the same set of pods. In this "
    "case, the ingress rules for each are combined additively. This field is NOT optional and follows "
    "standard label selector semantics. An empty podSelector matches all pods in this namespace."
)


def default_policy(spec: Obj) -> None:
    """SetDefaults_NetworkPolicy and SetDefaults_NetworkPolicyPort."""
    for direction in ("ingress", "egress"):
        rules = [r for r in spec.get(direction) or [] if isinstance(r, dict)]
        for port in [p for r in rules for p in r.get("ports") or []]:
            if isinstance(port, dict) and port.get("protocol") is None:
                port["protocol"] = "TCP"
    if not spec.get("policyTypes"):
        spec["policyTypes"] = ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]


def validate_port(port: Any, path: str) -> list[FieldError]:
    """ValidateNetworkPolicyPort."""
    if not isinstance(port, dict):
        return []
    errors: list[FieldError] = []
    protocol = port.get("protocol")
    if protocol is not None and protocol not in PROTOCOLS:
        errors.append(not_supported(f"{path}.protocol", protocol, PROTOCOLS))
    number, end = port.get("port"), port.get("endPort")
    if number is None:
        if end is not None:
            errors.append(
                invalid(f"{path}.endPort", end, "may not be specified when `port` is not specified")
            )
    elif isinstance(number, int):
        errors += port_number(f"{path}.port", number)
        if end is not None:
            if isinstance(end, int) and end < number:
                errors.append(invalid(f"{path}.endPort", end, "must be greater than or equal to `port`"))
            errors += port_number(f"{path}.endPort", end)
    else:
        if end is not None:
            errors.append(invalid(f"{path}.endPort", end, "may not be specified when `port` is non-numeric"))
        errors += [invalid(f"{path}.port", number, msg) for msg in port_name(str(number))]
    return errors


def parse_cidr(text: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """ParseCIDR: an address and a prefix length; host bits may be set (10.0.0.1/24 is 10.0.0.0/24)."""
    if not isinstance(text, str) or "/" not in text:
        return None
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def validate_ip_block(block: Obj, path: str) -> list[FieldError]:
    """ValidateIPBlock: a CIDR, and each `except` a CIDR strictly inside it."""
    cidr = block.get("cidr")
    if not cidr:
        return [required(f"{path}.cidr")]
    network = parse_cidr(cidr)
    if network is None:
        return [invalid(f"{path}.cidr", cidr, "not a valid CIDR")]
    errors: list[FieldError] = []
    for i, text in enumerate(block.get("except") or []):
        at = f"{path}.except[{i}]"
        hole = parse_cidr(text)
        if hole is None:
            errors.append(invalid(at, text, "not a valid CIDR"))
            return errors
        inside = hole.version == network.version and hole.network_address in network
        if not inside or network.prefixlen >= hole.prefixlen:
            errors.append(invalid(at, text, "must be a strict subset of `cidr`"))
    return errors


def validate_peer(peer: Any, path: str) -> list[FieldError]:
    """ValidateNetworkPolicyPeer: at least one of the three, and an ipBlock alone."""
    peer = peer if isinstance(peer, dict) else {}
    errors: list[FieldError] = []
    given = 0
    for field in ("podSelector", "namespaceSelector"):
        if peer.get(field) is not None:
            given += 1
            errors += label_selector(peer[field], f"{path}.{field}")
    block = peer.get("ipBlock")
    if block is not None:
        given += 1
        errors += validate_ip_block(block if isinstance(block, dict) else {}, f"{path}.ipBlock")
    if given == 0:
        errors.append(required(path, "must specify a peer"))
    elif given > 1 and block is not None:
        errors.append(forbidden(path, "may not specify both ipBlock and another peer"))
    return errors


def validate_policy_spec(spec: Any) -> list[FieldError]:
    """ValidateNetworkPolicySpec."""
    spec = spec if isinstance(spec, dict) else {}
    errors = label_selector(spec.get("podSelector"), "spec.podSelector")
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(direction) or []):
            rule = rule if isinstance(rule, dict) else {}
            at = f"spec.{direction}[{i}]"
            for j, port in enumerate(rule.get("ports") or []):
                errors += validate_port(port, f"{at}.ports[{j}]")
            for j, peer in enumerate(rule.get(peers) or []):
                errors += validate_peer(peer, f"{at}.{peers}[{j}]")
    types = spec.get("policyTypes") or []
    if len(types) > len(POLICY_TYPES):
        # upstream hands the list itself to field.Invalid, which prints it with Go's %#v
        shown = "[]networking.PolicyType{" + ", ".join(f'"{t}"' for t in types) + "}"
        detail = f"Invalid value: {shown}: may not specify more than two policyTypes"
        errors.append(FieldError("FieldValueInvalid", "spec.policyTypes", detail))
        return errors
    for i, kind in enumerate(types):
        if kind not in POLICY_TYPES:
            errors.append(not_supported(f"spec.policyTypes[{i}]", kind, POLICY_TYPES))
    return errors


class NetworkPolicy(Kind):
    group = "networking.k8s.io"
    kind = "NetworkPolicy"
    plural = "networkpolicies"
    short_names = ("netpol",)
    schema = "V1NetworkPolicy"
    type_marks = TYPE_MARKS
    generation = True
    columns = (tables.NAME, tables.column("Pod-Selector", desc=POD_SELECTOR_DOC), tables.AGE)

    def default(self, obj: Obj, creating: bool) -> None:
        spec = obj.get("spec")
        if spec is None:
            spec = obj["spec"] = {}
        if isinstance(spec, dict):
            default_policy(spec)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validate_policy_spec(obj.get("spec"))

    def cells(self, obj: Obj) -> list[Any]:
        spec = obj.get("spec") or {}
        return [obj["metadata"].get("name"), tables.format_selector(spec.get("podSelector")), age(obj)]


KIND = NetworkPolicy()
