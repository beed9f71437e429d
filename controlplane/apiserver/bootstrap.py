"""Objects the API server itself keeps: the `default/kubernetes` Service, its Endpoints and its
EndpointSlice (as upstream's endpoints reconciler and EndpointsAdapter write them).

Upstream's apiserver maintains them so that every pod finds the API (the kubelet derives
KUBERNETES_SERVICE_HOST/PORT from this service, in-cluster clients dial kubernetes.default.svc).
The Endpoints are rewritten on each start because the port or address may have changed. A
single-machine server advertises its loopback address, which upstream's ValidateEndpointIP refuses for
any Endpoints; the server still records itself there (skipping validation for that one write) so that
readers find its port, and pods reach that host through their gateway.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.kinds.endpoints import KIND as ENDPOINTS
from controlplane.apiserver.kinds.endpointslice import KIND as ENDPOINT_SLICES
from controlplane.apiserver.kinds.service import KIND as SERVICES
from controlplane.apiserver.registry import Registry


async def ensure_kubernetes_service(
    registry: Registry, address: str, port: int, endpoints: bool = True
) -> None:
    """The Service (created once, its target port kept to ours) and, unless the lease endpoint
    reconciler (endpointreconciler.py) keeps them instead, its Endpoints and EndpointSlice naming us."""
    services = SERVICES
    if registry.cache.get(services.key("default", "kubernetes")) is None:
        service: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "kubernetes",
                "labels": {"component": "apiserver", "provider": "kubernetes"},
            },
            "spec": {
                "type": "ClusterIP",
                "clusterIP": registry.service_ranges.kubernetes_service_ip,
                "sessionAffinity": "None",
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
            },
        }
        try:
            await registry.create(services, "default", service)
        except ApiError as err:
            if err.code != 409:
                raise
    else:

        def retarget(svc: dict[str, Any]) -> dict[str, Any]:
            for p in (svc.get("spec") or {}).get("ports") or []:
                if p.get("name") == "https":
                    p["targetPort"] = port
            return svc

        await registry.guaranteed_update(services, "default", "kubernetes", retarget)
    if endpoints:
        await write_endpoints(registry, [address], port)


def endpoint_addresses(registry: Registry) -> tuple[list[str], int]:
    """The addresses and port the `kubernetes` Endpoints list now ([] and 0 when there are none)."""
    cached = registry.cache.get(ENDPOINTS.key("default", "kubernetes"))
    subsets = (cached.obj.get("subsets") or []) if cached is not None else []
    if len(subsets) != 1:
        return [], 0
    ports = subsets[0].get("ports") or []
    addresses = [a.get("ip", "") for a in subsets[0].get("addresses") or []]
    return addresses, int(ports[0].get("port", 0)) if len(ports) == 1 else 0


async def write_endpoints(registry: Registry, addresses: list[str], port: int) -> None:
    """The `kubernetes` Endpoints and EndpointSlice: one subset, these addresses (in this order), one
    port, as upstream's reconcilers and EndpointsAdapter write them. Host names are left out (they
    cannot go into Endpoints); nothing is written when no address remains."""
    ips = []
    for address in addresses:
        try:
            ips.append(ipaddress.ip_address(address))
        except ValueError:
            continue  # a host name cannot go into Endpoints; in-cluster clients then need DNS-free config
    if not ips:
        return
    subsets = [
        {
            "addresses": [{"ip": str(ip)} for ip in ips],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        }
    ]
    body = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": subsets,
    }
    validate = not any(ip.is_loopback for ip in ips)
    await _put(registry, ENDPOINTS, body, validate)
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv6" if ips[0].version == 6 else "IPv4",
        "endpoints": [{"addresses": [str(ip)], "conditions": {"ready": True}} for ip in ips],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }
    await _put(registry, ENDPOINT_SLICES, slice_, validate)


async def _put(registry: Registry, kind: Any, body: dict[str, Any], validate: bool) -> None:
    if registry.cache.get(kind.key("default", "kubernetes")) is None:
        try:
            await registry.create(kind, "default", body, validate=validate)
            return
        except ApiError as err:
            if err.code != 409:  # another API server created it first: update theirs
                raise
    await registry.update(kind, "default", "kubernetes", body, validate=validate)
