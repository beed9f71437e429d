"""Where each Gateway listener is served, decided without I/O: every Gateway of ours shares the
controller's one address, so a listener's port is a port of that address.

As Gateway implementations do, a listener is served on the port it names. An HTTP listener on the
controller's Ingress HTTP port (an HTTPS one on its HTTPS port) shares the Ingresses' servers there;
any other (port, protocol) gets `listen` directives of its own. A listener cannot be served (upstream's
listener condition Accepted False):
- `ProtocolConflict` (with Conflicted True): listeners of one Gateway naming one port with different
  protocols, each of them, as the Gateway API conformance suite expects
  (gateway-listener-protocol-and-route-kind-conflicts: Accepted False Invalid, Programmed False,
  Conflicted True ProtocolConflict);
- `PortUnavailable`: the port is the Ingresses' port of the other protocol, another (older) Gateway of
  ours serves it with another protocol, it is in `unavailable` (held by another process, found by the
  controller's bind check), or in `reserved` (ports the controller is told not to use: the rig reserves
  the Services' node ports, which the service proxy DNATs on every local address before nginx would see
  a connection).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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
    "own"), or the reason (`PortUnavailable`, `ProtocolConflict`) and message it is not."""

    port: int
    tls: bool
    slot: str = "own"
    reason: str = ""
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.reason


def _age(gateway: Obj) -> tuple[str, str, str]:
    meta = gateway["metadata"]
    return (meta.get("creationTimestamp") or "", meta.get("namespace") or "", meta.get("name") or "")


def place(gateways: list[Obj], ports: Ports) -> dict[tuple[str, str, str], Placement]:
    """Each listener's placement, by (gateway namespace, gateway name, listener name); listeners of a
    protocol we do not serve are placed too (a conflict names them), their slot unused."""
    placed: dict[tuple[str, str, str], Placement] = {}
    owner: dict[int, tuple[str, tuple[str, str, str]]] = {}  # port -> (protocol, the Gateway keeping it)
    for gateway in sorted(gateways, key=_age):
        meta = gateway["metadata"]
        listeners = gateway["spec"].get("listeners") or []
        protocols: dict[int, set[str]] = {}
        for spec in listeners:
            protocols.setdefault(int(spec.get("port") or 0), set()).add(str(spec.get("protocol")))
        for spec in listeners:
            port, protocol = int(spec.get("port") or 0), str(spec.get("protocol"))
            key = (meta.get("namespace") or "", meta["name"], spec.get("name") or "")
            placed[key] = _placement(port, protocol, protocols[port], _age(gateway), owner, ports)
            if placed[key].ok and protocol in SERVED and placed[key].slot == "own":
                owner.setdefault(port, (protocol, _age(gateway)))
    return placed


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
        return Placement(port, tls, reason="ProtocolConflict", message=f"port {port} is also {others} here")
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
