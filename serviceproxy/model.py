"""What the proxy knows about Services and their endpoints, parsed once at the edge (upstream's
pkg/proxy servicePortInfo / endpointInfo and the change trackers' conversions).

A Service becomes one `ServicePort` per port (ClusterIP services only: ExternalName and headless ones
get no rules, nor do Services labelled for another proxy); EndpointSlices become `Endpoint`s per
service port, matched by port name and protocol. A slice written badly by hand (an address that is
no IPv4 address, a port without a number) is skipped with a logged reason, never a crash.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("proxy")

Obj = dict[str, Any]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
SERVICE_PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name"
SOURCE_RANGES_ANNOTATION = "service.beta.kubernetes.io/load-balancer-source-ranges"
DEFAULT_AFFINITY_TIMEOUT = 10800
PROTOCOLS = ("TCP", "UDP", "SCTP")


@dataclass(frozen=True, order=True)
class ServicePortName:
    namespace: str
    name: str
    port: str  # the Service port's name ("" for a single unnamed port)
    protocol: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}:{self.port}" if self.port else f"{self.namespace}/{self.name}"

    @property
    def chain_base(self) -> str:
        """`namespace/name/protocol/port` as upstream's chain names spell it."""
        return f"{self.namespace}/{self.name}/{self.protocol.lower()}/{self.port}"


@dataclass(frozen=True)
class ServicePort:
    name: ServicePortName
    cluster_ip: str
    port: int
    node_port: int
    external_ips: tuple[str, ...]
    load_balancer_ips: tuple[str, ...]
    affinity_timeout: int | None  # seconds with sessionAffinity ClientIP, else None
    internal_local: bool
    external_local: bool
    source_ranges: tuple[str, ...] = ()  # loadBalancerSourceRanges (or the legacy annotation)
    health_check_node_port: int = 0

    @property
    def protocol(self) -> str:
        return self.name.protocol.lower()

    @property
    def externally_accessible(self) -> bool:
        return bool(self.node_port or self.external_ips or self.load_balancer_ips)

    @property
    def uses_local_endpoints(self) -> bool:
        return self.internal_local or (self.external_local and self.externally_accessible)

    @property
    def uses_cluster_endpoints(self) -> bool:
        return not self.internal_local or (self.externally_accessible and not self.external_local)


@dataclass(frozen=True, order=True)
class Endpoint:
    ip: str
    port: int
    ready: bool
    serving: bool
    terminating: bool
    node_name: str

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"


def _ipv4(value: Any) -> str | None:
    try:
        return str(ipaddress.IPv4Address(value)) if isinstance(value, str) else None
    except ValueError:
        return None


def source_ranges(service: Obj) -> tuple[str, ...]:
    """spec.loadBalancerSourceRanges, else the `service.beta.kubernetes.io/load-balancer-source-ranges`
    annotation (comma-separated), as upstream reads them; IPv4 CIDRs only, others skipped."""
    ranges = (service.get("spec") or {}).get("loadBalancerSourceRanges") or []
    if not ranges:
        annotations = (service.get("metadata") or {}).get("annotations") or {}
        annotation = annotations.get(SOURCE_RANGES_ANNOTATION, "")
        ranges = [r for r in annotation.split(",") if r.strip()]
    out = []
    for cidr in ranges:
        try:
            net = ipaddress.ip_network(str(cidr).strip(), strict=False)
        except ValueError:
            continue
        if net.version == 4:
            out.append(str(net))
    return tuple(out)


def service_ports(service: Obj) -> list[ServicePort]:
    """The proxied ports of one Service (none for ExternalName, headless or foreign-proxy Services)."""
    meta = service.get("metadata") or {}
    spec = service.get("spec") or {}
    if (meta.get("labels") or {}).get(SERVICE_PROXY_NAME_LABEL):
        return []
    if spec.get("type") == "ExternalName":
        return []
    cluster_ip = _ipv4(spec.get("clusterIP"))
    if cluster_ip is None:
        return []  # headless ("None"), not allocated yet, or IPv6 only
    affinity = None
    if spec.get("sessionAffinity") == "ClientIP":
        config = (spec.get("sessionAffinityConfig") or {}).get("clientIP") or {}
        affinity = int(config.get("timeoutSeconds") or DEFAULT_AFFINITY_TIMEOUT)
    ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    # ipMode Proxy: the load balancer rewrites the destination itself, so no rule for its IP (upstream).
    lb_ips = tuple(ip for ip in (_ipv4(i.get("ip")) for i in ingress if i.get("ipMode") != "Proxy") if ip)
    external_ips = tuple(ip for ip in (_ipv4(i) for i in spec.get("externalIPs") or []) if ip)
    ranges = source_ranges(service) if spec.get("type") == "LoadBalancer" else ()
    health_port = spec.get("healthCheckNodePort") if spec.get("externalTrafficPolicy") == "Local" else 0
    out = []
    for port in spec.get("ports") or []:
        protocol = port.get("protocol") or "TCP"
        if protocol not in PROTOCOLS or not isinstance(port.get("port"), int):
            continue
        out.append(
            ServicePort(
                name=ServicePortName(
                    meta.get("namespace", ""), meta.get("name", ""), port.get("name") or "", protocol
                ),
                cluster_ip=cluster_ip,
                port=port["port"],
                node_port=int(port.get("nodePort") or 0),
                external_ips=external_ips,
                load_balancer_ips=lb_ips if spec.get("type") == "LoadBalancer" else (),
                affinity_timeout=affinity,
                internal_local=spec.get("internalTrafficPolicy") == "Local",
                external_local=spec.get("externalTrafficPolicy") == "Local",
                source_ranges=ranges,
                health_check_node_port=health_port if isinstance(health_port, int) else 0,
            )
        )
    return out


def slice_endpoints(slice_: Obj) -> dict[ServicePortName, list[Endpoint]]:
    """The endpoints one EndpointSlice gives each of its Service's ports; bad entries are skipped."""
    meta = slice_.get("metadata") or {}
    service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    where = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    if not service or slice_.get("addressType") != "IPv4":
        return {}
    out: dict[ServicePortName, list[Endpoint]] = {}
    for port in slice_.get("ports") or []:
        number = port.get("port")
        if not isinstance(number, int) or not 0 < number < 65536:
            log.warning(
                "skipping slice port slice=%s port=%s reason=%s",
                where,
                port.get("name") or "",
                "no port number" if number is None else f"invalid port {number!r}",
            )
            continue
        name = ServicePortName(
            meta.get("namespace", ""), service, port.get("name") or "", port.get("protocol") or "TCP"
        )
        endpoints = out.setdefault(name, [])
        for ep in slice_.get("endpoints") or []:
            addresses = ep.get("addresses") or []
            ip = _ipv4(addresses[0]) if addresses else None
            if ip is None:
                log.warning(
                    "skipping endpoint slice=%s address=%r reason=not an IPv4 address",
                    where,
                    addresses[0] if addresses else None,
                )
                continue
            conditions = ep.get("conditions") or {}
            ready = conditions.get("ready") is None or bool(conditions.get("ready"))
            serving = ready if conditions.get("serving") is None else bool(conditions.get("serving"))
            endpoints.append(
                Endpoint(
                    ip, number, ready, serving, bool(conditions.get("terminating")), ep.get("nodeName") or ""
                )
            )
    return out


def merge_endpoints(slices: list[Obj]) -> dict[ServicePortName, tuple[Endpoint, ...]]:
    """All slices of all Services: endpoints per service port, one per ip:port (the first slice's wins)."""
    merged: dict[ServicePortName, dict[str, Endpoint]] = {}
    for slice_ in sorted(slices, key=lambda s: (s.get("metadata") or {}).get("name", "")):
        for name, endpoints in slice_endpoints(slice_).items():
            seen = merged.setdefault(name, {})
            for ep in endpoints:
                seen.setdefault(ep.address, ep)
    return {name: tuple(sorted(eps.values())) for name, eps in merged.items()}


@dataclass(frozen=True)
class Categorized:
    cluster: tuple[Endpoint, ...]
    local: tuple[Endpoint, ...]
    reachable: tuple[Endpoint, ...]
    has_any: bool


def _usable(endpoints: tuple[Endpoint, ...]) -> tuple[Endpoint, ...]:
    """Ready ones; serving-but-terminating ones only when none is ready (upstream's rule)."""
    ready = tuple(e for e in endpoints if e.ready)
    return ready or tuple(e for e in endpoints if e.serving and e.terminating)


def categorize(svc: ServicePort, endpoints: tuple[Endpoint, ...], node: str) -> Categorized:
    """CategorizeEndpoints: which endpoints Cluster and Local traffic policy use on this node."""
    cluster = _usable(endpoints) if svc.uses_cluster_endpoints else ()
    has_any = bool(_usable(endpoints))
    if not svc.uses_local_endpoints:
        return Categorized(cluster, (), cluster, has_any)
    local = _usable(tuple(e for e in endpoints if e.node_name == node))
    reachable = tuple(sorted(set(cluster) | set(local)))
    return Categorized(cluster, local, reachable, has_any)
