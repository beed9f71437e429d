"""What the capacity tracker (csicapacity.py) decides without I/O: the driver's topology segments from
the CSINodes and the nodes' labels (upstream's pkg/capacity/topology), the item (class, segment) a
CSIStorageCapacity stands for, the segments of a provisioned PV's node affinity, which classes are
tracked, the object external-provisioner writes and whether one needs an update."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubeclient import volumes as vol
from kubeclient.csi.client import Capacity
from kubeclient.csi.resize import binary
from kubeclient.informer import meta

Obj = dict[str, Any]
Segment = tuple[tuple[str, str], ...]  # sorted (key, value) pairs

DRIVER_LABEL = "csi.storage.k8s.io/drivername"
MANAGED_BY_LABEL = "csi.storage.k8s.io/managed-by"
MANAGED_BY = "external-provisioner"
ITEM = "item:"  # the work-queue key of an item starts so


def encode(segment: Segment) -> str:
    return json.dumps([list(pair) for pair in segment])


def decode(text: str) -> Segment:
    return tuple((str(k), str(v)) for k, v in json.loads(text))


@dataclass(frozen=True)
class Item:
    """One CSIStorageCapacity to keep: a class in a segment."""

    class_name: str
    segment: Segment

    @property
    def key(self) -> str:
        return f"{ITEM}{self.class_name}:{encode(self.segment)}"

    @classmethod
    def parse(cls, rest: str) -> Item:
        name, _, segment = rest.partition(":")
        return cls(name, decode(segment))

    def __str__(self) -> str:
        return f"{self.class_name}@{dict(self.segment)}"


def driver_topology_keys(csinode: Obj, driver: str) -> list[str] | None:
    """The driver's topology keys on a CSINode; None when the driver is not on that node."""
    for entry in (csinode.get("spec") or {}).get("drivers") or []:
        if entry.get("name") == driver:
            return list(entry.get("topologyKeys") or [])
    return None


def segments_of(driver: str, csinodes: Iterable[Obj], node: Callable[[str], Obj | None]) -> list[Segment]:
    """The driver's topology segments (upstream's nodeTopology.sync): for each CSINode listing the driver
    whose Node exists and carries every one of its topology keys, those labels; each segment once."""
    found: list[Segment] = []
    for csinode in csinodes:
        keys = driver_topology_keys(csinode, driver)
        current = node(meta(csinode).get("name", ""))
        if keys is None or current is None:
            continue
        labels = meta(current).get("labels") or {}
        if any(k not in labels for k in keys):
            continue  # the kubelet has not labelled the node yet
        segment = tuple(sorted((k, labels[k]) for k in set(keys)))
        if segment not in found:
            found.append(segment)
    return sorted(found)


def segment_of(capacity: Obj) -> Segment | None:
    """The segment a CSIStorageCapacity's nodeTopology names; None when it is not a plain label match."""
    topology = capacity.get("nodeTopology")
    if not isinstance(topology, dict) or topology.get("matchExpressions"):
        return None
    return tuple(sorted((topology.get("matchLabels") or {}).items()))


def item_of(capacity: Obj) -> Item | None:
    segment = segment_of(capacity)
    name = capacity.get("storageClassName")
    return Item(name, segment) if segment is not None and name else None


def affinity_segments(volume: Obj) -> list[Segment]:
    """The segments of a PV's required node affinity as the provisioner writes it (upstream's
    termToSegment: each term's expressions `In` with one value; other terms are skipped)."""
    affinity = ((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}
    out: list[Segment] = []
    for term in affinity.get("nodeSelectorTerms") or []:
        exprs = term.get("matchExpressions") or []
        plain = all(e.get("operator") == "In" and len(e.get("values") or []) == 1 for e in exprs)
        if exprs and plain and not term.get("matchFields"):
            out.append(tuple(sorted((e["key"], e["values"][0]) for e in exprs)))
    return out


def tracked_class(sc: Obj, driver: str, immediate: bool) -> bool:
    """A class of the driver; Immediate classes only with capacity_immediate_binding (the scheduler
    reads capacity for WaitForFirstConsumer claims only)."""
    return sc.get("provisioner") == driver and (immediate or sc.get("volumeBindingMode") != "Immediate")


def capacity_fields(got: Capacity) -> Obj:
    fields: Obj = {"capacity": binary(got.available)}
    if got.maximum_volume_size is not None:
        fields["maximumVolumeSize"] = binary(got.maximum_volume_size)
    return fields


def capacity_object(item: Item, driver: str, namespace: str, got: Capacity) -> Obj:
    """A new CSIStorageCapacity, as external-provisioner writes it."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {
            "generateName": "csisc-",
            "namespace": namespace,
            "labels": {DRIVER_LABEL: driver, MANAGED_BY_LABEL: MANAGED_BY},
        },
        "storageClassName": item.class_name,
        "nodeTopology": {"matchLabels": dict(item.segment)} if item.segment else {},
        **capacity_fields(got),
    }


def up_to_date(capacity: Obj, got: Capacity) -> bool:
    """The object already says what the driver said (values compared, not their spelling)."""
    maximum = capacity.get("maximumVolumeSize")
    return vol.storage_bytes(capacity.get("capacity")) == got.available and (
        (maximum is None and got.maximum_volume_size is None)
        or (maximum is not None and vol.storage_bytes(maximum) == got.maximum_volume_size)
    )
