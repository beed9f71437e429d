"""core/v1 Endpoints: the legacy list of a Service's backends, still written by the Endpoints controller
(and kept for default/kubernetes by the server). Validation is upstream's ValidateEndpoints."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, invalid, not_supported, required
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import dns_label, endpoint_ip, ip_address, port_number, qualified_name
from kubeclient import names

Obj = dict[str, Any]

PROTOCOLS = ["SCTP", "TCP", "UDP"]


def _address(path: str, address: Obj) -> list[FieldError]:
    ip = address.get("ip", "")
    errors = ip_address(f"{path}.ip", ip)
    if address.get("hostname"):
        errors += dns_label(f"{path}.hostname", address["hostname"])
    node = address.get("nodeName")
    if node is not None:
        errors += [invalid(f"{path}.nodeName", node, m) for m in names.dns1123_subdomain(node)]
    # Upstream adds ValidateEndpointIP's own "must be a valid IP address" too; one cause is enough.
    return errors + (endpoint_ip(f"{path}.ip", ip) if not errors or errors[0].field != f"{path}.ip" else [])


def _port(path: str, port: Obj, require_name: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    name = port.get("name") or ""
    if require_name and not name:
        errors.append(required(f"{path}.name"))
    elif name:
        errors += dns_label(f"{path}.name", name)
    errors += port_number(f"{path}.port", port.get("port", 0))
    protocol = port.get("protocol")
    if not protocol:
        errors.append(required(f"{path}.protocol"))
    elif protocol not in PROTOCOLS:
        errors.append(not_supported(f"{path}.protocol", protocol, PROTOCOLS))
    if port.get("appProtocol") is not None:
        errors += qualified_name(f"{path}.appProtocol", port["appProtocol"])
    return errors


def validate_subsets(subsets: list[Obj]) -> list[FieldError]:
    errors: list[FieldError] = []
    for i, subset in enumerate(subsets):
        at = f"subsets[{i}]"
        ready, not_ready = subset.get("addresses") or [], subset.get("notReadyAddresses") or []
        if not ready and not not_ready:
            errors.append(required(at, "must specify `addresses` or `notReadyAddresses`"))
        for j, address in enumerate(ready):
            errors += _address(f"{at}.addresses[{j}]", address)
        for j, address in enumerate(not_ready):
            errors += _address(f"{at}.notReadyAddresses[{j}]", address)
        ports = subset.get("ports") or []
        for j, port in enumerate(ports):
            errors += _port(f"{at}.ports[{j}]", port, len(ports) > 1)
    return errors


class Endpoints(Kind):
    kind = "Endpoints"
    plural = "endpoints"
    etcd_resource_prefix = "services/endpoints"  # upstream's SpecialDefaultResourcePrefixes
    singular = "endpoints"
    short_names = ("ep",)
    schema = "V1Endpoints"
    columns = (tables.NAME, tables.column("Endpoints", desc="Endpoints of the service"), tables.AGE)

    def default(self, obj: Obj, creating: bool) -> None:
        for subset in obj.get("subsets") or []:
            for port in subset.get("ports") or []:
                port.setdefault("protocol", "TCP")

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validate_subsets(obj.get("subsets") or [])

    def cells(self, obj: Obj) -> list[Any]:
        pairs = []
        for subset in obj.get("subsets") or []:
            for address in subset.get("addresses") or []:
                for port in subset.get("ports") or [{}]:
                    pairs.append(
                        f"{address.get('ip')}:{port['port']}" if port.get("port") else address.get("ip")
                    )
        text = ",".join(pairs[:3]) + (f" + {len(pairs) - 3} more..." if len(pairs) > 3 else "")
        return [obj["metadata"].get("name"), text or "<none>", age(obj)]


KIND = Endpoints()
