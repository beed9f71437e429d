"""What a Service and its pods say about endpoints, shared by the EndpointSlice and Endpoints
controllers (upstream's staging/src/k8s.io/endpointslice/util and pkg/api/v1/pod FindPort): which pods
belong in the endpoints, which port number a (named) target port resolves to on each pod, the pod's
address of the Service's family, and when its hostname is published. Pure functions over dicts."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from controlplane.controllers import podutil
from kubeclient.informer import meta
from kubeclient.selectors import Selector, from_set

Obj = dict[str, Any]

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
CONTROLLER_NAME = "endpointslice-controller.k8s.io"
HEADLESS_LABEL = "service.kubernetes.io/headless"
# Labels a Service's own labels may not override on the objects written for it.
RESERVED_LABELS = (SERVICE_NAME_LABEL, MANAGED_BY_LABEL, HEADLESS_LABEL)


@dataclass(frozen=True)
class ServiceInfo:
    """The fields of a Service the endpoint controllers read, parsed once."""

    namespace: str
    name: str
    uid: str
    selector: dict[str, str] | None
    ports: tuple[Obj, ...]
    headless: bool
    external_name: bool
    publish_not_ready: bool
    families: tuple[str, ...]
    labels: dict[str, str]

    @classmethod
    def of(cls, service: Obj) -> ServiceInfo:
        spec = service.get("spec") or {}
        m = meta(service)
        families = tuple(spec.get("ipFamilies") or ()) or ("IPv4",)
        return cls(
            namespace=m.get("namespace", ""),
            name=m.get("name", ""),
            uid=m.get("uid", ""),
            selector=spec.get("selector"),
            ports=tuple(spec.get("ports") or ()),
            headless=spec.get("clusterIP") == "None",
            external_name=spec.get("type") == "ExternalName",
            publish_not_ready=bool(spec.get("publishNotReadyAddresses")),
            families=families,
            labels=dict(m.get("labels") or {}),
        )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def pod_selector(self) -> Selector:
        return from_set(self.selector or {})

    def object_labels(self) -> dict[str, str]:
        """The Service's labels as the endpoint objects carry them (plus the headless mark)."""
        out = {k: v for k, v in self.labels.items() if k not in RESERVED_LABELS}
        if self.headless:
            out[HEADLESS_LABEL] = ""
        return out


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def should_be_in_endpoints(pod: Obj, include_terminating: bool) -> bool:
    """ShouldPodBeInEndpoints: not terminal, has an IP, and not terminating unless asked."""
    if is_terminal(pod):
        return False
    status = pod.get("status") or {}
    if not status.get("podIP") and not status.get("podIPs"):
        return False
    return include_terminating or not meta(pod).get("deletionTimestamp")


def pod_ips(pod: Obj) -> list[str]:
    status = pod.get("status") or {}
    ips = [p.get("ip") for p in status.get("podIPs") or [] if p.get("ip")]
    if not ips and status.get("podIP"):
        ips = [status["podIP"]]
    return ips


def address_of_family(pod: Obj, family: str) -> str | None:
    """The pod's first IP of the family (IPv4 / IPv6), if any."""
    version = 6 if family == "IPv6" else 4
    for ip in pod_ips(pod):
        try:
            if ipaddress.ip_address(ip).version == version:
                return ip
        except ValueError:
            continue
    return None


def find_port(pod: Obj, service_port: Obj) -> int | None:
    """FindPort: a numeric targetPort as is; a named one resolves to the container port of that name
    and protocol on this pod; None when the pod has no such port."""
    target = service_port.get("targetPort", service_port.get("port"))
    protocol = service_port.get("protocol") or "TCP"
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target and (port.get("protocol") or "TCP") == protocol:
                return int(port["containerPort"])
    return None


def endpoint_ports(service: ServiceInfo, pod: Obj) -> list[Obj]:
    """The slice ports of this pod (getEndpointPorts): one per Service port the pod resolves."""
    out = []
    for sp in service.ports:
        number = find_port(pod, sp)
        if number is None:
            continue
        port: Obj = {"name": sp.get("name") or "", "port": number, "protocol": sp.get("protocol") or "TCP"}
        if sp.get("appProtocol") is not None:
            port["appProtocol"] = sp["appProtocol"]
        out.append(port)
    return out


def should_set_hostname(pod: Obj, service: ServiceInfo) -> bool:
    spec = pod.get("spec") or {}
    return (
        bool(spec.get("hostname"))
        and spec.get("subdomain") == service.name
        and meta(pod).get("namespace") == service.namespace
    )


def target_ref(pod: Obj) -> Obj:
    m = meta(pod)
    return {
        "kind": "Pod",
        "namespace": m.get("namespace", ""),
        "name": m.get("name", ""),
        "uid": m.get("uid", ""),
    }


def is_ready(pod: Obj) -> bool:
    return podutil.is_ready(pod)


def selected_pods(service: ServiceInfo, pods: list[Obj]) -> list[Obj]:
    selector = service.pod_selector()
    return sorted(
        (p for p in pods if selector.matches(meta(p).get("labels") or {})),
        key=lambda p: meta(p).get("name", ""),
    )
