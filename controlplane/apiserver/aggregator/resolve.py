"""Where an APIService's Service is reached: the Service's port matching `spec.service.port`, then an
address of the Endpoints subset carrying that port's name, as upstream's ResolveEndpoint
(k8s.io/apiserver/pkg/util/proxy/proxy.go). Read from the watch cache, so it costs no store round trip."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from controlplane.apiserver.kinds.endpoints import KIND as ENDPOINTS
from controlplane.apiserver.kinds.service import KIND as SERVICES
from controlplane.storage.cache import WatchCache

Obj = dict[str, Any]


class ResolveError(Exception):
    """Why no address was found: `reason` is the Available condition's (ServiceNotFound, ...)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    @property
    def netloc(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def resolve(cache: WatchCache, namespace: str, name: str, port: int) -> list[Endpoint]:
    """Every ready address for the service port (shuffled: upstream picks one at random)."""
    svc_cached = cache.get(SERVICES.key(namespace, name))
    if svc_cached is None:
        raise ResolveError("ServiceNotFound", f'service/{name} in "{namespace}" is not present')
    svc = svc_cached.obj
    spec = svc.get("spec") or {}
    if spec.get("type") == "ExternalName":
        return [Endpoint(spec.get("externalName", ""), port)]
    ports = [p for p in spec.get("ports") or [] if p.get("port") == port]
    if not ports:
        raise ResolveError(
            "ServicePortError", f'service/{name} in "{namespace}" is not listening on port {port}'
        )
    port_name = ports[0].get("name") or ""
    ep_cached = cache.get(ENDPOINTS.key(namespace, name))
    if ep_cached is None:
        raise ResolveError("EndpointsNotFound", f'cannot find endpoints for service/{name} in "{namespace}"')
    found: list[Endpoint] = []
    for subset in ep_cached.obj.get("subsets") or []:
        for ep_port in subset.get("ports") or []:
            if (ep_port.get("name") or "") == port_name:
                found += [
                    Endpoint(a["ip"], int(ep_port["port"]))
                    for a in subset.get("addresses") or []
                    if a.get("ip")
                ]
    if not found:
        raise ResolveError(
            "MissingEndpoints",
            f'endpoints for service/{name} in "{namespace}" have no addresses with port name "{port_name}"',
        )
    random.shuffle(found)
    return found
