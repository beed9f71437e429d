"""The EndpointSlice controller's decision, without I/O (upstream's staging/src/k8s.io/endpointslice
reconciler.go): from a Service, its pods and the slices it already has, which slices to create, update
and delete.

Per address family and per distinct port mapping (pods resolving named ports differently get
different slices), as upstream:
1. every existing slice keeps the endpoints still wanted (refreshed) and loses the others; an emptied
   slice is deleted, a changed one updated, an unchanged one left alone;
2. new endpoints first fill the slices being updated anyway, then one unchanged slice that can take
   them all, then new slices of at most `max_per_slice` endpoints;
3. a Service with no endpoints at all keeps one empty placeholder slice.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controlplane.controllers.endpointslice_pods import (
    CONTROLLER_NAME,
    MANAGED_BY_LABEL,
    SERVICE_NAME_LABEL,
    ServiceInfo,
    address_of_family,
    endpoint_ports,
    is_ready,
    should_be_in_endpoints,
    should_set_hostname,
    target_ref,
)
from kubeclient.informer import meta

Obj = dict[str, Any]
MAX_ENDPOINTS_PER_SLICE = 100
_ENDPOINT_FIELDS = ("addresses", "conditions", "hostname", "targetRef", "nodeName", "zone", "hints")
# zone_of(node name) -> (node exists, its zone label)
ZoneOf = Callable[[str], tuple[bool, str | None]]
ZONE_LABEL = "topology.kubernetes.io/zone"


@dataclass
class Plan:
    create: list[Obj] = field(default_factory=list)
    update: list[Obj] = field(default_factory=list)
    delete: list[Obj] = field(default_factory=list)
    # Pods left out for now (their node is not known yet): the sync is retried.
    skipped: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


def _norm_port(port: Obj) -> tuple[Any, ...]:
    return (port.get("name") or "", port.get("port"), port.get("protocol") or "TCP", port.get("appProtocol"))


def port_key(ports: list[Obj]) -> tuple[tuple[Any, ...], ...]:
    return tuple(sorted(_norm_port(p) for p in ports))


def _norm_endpoint(ep: Obj) -> Obj:
    out: Obj = {}
    for k in _ENDPOINT_FIELDS:
        v = ep.get(k)
        if v in (None, {}, []):
            continue
        if k == "targetRef":
            v = {f: v.get(f, "") for f in ("kind", "namespace", "name", "uid")}
        if k == "conditions":
            v = {c: bool(v.get(c)) for c in ("ready", "serving", "terminating") if v.get(c) is not None}
        out[k] = v
    return out


def _endpoint_key(ep: Obj) -> tuple[str, ...]:
    return tuple(sorted(ep.get("addresses") or []))


def build_endpoint(service: ServiceInfo, pod: Obj, address: str, zone: str | None) -> Obj:
    """One pod's endpoint (podToEndpoint): ready unless terminating (publishNotReadyAddresses: always),
    serving as the pod's readiness, terminating as its deletionTimestamp."""
    serving = is_ready(pod)
    terminating = bool(meta(pod).get("deletionTimestamp"))
    ready = service.publish_not_ready or serving
    if terminating and not service.publish_not_ready:
        ready = False
    ep: Obj = {
        "addresses": [address],
        "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
        "targetRef": target_ref(pod),
    }
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        ep["nodeName"] = node
    if zone:
        ep["zone"] = zone
    if should_set_hostname(pod, service):
        ep["hostname"] = pod["spec"]["hostname"]
    return ep


def desired_endpoints(
    service: ServiceInfo, pods: list[Obj], family: str, zone_of: ZoneOf, skipped: list[str]
) -> dict[tuple[Any, ...], tuple[list[Obj], dict[tuple[str, ...], Obj]]]:
    """Port mapping -> (its ports, endpoints by address) for the selected pods."""
    out: dict[tuple[Any, ...], tuple[list[Obj], dict[tuple[str, ...], Obj]]] = {}
    for pod in pods:
        if not should_be_in_endpoints(pod, include_terminating=True):
            continue
        address = address_of_family(pod, family)
        if address is None:
            continue
        zone = None
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            exists, zone = zone_of(node)
            if not exists and not service.publish_not_ready:
                skipped.append(
                    f"skipping Pod {meta(pod).get('name')} for Service {service.key}: Node {node} Not Found"
                )
                continue
        ports = endpoint_ports(service, pod)
        key = port_key(ports)
        entry = out.setdefault(key, (ports, {}))
        ep = build_endpoint(service, pod, address, zone)
        entry[1].setdefault(_endpoint_key(ep), ep)
    return out


def slice_labels(service: ServiceInfo) -> dict[str, str]:
    return {**service.object_labels(), SERVICE_NAME_LABEL: service.name, MANAGED_BY_LABEL: CONTROLLER_NAME}


def owner_reference(service: ServiceInfo) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "name": service.name,
        "uid": service.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def new_slice(service: ServiceInfo, family: str, ports: list[Obj], endpoints: list[Obj]) -> Obj:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "generateName": f"{service.name}-",
            "namespace": service.namespace,
            "labels": slice_labels(service),
            "ownerReferences": [owner_reference(service)],
        },
        "addressType": family,
        "ports": copy.deepcopy(ports),
        "endpoints": endpoints,
    }


def _metadata_drift(service: ServiceInfo, slice_: Obj) -> bool:
    m = meta(slice_)
    return (m.get("labels") or {}) != slice_labels(service) or not any(
        r.get("uid") == service.uid and r.get("controller") for r in m.get("ownerReferences") or []
    )


def _with_metadata(service: ServiceInfo, slice_: Obj) -> Obj:
    out = copy.deepcopy(slice_)
    m = out.setdefault("metadata", {})
    m["labels"] = slice_labels(service)
    refs = [r for r in m.get("ownerReferences") or [] if r.get("uid") != service.uid]
    m["ownerReferences"] = [*refs, owner_reference(service)]
    return out


def _reconcile_family(
    service: ServiceInfo,
    family: str,
    existing: list[Obj],
    desired: dict[tuple[Any, ...], tuple[list[Obj], dict[tuple[str, ...], Obj]]],
    max_per_slice: int,
    plan: Plan,
) -> int:
    """Fill `plan` for one address family; returns how many slices remain for it."""
    remaining = 0
    by_ports: dict[tuple[Any, ...], list[Obj]] = {}
    for slice_ in existing:
        by_ports.setdefault(port_key(slice_.get("ports") or []), []).append(slice_)
    for key, slices in by_ports.items():
        if key not in desired:
            plan.delete.extend(slices)
    for key, (ports, wanted) in desired.items():
        to_update: list[Obj] = []
        unchanged: list[Obj] = []
        for slice_ in by_ports.get(key, []):
            kept: list[Obj] = []
            changed = _metadata_drift(service, slice_)
            for ep in slice_.get("endpoints") or []:
                fresh = wanted.pop(_endpoint_key(ep), None)
                if fresh is None:
                    changed = True
                    continue
                if _norm_endpoint(fresh) != _norm_endpoint(ep):
                    changed = True
                kept.append(fresh)
            if not kept:
                plan.delete.append(slice_)
            elif changed:
                updated = _with_metadata(service, slice_)
                updated["endpoints"] = kept
                to_update.append(updated)
            else:
                unchanged.append(slice_)
        left = list(wanted.values())
        for updated in sorted(to_update, key=lambda s: -len(s["endpoints"])):
            room = max_per_slice - len(updated["endpoints"])
            if room > 0 and left:
                updated["endpoints"].extend(left[:room])
                left = left[room:]
        if left:
            fits = [s for s in unchanged if max_per_slice - len(s.get("endpoints") or []) >= len(left)]
            if fits:
                chosen = max(fits, key=lambda s: len(s.get("endpoints") or []))
                unchanged.remove(chosen)
                updated = _with_metadata(service, chosen)
                updated["endpoints"] = [*(chosen.get("endpoints") or []), *left]
                to_update.append(updated)
                left = []
        for start in range(0, len(left), max_per_slice):
            plan.create.append(new_slice(service, family, ports, left[start : start + max_per_slice]))
        plan.update.extend(to_update)
        remaining += len(to_update) + len(unchanged) + (len(left) + max_per_slice - 1) // max_per_slice
    return remaining


def reconcile(
    service: ServiceInfo,
    pods: list[Obj],
    existing: list[Obj],
    zone_of: ZoneOf,
    max_per_slice: int = MAX_ENDPOINTS_PER_SLICE,
) -> Plan:
    """What to write so the Service's managed slices list exactly its pods' endpoints."""
    plan = Plan()
    remaining = 0
    families = set(service.families)
    plan.delete.extend(s for s in existing if s.get("addressType") not in families)
    for family in service.families:
        desired = desired_endpoints(service, pods, family, zone_of, plan.skipped)
        mine = [s for s in existing if s.get("addressType") == family]
        remaining += _reconcile_family(service, family, mine, desired, max_per_slice, plan)
    if remaining == 0:
        _placeholder(service, plan)
    _creates_as_updates(service, plan)
    return plan


def _creates_as_updates(service: ServiceInfo, plan: Plan) -> None:
    """A slice to create takes the name of one to delete (same address type, owned by this Service), so
    clients see one slice change instead of a new slice and a vanishing one (upstream's finalize)."""
    kept = []
    for old in plan.delete:
        same = next(
            (
                s
                for s in reversed(plan.create)
                if s.get("addressType") == old.get("addressType") and _owned_by(service, old)
            ),
            None,
        )
        if same is None:
            kept.append(old)
            continue
        plan.create.remove(same)
        m = same["metadata"]
        m.pop("generateName", None)
        m["name"] = meta(old)["name"]
        m["resourceVersion"] = meta(old).get("resourceVersion")
        plan.update.append(same)
    plan.delete = kept


def _owned_by(service: ServiceInfo, slice_: Obj) -> bool:
    return any(r.get("uid") == service.uid for r in meta(slice_).get("ownerReferences") or [])


def _placeholder(service: ServiceInfo, plan: Plan) -> None:
    """No endpoints anywhere: keep (or make) one empty slice, as upstream does."""
    family = service.families[0]
    for slice_ in plan.delete:
        if slice_.get("addressType") == family and not slice_.get("endpoints") and not slice_.get("ports"):
            plan.delete.remove(slice_)
            if _metadata_drift(service, slice_):
                plan.update.append(_with_metadata(service, slice_))
            return
    plan.create.append(new_slice(service, family, [], []))
