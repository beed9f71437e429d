"""The Endpoints controller (upstream's pkg/controller/endpoint): the legacy core/v1 Endpoints of every
Service with a selector, as upstream still writes them. Ready pods go to `addresses`, the others to
`notReadyAddresses` (all to `addresses` with publishNotReadyAddresses); terminating pods are left out
unless published; subsets are repacked (addresses grouped by identical port sets, sorted); more than
1000 addresses are truncated with the `endpoints.kubernetes.io/over-capacity: truncated` annotation.
The Endpoints of a deleted Service are deleted; a Service without a selector keeps whatever its user
wrote."""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import quote

from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.endpointslice_pods import (
    ServiceInfo,
    address_of_family,
    endpoint_ports,
    is_ready,
    selected_pods,
    should_be_in_endpoints,
    should_set_hostname,
    target_ref,
)
from kubeclient.errors import ApiError
from kubeclient.informer import by_namespace, meta, split_key

Obj = dict[str, Any]
MAX_CAPACITY = 1000
OVER_CAPACITY = "endpoints.kubernetes.io/over-capacity"


def _address(service: ServiceInfo, pod: Obj, ip: str) -> Obj:
    address: Obj = {"ip": ip, "targetRef": target_ref(pod)}
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        address["nodeName"] = node
    if should_set_hostname(pod, service):
        address["hostname"] = pod["spec"]["hostname"]
    return address


def _ip_order(address: Obj) -> tuple[Any, ...]:
    try:
        return (0, int(ipaddress.ip_address(address["ip"])), address.get("targetRef", {}).get("uid", ""))
    except ValueError:
        return (1, address["ip"], "")


def _port_order(port: Obj) -> tuple[Any, ...]:
    return (port.get("name") or "", port.get("port") or 0, port.get("protocol") or "TCP")


def repack(entries: list[tuple[Obj, bool, list[Obj]]]) -> list[Obj]:
    """RepackSubsets: (address, ready, ports) entries grouped into subsets of identical port sets."""
    groups: dict[tuple[Any, ...], tuple[list[Obj], list[Obj], list[Obj]]] = {}
    for address, ready, ports in entries:
        key = tuple(sorted(_port_order(p) + (p.get("appProtocol"),) for p in ports))
        ports_, ready_, not_ready = groups.setdefault(key, (sorted(ports, key=_port_order), [], []))
        (ready_ if ready else not_ready).append(address)
    subsets = []
    for ports, ready, not_ready in groups.values():
        subset: Obj = {}
        if ready:
            subset["addresses"] = sorted(ready, key=_ip_order)
        if not_ready:
            subset["notReadyAddresses"] = sorted(not_ready, key=_ip_order)
        if ports:
            subset["ports"] = ports
        subsets.append(subset)
    return sorted(subsets, key=lambda s: _ip_order((s.get("addresses") or s.get("notReadyAddresses"))[0]))


def desired_subsets(service: ServiceInfo, pods: list[Obj]) -> list[Obj]:
    entries: list[tuple[Obj, bool, list[Obj]]] = []
    family = service.families[0]
    for pod in pods:
        if not should_be_in_endpoints(pod, include_terminating=service.publish_not_ready):
            continue
        ip = address_of_family(pod, family)
        if ip is None:
            continue
        ready = service.publish_not_ready or is_ready(pod)
        if not service.ports and service.headless:
            entries.append((_address(service, pod, ip), ready, []))
            continue
        for port in endpoint_ports(service, pod):
            entries.append((_address(service, pod, ip), ready, [port]))
    return repack(entries)


def truncate(subsets: list[Obj]) -> tuple[list[Obj], bool]:
    """At most MAX_CAPACITY addresses, ready ones first in each subset, spread as upstream does (each
    subset keeps its share)."""
    total = sum(len(s.get("addresses") or []) + len(s.get("notReadyAddresses") or []) for s in subsets)
    if total <= MAX_CAPACITY:
        return subsets, False
    out = []
    budget = MAX_CAPACITY
    for i, subset in enumerate(subsets):
        size = len(subset.get("addresses") or []) + len(subset.get("notReadyAddresses") or [])
        share = budget if i == len(subsets) - 1 else min(budget, size * MAX_CAPACITY // total)
        ready = (subset.get("addresses") or [])[:share]
        not_ready = (subset.get("notReadyAddresses") or [])[: share - len(ready)]
        budget -= len(ready) + len(not_ready)
        kept = {k: v for k, v in subset.items() if k not in ("addresses", "notReadyAddresses")}
        if ready:
            kept["addresses"] = ready
        if not_ready:
            kept["notReadyAddresses"] = not_ready
        if ready or not_ready:
            out.append(kept)
    return out, True


def endpoints_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{quote(namespace)}/endpoints"
    return f"{base}/{quote(name)}" if name else base


class EndpointsController(Controller):
    name = "endpoint"

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.services = ctx.informers.get("/api/v1/services", indexers={"namespace": by_namespace})
        self.pods = ctx.informers.get("/api/v1/pods", indexers={"namespace": by_namespace})
        self.endpoints = ctx.informers.get("/api/v1/endpoints")
        self.services.add_handler(**self.handlers())
        self.endpoints.add_handler(on_delete=self.enqueue)
        self.pods.add_handler(
            on_add=self._pod_changed, on_update=self._pod_updated, on_delete=self._pod_changed
        )

    def _services_selecting(self, pod: Obj) -> list[str]:
        labels = meta(pod).get("labels") or {}
        out = []
        for service in self.services.by_index("namespace", meta(pod).get("namespace", "")):
            info = ServiceInfo.of(service)
            if info.selector is not None and info.pod_selector().matches(labels):
                out.append(info.key)
        return out

    def _pod_changed(self, pod: Obj) -> None:
        for key in self._services_selecting(pod):
            self.queue.add(key)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if meta(old).get("resourceVersion") == meta(new).get("resourceVersion"):
            return
        for key in {*self._services_selecting(old), *self._services_selecting(new)}:
            self.queue.add(key)

    async def sync(self, key: str) -> None:
        namespace, name = split_key(key)
        service = self.services.get(key)
        if service is None:
            # The Service is gone: so are its Endpoints (upstream deletes them itself).
            if self.endpoints.get(key) is not None:
                try:
                    await self.client.delete(endpoints_path(namespace, name))
                except ApiError as err:
                    if not err.not_found:
                        raise
            return
        info = ServiceInfo.of(service)
        if info.selector is None or info.external_name:
            return
        subsets, truncated = truncate(
            desired_subsets(info, selected_pods(info, self.pods.by_index("namespace", namespace)))
        )
        current = self.endpoints.get(key)
        labels = info.object_labels()
        annotations = dict((meta(current).get("annotations") or {}) if current else {})
        annotations.pop(OVER_CAPACITY, None)
        if truncated:
            annotations[OVER_CAPACITY] = "truncated"
        if current is not None and _same(current, subsets, labels, annotations):
            return
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "subsets": subsets,
        }
        if annotations:
            body["metadata"]["annotations"] = annotations
        if current is None:
            try:
                await self.client.create(endpoints_path(namespace), body)
            except ApiError as err:
                if err.already_exists or (err.forbidden and "being terminated" in err.message):
                    return  # the next event of the existing object brings us back
                raise
            return
        body["metadata"]["resourceVersion"] = meta(current).get("resourceVersion")
        await self.client.replace(endpoints_path(namespace, name), body)


def _same(current: Obj, subsets: list[Obj], labels: dict[str, str], annotations: dict[str, str]) -> bool:
    return (
        (current.get("subsets") or []) == subsets
        and (meta(current).get("labels") or {}) == labels
        and (meta(current).get("annotations") or {}) == annotations
    )
