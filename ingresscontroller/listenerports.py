"""Where each Gateway listener is served, decided without I/O: every Gateway of ours shares the
controller's one address, so a listener's port is a port of that address.

As Gateway implementations do, a listener is served on the port it names. An HTTP listener on the
controller's Ingress HTTP port (an HTTPS one on its HTTPS port) shares the Ingresses' servers there;
any other (port, protocol) gets `listen` directives of its own. A listener cannot be served (upstream's
listener condition Accepted False):
- Conflicted True `ProtocolConflict`: listeners of one Gateway naming one port with different
  protocols, each of them, as the Gateway API conformance suite expects
  (gateway-listener-protocol-and-route-kind-conflicts: Accepted False Invalid, Programmed False);
- Conflicted True `HostnameConflict`: listeners that are not distinct (the same port and protocol and
  the same hostname, none counting as one): within one Gateway each of them (Accepted False Invalid; the
  API forbids picking a winner there, and its CEL rule already refuses such a Gateway); across Gateways,
  which share our one address, the older Gateway (creationTimestamp, then namespace/name: GEP-1713's
  order for merged listeners) keeps it and the newer one's listener is Accepted False PortUnavailable
  (as GEP-1713 reports a merged listener that conflicts);
- `PortUnavailable`: the port is the Ingresses' port of the other protocol, another (older) Gateway of
  ours serves it with another protocol, it is in `unavailable` (held by another process, found by the
  controller's bind check), or in `reserved` (ports the controller is told not to use: the rig reserves
  the Services' node ports, which the service proxy DNATs on every local address before nginx would see
  a connection).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

Obj = dict[str, Any]
SERVED = ("HTTP", "HTTPS")


@dataclass(frozen=True)
class Ports:
    """The controller's Ingress ports, and the ports no listener may use (port -> why)."""

    http: int = 80
    https: int = 443
    unavailable: Mapping[int, str] = field(default_factory=dict)
    reserved: tuple[range, ...] = ()  # ports the controller is told not to use (--reserved-ports)


def parse_ranges(text: str) -> tuple[range, ...]:
    """`--reserved-ports`: "30000-32767,10250" as ranges; ValueError for anything else."""
    found = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        low, _, high = item.partition("-")
        first, last = int(low), int(high or low)
        if not 0 < first <= last <= 65535:
            raise ValueError(f"not a port or port range: {item!r}")
        found.append(range(first, last + 1))
    return tuple(found)


@dataclass(frozen=True)
class Placement:
    """A listener's port: where it is served (`slot`: "http", "https" for the Ingress ports, else
    "own"), or why it is not: its Accepted False `reason` (`PortUnavailable`, `Invalid`) and message, and
    for a conflict the Conflicted True reason (`conflict`: `ProtocolConflict`, `HostnameConflict`)."""

    port: int
    tls: bool
    slot: str = "own"
    reason: str = ""
    message: str = ""
    conflict: str = ""

    @property
    def ok(self) -> bool:
        return not self.reason


def _age(gateway: Obj) -> tuple[str, str, str]:
    meta = gateway["metadata"]
    return (meta.get("creationTimestamp") or "", meta.get("namespace") or "", meta.get("name") or "")


def _distinct(spec: Obj) -> tuple[int, str, str]:
    """What tells listeners on one address apart: port, protocol and hostname (none is "")."""
    return int(spec.get("port") or 0), str(spec.get("protocol")), spec.get("hostname") or ""


def place(gateways: list[Obj], ports: Ports) -> dict[tuple[str, str, str], Placement]:
    """Each listener's placement, by (gateway namespace, gateway name, listener name); listeners of a
    protocol we do not serve are placed too (a conflict names them), their slot unused."""
    placed: dict[tuple[str, str, str], Placement] = {}
    owner: dict[int, tuple[str, tuple[str, str, str]]] = {}  # port -> (protocol, the Gateway keeping it)
    claimed: dict[tuple[int, str, str], str] = {}  # (port, protocol, hostname) -> the listener serving it
    for gateway in sorted(gateways, key=_age):
        meta = gateway["metadata"]
        listeners = gateway["spec"].get("listeners") or []
        protocols: dict[int, set[str]] = {}
        for spec in listeners:
            protocols.setdefault(int(spec.get("port") or 0), set()).add(str(spec.get("protocol")))
        twins = Counter(_distinct(spec) for spec in listeners)
        mine: dict[tuple[int, str, str], str] = {}
        for spec in listeners:
            port, protocol = int(spec.get("port") or 0), str(spec.get("protocol"))
            key = (meta.get("namespace") or "", meta["name"], spec.get("name") or "")
            placement = _placement(port, protocol, protocols[port], _age(gateway), owner, ports)
            if placement.ok and protocol in SERVED:
                placement = _hostname_conflict(placement, spec, twins, claimed)
            placed[key] = placement
            if placement.ok and protocol in SERVED:
                mine[_distinct(spec)] = f"listener {key[2]} of Gateway {key[0]}/{key[1]}"
                if placement.slot == "own":
                    owner.setdefault(port, (protocol, _age(gateway)))
        claimed.update(mine)
    return placed


def _hostname_conflict(
    placement: Placement,
    spec: Obj,
    twins: Counter[tuple[int, str, str]],
    claimed: dict[tuple[int, str, str], str],
) -> Placement:
    """HostnameConflict for a listener not distinct from another one of its Gateway, or from one an older
    Gateway serves on the same address; else the placement as it was."""
    distinct = _distinct(spec)
    port, protocol, hostname = distinct
    named = f"hostname {hostname}" if hostname else "no hostname"
    if twins[distinct] > 1:
        message = f"another listener of this Gateway has port {port} ({protocol}, {named})"
        return replace(placement, reason="Invalid", message=message, conflict="HostnameConflict")
    if distinct in claimed:
        message = f"port {port} ({protocol}, {named}) is served for {claimed[distinct]} (older, same address)"
        return replace(placement, reason="PortUnavailable", message=message, conflict="HostnameConflict")
    return placement


def _placement(
    port: int,
    protocol: str,
    protocols: set[str],
    age: tuple[str, str, str],
    owner: dict[int, tuple[str, tuple[str, str, str]]],
    ports: Ports,
) -> Placement:
    tls = protocol == "HTTPS"
    if len(protocols) > 1:
        others = ", ".join(sorted(protocols - {protocol}))
        message = f"port {port} is also {others} here"
        return Placement(port, tls, reason="Invalid", message=message, conflict="ProtocolConflict")
    if protocol not in SERVED:
        return Placement(port, tls)
    if port in ports.unavailable:
        return Placement(port, tls, reason="PortUnavailable", message=ports.unavailable[port])
    reserved = next((r for r in ports.reserved if port in r), None)
    if reserved is not None:
        span = f"{reserved.start}-{reserved.stop - 1}" if len(reserved) > 1 else str(reserved.start)
        message = f"port {port} is reserved on this controller (--reserved-ports {span})"
        return Placement(port, tls, reason="PortUnavailable", message=message)
    if port == ports.http:
        if tls:
            return Placement(port, tls, reason="PortUnavailable", message=f"port {port} serves plain HTTP")
        return Placement(port, tls, "http")
    if port == ports.https:
        if not tls:
            return Placement(port, tls, reason="PortUnavailable", message=f"port {port} serves HTTPS")
        return Placement(port, tls, "https")
    held = owner.get(port)
    if held is not None and held[0] != protocol and held[1] != age:
        gateway = f"{held[1][1]}/{held[1][2]}"
        message = f"port {port} serves {held[0]} for Gateway {gateway} on the same address"
        return Placement(port, tls, reason="PortUnavailable", message=message)
    return Placement(port, tls)
