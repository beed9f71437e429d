"""The capacity tracker's pure parts (controlplane/controllers/volume/capacityitems.py): the driver's
topology segments from CSINodes and node labels, the item a CSIStorageCapacity stands for, the segments
of a provisioned PV's node affinity, which classes are tracked, the object external-provisioner writes
and when it needs an update; and the host-path driver's `--capacity` values."""

from __future__ import annotations

import pytest

from controlplane.controllers.volume.capacityitems import (
    Item,
    affinity_segments,
    capacity_object,
    item_of,
    segments_of,
    tracked_class,
    up_to_date,
)
from kubeclient.csi.client import Capacity
from pykubelet.csidriver.capacity import parse_capacity

DRIVER, ZONE, HOST = "d.example.com", "topology.example.com/zone", "topology.example.com/host"


def csinode(name: str, *drivers: tuple[str, list[str] | None]) -> dict:
    entries = [
        {"name": d, "nodeID": name, **({"topologyKeys": keys} if keys is not None else {})}
        for d, keys in drivers
    ]
    return {"metadata": {"name": name}, "spec": {"drivers": entries}}


def node(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


def test_segments_from_csinodes_and_node_labels() -> None:
    nodes = {
        "a": node("a", **{ZONE: "z1", HOST: "a"}),
        "b": node("b", **{ZONE: "z1", HOST: "b"}),
        "c": node("c", **{ZONE: "z2"}),  # lacks the host key: left out until labelled
        "e": node("e", **{ZONE: "z9"}),  # its CSINode does not list the driver
    }
    csinodes = [
        csinode("a", (DRIVER, [ZONE])),
        csinode("b", (DRIVER, [ZONE]), ("other", [HOST])),  # same zone: one segment
        csinode("c", (DRIVER, [HOST, ZONE])),
        csinode("e", ("other", [ZONE])),
        csinode("gone", (DRIVER, [ZONE])),  # no Node: an obsolete CSINode
    ]
    assert segments_of(DRIVER, csinodes, nodes.get) == [((ZONE, "z1"),)]
    nodes["c"]["metadata"]["labels"][HOST] = "c"
    assert segments_of(DRIVER, csinodes, nodes.get) == [((HOST, "c"), (ZONE, "z2")), ((ZONE, "z1"),)]


def test_a_driver_without_topology_keys_has_one_empty_segment() -> None:
    nodes = {"a": node("a"), "b": node("b")}
    csinodes = [csinode("a", (DRIVER, None)), csinode("b", (DRIVER, []))]
    assert segments_of(DRIVER, csinodes, nodes.get) == [()]


def test_item_keys_round_trip_and_objects_name_their_item() -> None:
    item = Item("fast", ((HOST, "a"), (ZONE, "z1")))
    assert Item.parse(item.key.removeprefix("item:")) == item
    made = capacity_object(item, DRIVER, "kube-system", Capacity(5 << 30, 1 << 30, 0))
    assert made == {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {
            "generateName": "csisc-",
            "namespace": "kube-system",
            "labels": {
                "csi.storage.k8s.io/drivername": DRIVER,
                "csi.storage.k8s.io/managed-by": "external-provisioner",
            },
        },
        "storageClassName": "fast",
        "nodeTopology": {"matchLabels": {HOST: "a", ZONE: "z1"}},
        "capacity": "5Gi",
        "maximumVolumeSize": "1Gi",
    }
    assert item_of(made) == item
    everywhere = capacity_object(Item("fast", ()), DRIVER, "ns", Capacity(1000))
    assert everywhere["nodeTopology"] == {} and "maximumVolumeSize" not in everywhere
    assert item_of(everywhere) == Item("fast", ())
    expressions = {**made, "nodeTopology": {"matchExpressions": [{"key": ZONE, "operator": "Exists"}]}}
    assert item_of(expressions) is None and item_of({**made, "nodeTopology": None}) is None


def test_up_to_date_compares_values_not_spelling() -> None:
    obj = {"capacity": "1Gi", "maximumVolumeSize": "1073741824"}
    assert up_to_date(obj, Capacity(1 << 30, 1 << 30))
    assert not up_to_date(obj, Capacity(1 << 30, None))
    assert not up_to_date(obj, Capacity(1 << 29, 1 << 30))
    assert up_to_date({"capacity": "0"}, Capacity(0, None))
    assert not up_to_date({"capacity": "0"}, Capacity(0, 0))


def test_affinity_segments_as_the_provisioner_writes_them() -> None:
    def pv(*terms: dict) -> dict:
        return {"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": list(terms)}}}}

    one = {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z1"]}]}
    two = {
        "matchExpressions": [
            {"key": ZONE, "operator": "In", "values": ["z2"]},
            {"key": HOST, "operator": "In", "values": ["b"]},
        ]
    }
    many = {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z1", "z2"]}]}
    notin = {"matchExpressions": [{"key": ZONE, "operator": "NotIn", "values": ["z1"]}]}
    fields = {**one, "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}
    assert affinity_segments(pv(one, two, many, notin, fields)) == [
        ((ZONE, "z1"),),
        ((HOST, "b"), (ZONE, "z2")),
    ]
    assert affinity_segments({"spec": {}}) == []


def test_tracked_classes() -> None:
    def sc(provisioner: str, mode: str | None) -> dict:
        return {"provisioner": provisioner, **({"volumeBindingMode": mode} if mode else {})}

    assert tracked_class(sc(DRIVER, "WaitForFirstConsumer"), DRIVER, False)
    assert tracked_class(sc(DRIVER, None), DRIVER, False)  # upstream: only an explicit Immediate is skipped
    assert not tracked_class(sc(DRIVER, "Immediate"), DRIVER, False)
    assert tracked_class(sc(DRIVER, "Immediate"), DRIVER, True)
    assert not tracked_class(sc("other", "WaitForFirstConsumer"), DRIVER, True)


def test_driver_capacity_flag() -> None:
    assert parse_capacity(["10Gi", "fast=1Gi", "slow=500M"]) == {
        "": 10 << 30,
        "fast": 1 << 30,
        "slow": 500_000_000,
    }
    assert parse_capacity([]) == {}
    with pytest.raises(ValueError, match="fast=lots"):
        parse_capacity(["fast=lots"])
    with pytest.raises(ValueError, match="negative"):
        parse_capacity(["-1Gi"])
