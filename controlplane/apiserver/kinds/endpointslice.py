"""discovery.k8s.io/v1 EndpointSlice: where a Service's backends are, in slices of at most 1000
endpoints, so a change to one pod rewrites one small object instead of the whole Endpoints list.

Written by the EndpointSlice controller (labels kubernetes.io/service-name and
endpointslice.kubernetes.io/managed-by) or by hand for Services without a selector; read by the service
proxy and cluster DNS. Validation is upstream's pkg/apis/discovery/validation with its texts.
"""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, duplicate, invalid, not_supported, required, too_many
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import (
    dns_label,
    endpoint_ip,
    immutable,
    ip_address,
    labels,
    qualified_name,
)
from kubeclient import names

Obj = dict[str, Any]

ADDRESS_TYPES = ["FQDN", "IPv4", "IPv6"]
PROTOCOLS = ["SCTP", "TCP", "UDP"]
MAX_ENDPOINTS = 1000
MAX_ADDRESSES = 100
# Upstream raised the port limit from 100 to 20000 (the API docs still say 100).
MAX_PORTS = 20000
MAX_TOPOLOGY_LABELS = 16
MAX_ZONE_HINTS = 8


def fqdn(path: str, value: str) -> list[FieldError]:
    """IsFullyQualifiedDomainName."""
    name = value[:-1] if value.endswith(".") else value
    errors = [invalid(path, value, m) for m in names.dns1123_subdomain(name)]
    if not errors and len(name.split(".")) < 2:
        errors.append(invalid(path, value, "should be a domain with at least two segments separated by dots"))
    return errors


def _addresses(path: str, addresses: list[Any], address_type: str) -> list[FieldError]:
    if not addresses:
        return [required(path, "must contain at least 1 address")]
    errors: list[FieldError] = []
    if len(addresses) > MAX_ADDRESSES:
        errors.append(too_many(path, len(addresses), MAX_ADDRESSES))
    for i, address in enumerate(addresses):
        at = f"{path}[{i}]"
        if address_type in ("IPv4", "IPv6"):
            errors += ip_address(at, address, 4 if address_type == "IPv4" else 6)
            errors += endpoint_ip(at, address) if not ip_address(at, address) else []
        elif address_type == "FQDN":
            errors += fqdn(at, address)
    return errors


def _hints(path: str, hints: Obj) -> list[FieldError]:
    zones = hints.get("forZones") or []
    if len(zones) > MAX_ZONE_HINTS:
        return [too_many(f"{path}.forZones", len(zones), MAX_ZONE_HINTS)]
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, zone in enumerate(zones):
        at, name = f"{path}.forZones[{i}].name", zone.get("name", "")
        if name in seen:
            errors.append(duplicate(at, name))
        seen.add(name)
        errors += [invalid(at, name, m) for m in names.label_value(name)]
    return errors


def validate_endpoints(endpoints: list[Obj], address_type: str) -> list[FieldError]:
    if len(endpoints) > MAX_ENDPOINTS:
        return [too_many("endpoints", len(endpoints), MAX_ENDPOINTS)]
    errors: list[FieldError] = []
    for i, endpoint in enumerate(endpoints):
        at = f"endpoints[{i}]"
        errors += _addresses(f"{at}.addresses", endpoint.get("addresses") or [], address_type)
        node = endpoint.get("nodeName")
        if node is not None:
            errors += [invalid(f"{at}.nodeName", node, m) for m in names.dns1123_subdomain(node)]
        topology = endpoint.get("deprecatedTopology") or {}
        if len(topology) > MAX_TOPOLOGY_LABELS:
            errors.append(too_many(f"{at}.deprecatedTopology", len(topology), MAX_TOPOLOGY_LABELS))
        errors += labels(f"{at}.deprecatedTopology", topology)
        if endpoint.get("zone") is not None:
            errors += [
                invalid(f"{at}.zone", endpoint["zone"], m) for m in names.label_value(endpoint["zone"])
            ]
        if endpoint.get("hostname") is not None:
            errors += dns_label(f"{at}.hostname", endpoint["hostname"])
        if endpoint.get("hints") is not None:
            errors += _hints(f"{at}.hints", endpoint["hints"])
    return errors


def validate_ports(ports: list[Obj]) -> list[FieldError]:
    if len(ports) > MAX_PORTS:
        return [too_many("ports", len(ports), MAX_PORTS)]
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, port in enumerate(ports):
        at, name = f"ports[{i}]", port.get("name") or ""
        if name:
            errors += dns_label(f"{at}.name", name)
        if name in seen:
            errors.append(duplicate(f"{at}.name", name))
        seen.add(name)
        protocol = port.get("protocol")
        if not protocol:
            errors.append(required(f"{at}.protocol"))
        elif protocol not in PROTOCOLS:
            errors.append(not_supported(f"{at}.protocol", protocol, PROTOCOLS))
        if port.get("appProtocol") is not None:
            errors += qualified_name(f"{at}.appProtocol", port["appProtocol"])
    return errors


def _listed(items: list[str], limit: int = 3) -> str:
    """listWithMoreString: the first three, then `+ N more...`; `<unset>` when empty."""
    text = ",".join(items[:limit])
    if len(items) > limit:
        return f"{text} + {len(items) - limit} more..."
    return text or "<unset>"


class EndpointSlice(Kind):
    group = "discovery.k8s.io"
    kind = "EndpointSlice"
    plural = "endpointslices"
    schema = "V1EndpointSlice"
    columns = (
        tables.NAME,
        tables.column(
            "AddressType",
            desc="addressType specifies the type of address carried by this EndpointSlice. All addresses in this slice must be the same type. This field is immutable after creation. The following address types are currently supported: * IPv4: Represents an IPv4 Address. * IPv6: Represents an IPv6 Address. * FQDN: Represents a Fully Qualified Domain Name.",
        ),
        tables.column(
            "Ports",
            desc='ports specifies the list of network ports exposed by each endpoint in this slice. Each port must have a unique name. When ports is empty, it indicates that there are no defined ports. When a port is defined with a nil port value, it indicates "all ports". Each slice may include a maximum of 100 ports.',
        ),
        tables.column(
            "Endpoints",
            desc="endpoints is a list of unique endpoints in this slice. Each slice may include a maximum of 1000 endpoints.",
        ),
        tables.AGE,
    )

    def default(self, obj: Obj, creating: bool) -> None:
        for port in obj.get("ports") or []:
            port.setdefault("name", "")
            port.setdefault("protocol", "TCP")

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        address_type = obj.get("addressType") or ""
        errors: list[FieldError] = []
        if not address_type:
            errors.append(required("addressType"))
        elif address_type not in ADDRESS_TYPES:
            errors.append(not_supported("addressType", address_type, ADDRESS_TYPES))
        errors += validate_endpoints(obj.get("endpoints") or [], address_type)
        return errors + validate_ports(obj.get("ports") or [])

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        return immutable("addressType", new.get("addressType"), old.get("addressType"))

    def cells(self, obj: Obj) -> list[Any]:
        ports = []
        for port in obj.get("ports") or []:
            ports.append(
                str(port["port"])
                if port.get("port") is not None
                else (port["name"] if port.get("name") is not None else "*")
            )
        addresses = [a for e in obj.get("endpoints") or [] for a in e.get("addresses") or []]
        return [
            obj["metadata"].get("name"),
            obj.get("addressType", ""),
            _listed(ports),
            _listed(addresses),
            age(obj),
        ]


KIND = EndpointSlice()
