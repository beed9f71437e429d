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

KUBERNETES_SERVICE_IP = "10.96.0.1"


async def ensure_kubernetes_service(registry: Registry, address: str, port: int) -> None:
    services, endpoints = SERVICES, ENDPOINTS
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
                "clusterIP": KUBERNETES_SERVICE_IP,
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
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return  # a host name cannot go into Endpoints; in-cluster clients then need DNS-free config
    subsets = [
        {"addresses": [{"ip": address}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}
    ]
    body = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": subsets,
    }
    validate = not ip.is_loopback
    await _put(registry, endpoints, body, validate)
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv6" if ip.version == 6 else "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }
    await _put(registry, ENDPOINT_SLICES, slice_, validate)


async def _put(registry: Registry, kind: Any, body: dict[str, Any], validate: bool) -> None:
    if registry.cache.get(kind.key("default", "kubernetes")) is None:
        await registry.create(kind, "default", body, validate=validate)
    else:
        await registry.update(kind, "default", "kubernetes", body, validate=validate)
