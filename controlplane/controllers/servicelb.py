"""The LoadBalancer controller of a cluster without a cloud (`service-lb-controller`): what k3s's
ServiceLB (klipper-lb) gives, without its per-Service DaemonSet pods. The service proxy on every node
already answers a LoadBalancer Service's port on the ingress IPs written in its status, so all this
controller does is write `status.loadBalancer.ingress`: one entry per eligible node's InternalIP, with
`ipMode: VIP` (traffic arrives addressed to the IP itself, so the proxy's own rules carry it).

Why in the controller manager: upstream's service controller (k8s.io/cloud-provider's
`service-lb-controller`) lives in the cloud-controller-manager, a control-plane process that writes
Service status from the cluster's Nodes, and runs as the `service-controller` account whose bootstrap
role (services list/watch, services/status patch, nodes list/watch, events) fits this job exactly. The
proxy is per node, would need write access to Services, and N proxies would race on one status.

Eligible nodes are those upstream's node predicate keeps (not labelled
`node.kubernetes.io/exclude-from-external-load-balancers`, not being deleted) that are Ready, since a
NotReady node's proxy may not be answering. A Service with `spec.loadBalancerClass` set belongs to
another implementation and is left alone, as upstream's controller leaves it; one that stops being a
LoadBalancer has its ingress cleared. No finalizer: there is no external resource to release.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from controlplane.controllers.base import Controller, ControllerContext
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL
from kubeclient.informer import meta, split_key

Obj = dict[str, Any]
EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class LBService:
    """The fields of a Service this controller reads, parsed once."""

    is_load_balancer: bool
    foreign_class: bool
    ingress: tuple[Obj, ...]

    @classmethod
    def of(cls, service: Obj) -> LBService:
        spec = service.get("spec") or {}
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        return cls(
            is_load_balancer=spec.get("type") == "LoadBalancer",
            foreign_class=bool(spec.get("loadBalancerClass")),
            ingress=tuple(ingress),
        )


def node_eligible(node: Obj) -> bool:
    if EXCLUDE_LABEL in (meta(node).get("labels") or {}) or meta(node).get("deletionTimestamp"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def internal_ip(node: Obj) -> str | None:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            try:
                return str(ipaddress.ip_address(address.get("address", "")))
            except ValueError:
                continue
    return None


def wanted_ingress(nodes: list[Obj]) -> list[Obj]:
    """One ingress entry per eligible node's InternalIP, sorted by address (a stable status)."""
    ips = {ip for ip in (internal_ip(n) for n in nodes if node_eligible(n)) if ip}
    return [{"ip": ip, "ipMode": "VIP"} for ip in sorted(ips, key=ipaddress.ip_address)]


def services_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/services/{quote(name)}/status"


class ServiceLBController(Controller):
    name = "service-lb-controller"
    account = "service-controller"
    workers = 2

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.recorder = ctx.recorder("service-controller")
        self.services = ctx.informers.get("/api/v1/services")
        self.nodes = ctx.informers.get("/api/v1/nodes")
        self.services.add_handler(**self.handlers())
        self.nodes.add_handler(
            on_add=self._nodes_changed,
            on_update=self._node_updated,
            on_delete=self._nodes_changed,
        )

    def _nodes_changed(self, _node: Obj | None = None) -> None:
        for service in self.services.list():
            info = LBService.of(service)
            if info.is_load_balancer and not info.foreign_class:
                self.enqueue(service)

    def _node_updated(self, old: Obj, new: Obj) -> None:
        # Heartbeats change a node every few seconds; only eligibility and the address matter here.
        if (node_eligible(old), internal_ip(old)) != (node_eligible(new), internal_ip(new)):
            self._nodes_changed(new)

    async def sync(self, key: str) -> None:
        service = self.services.get(key)
        if service is None:
            return
        info = LBService.of(service)
        if info.foreign_class:
            return
        if not info.is_load_balancer:
            if info.ingress:
                await self._write(key, [])  # no longer a LoadBalancer: nothing serves these any more
            return
        ingress = wanted_ingress(self.nodes.list())
        if list(info.ingress) == ingress:
            return
        first = not info.ingress
        service = {**service, "apiVersion": "v1", "kind": "Service"}  # the events' involvedObject
        if first:
            self.recorder.event(service, NORMAL, "EnsuringLoadBalancer", "Ensuring load balancer")
        await self._write(key, ingress)
        if not ingress:
            self.recorder.event(
                service, NORMAL, "UnAvailableLoadBalancer", "There are no available nodes for LoadBalancer"
            )
        elif first:
            self.recorder.event(service, NORMAL, "EnsuredLoadBalancer", "Ensured load balancer")
        else:
            self.recorder.event(
                service, NORMAL, "UpdatedLoadBalancer", "Updated load balancer with new hosts"
            )

    async def _write(self, key: str, ingress: list[Obj]) -> None:
        namespace, name = split_key(key)
        body = {"status": {"loadBalancer": {"ingress": ingress or None}}}
        try:
            await self.client.patch(services_path(namespace, name), body, content_type=MERGE_PATCH)
        except ApiError as err:
            if not err.not_found:
                raise
