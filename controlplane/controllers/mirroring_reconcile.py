"""The EndpointSlice mirroring controller's decision, without I/O (upstream's
pkg/controller/endpointslicemirroring reconciler): from a hand-written Endpoints object and the slices
already mirrored from it, which slices to create, update and delete.

As upstream: one slice per address type and distinct port set (each subset maps to one slice), at most
`max_per_subset` (1000) addresses mirrored per subset; `addresses` are ready, `notReadyAddresses` not;
addresses that are not IPs are skipped; a slice keeps its name while its port set lives (the first
slice of a port set is rewritten, the others deleted) and a slice to create takes the name of one of
the same address type to delete. The slices carry the Endpoints' labels and annotations (but its
trigger time and kubectl's last-applied configuration), kubernetes.io/service-name, the mirroring
controller's managed-by label, and the Endpoints as their controller owner.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from controlplane.controllers.endpointslice_pods import MANAGED_BY_LABEL, SERVICE_NAME_LABEL
from controlplane.controllers.endpointslice_reconcile import port_key
from kubeclient.informer import meta

Obj = dict[str, Any]
CONTROLLER_NAME = "endpointslicemirroring-controller.k8s.io"
MAX_ENDPOINTS_PER_SUBSET = 1000  # --mirroring-max-endpoints-per-subset
SKIP_MIRROR_LABEL = "endpointslice.kubernetes.io/skip-mirror"
LEADER_ANNOTATION = "control-plane.alpha.kubernetes.io/leader"
_NOT_COPIED = (
    "endpoints.kubernetes.io/last-change-trigger-time",
    "kubectl.kubernetes.io/last-applied-configuration",
)

Key = tuple[str, tuple[tuple[Any, ...], ...]]  # (address type, port set)


@dataclass
class MirrorPlan:
    create: list[Obj] = field(default_factory=list)
    update: list[Obj] = field(default_factory=list)
    delete: list[Obj] = field(default_factory=list)
    invalid: int = 0  # addresses that are not IPs
    skipped: int = 0  # addresses left out: invalid, or beyond max_per_subset

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


def should_mirror(endpoints: Obj | None) -> bool:
    """Not with the skip-mirror label, not a leader-election record (upstream's shouldMirror)."""
    if endpoints is None:
        return False
    m = meta(endpoints)
    return (m.get("labels") or {}).get(SKIP_MIRROR_LABEL) != "true" and LEADER_ANNOTATION not in (
        m.get("annotations") or {}
    )


def _ports(ports: list[Obj]) -> list[Obj]:
    out = []
    for p in ports:
        port: Obj = {
            "name": p.get("name") or "",
            "port": p.get("port"),
            "protocol": p.get("protocol") or "TCP",
        }
        if p.get("appProtocol") is not None:
            port["appProtocol"] = p["appProtocol"]
        out.append(port)
    return out


def _endpoint(address: Obj, ready: bool) -> tuple[str, Obj] | None:
    """(address type, endpoint), or None when the address is not an IP."""
    try:
        ip = ipaddress.ip_address(str(address.get("ip", "")).strip())
    except ValueError:
        return None
    ep: Obj = {"addresses": [str(ip)], "conditions": {"ready": ready}}
    if address.get("hostname"):
        ep["hostname"] = address["hostname"]
    if address.get("targetRef"):
        ep["targetRef"] = address["targetRef"]
    if address.get("nodeName"):
        ep["nodeName"] = address["nodeName"]
    return ("IPv6" if ip.version == 6 else "IPv4"), ep


def _desired(
    endpoints: Obj, max_per_subset: int, plan: MirrorPlan
) -> dict[Key, tuple[list[Obj], dict[str, Obj]]]:
    desired: dict[Key, tuple[list[Obj], dict[str, Obj]]] = {}
    for subset in endpoints.get("subsets") or []:
        ports = _ports(subset.get("ports") or [])
        for family in ("IPv4", "IPv6"):
            desired.setdefault((family, port_key(ports)), (ports, {}))
        addresses = [(a, True) for a in subset.get("addresses") or []]
        addresses += [(a, False) for a in subset.get("notReadyAddresses") or []]
        added = 0
        for address, ready in addresses:
            if added >= max_per_subset:
                break
            made = _endpoint(address, ready)
            if made is None:
                plan.invalid += 1
                continue
            family, ep = made
            desired[(family, port_key(ports))][1][ep["addresses"][0]] = ep
            added += 1
        plan.skipped += len(addresses) - added
    return desired


def _copied(values: dict[str, str] | None, *dropped: str) -> dict[str, str]:
    return {k: v for k, v in (values or {}).items() if k not in dropped}


def new_slice(endpoints: Obj, family: str, ports: list[Obj], eps: list[Obj], name: str = "") -> Obj:
    m = meta(endpoints)
    labels = {**(m.get("labels") or {}), SERVICE_NAME_LABEL: m["name"], MANAGED_BY_LABEL: CONTROLLER_NAME}
    metadata: Obj = {
        "namespace": m.get("namespace"),
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "name": m["name"],
                "uid": m.get("uid"),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    annotations = _copied(m.get("annotations"), *_NOT_COPIED)
    if annotations:
        metadata["annotations"] = annotations
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = f"{m['name']}-"
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": metadata,
        "addressType": family,
        "ports": ports,
        "endpoints": eps,
    }


def _in_sync(endpoints: Obj, slice_: Obj, wanted: dict[str, Obj]) -> bool:
    """The slice already lists exactly the wanted endpoints and carries the Endpoints' labels and
    annotations (upstream's totalChanges plus its label and annotation comparison)."""
    have = {(ep.get("addresses") or [""])[0]: ep for ep in slice_.get("endpoints") or []}
    if have != wanted:
        return False
    m, s = meta(endpoints), meta(slice_)
    return _copied(s.get("labels"), MANAGED_BY_LABEL, SERVICE_NAME_LABEL) == (
        m.get("labels") or {}
    ) and _copied(s.get("annotations"), *_NOT_COPIED) == (m.get("annotations") or {})


def reconcile(
    endpoints: Obj, existing: list[Obj], max_per_subset: int = MAX_ENDPOINTS_PER_SUBSET
) -> MirrorPlan:
    """What to write so the mirrored slices list exactly the Endpoints' addresses."""
    plan = MirrorPlan()
    desired = _desired(endpoints, max_per_subset, plan)
    by_key: dict[Key, list[Obj]] = {}
    for slice_ in existing:
        by_key.setdefault((slice_.get("addressType", ""), port_key(slice_.get("ports") or [])), []).append(
            slice_
        )
    for key, slices in by_key.items():
        if key not in desired or not desired[key][1]:
            plan.delete.extend(slices)
    for (family, pkey), (ports, wanted) in desired.items():
        if not wanted:
            continue
        slices = by_key.get((family, pkey), [])
        plan.delete.extend(slices[1:])
        if slices and _in_sync(endpoints, slices[0], wanted):
            continue
        eps = list(wanted.values())[:max_per_subset]
        if slices:
            made = new_slice(endpoints, family, ports, eps, meta(slices[0])["name"])
            made["metadata"]["resourceVersion"] = meta(slices[0]).get("resourceVersion")
            plan.update.append(made)
        else:
            plan.create.append(new_slice(endpoints, family, ports, eps))
    _recycle(plan)
    return plan


def _recycle(plan: MirrorPlan) -> None:
    """Creates take the names of deletions of their address type (upstream's recycleSlices)."""
    for made in list(plan.create):
        old = next((s for s in plan.delete if s.get("addressType") == made["addressType"]), None)
        if old is None:
            continue
        plan.create.remove(made)
        plan.delete.remove(old)
        made["metadata"].pop("generateName", None)
        made["metadata"]["name"] = meta(old)["name"]
        made["metadata"]["resourceVersion"] = meta(old).get("resourceVersion")
        plan.update.append(made)
