"""The persistent-volume loops' pure parts: FindMatchingVolume (pre-bound first, the smallest Available
volume of the claim's class that fits its size, access modes, volume mode and selector; WaitForFirstConsumer
leaving the rest to the scheduler; node affinity on the scheduler's path), the claim update rule, the
local-path provisioner's volume and helper pod, and the pvc-protection "in use" rule."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver.kinds.persistentvolumeclaim import IMMUTABLE_SPEC, validate_claim_update
from controlplane.controllers.volume.localpath import delete_helper, volume_for, volume_node
from controlplane.controllers.volume.protection import uses_claim
from kubeclient import volumes as vol

Obj = dict[str, Any]


def claim(
    size: str = "3Gi", cls: str = "gold", modes: tuple[str, ...] = ("ReadWriteOnce",), **spec: Any
) -> Obj:
    return {
        "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
        "spec": {
            "accessModes": list(modes),
            "resources": {"requests": {"storage": size}},
            "storageClassName": cls,
            **spec,
        },
    }


def pv(
    name: str,
    size: str,
    cls: str = "gold",
    phase: str = "Available",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    labels: dict | None = None,
    **spec: Any,
) -> Obj:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"capacity": {"storage": size}, "accessModes": list(modes), "storageClassName": cls, **spec},
        "status": {"phase": phase},
    }


def name_of(found: Obj | None) -> str | None:
    return found["metadata"]["name"] if found else None


def test_smallest_that_fits() -> None:
    volumes = [
        pv("10g", "10Gi"),
        pv("1g", "1Gi"),
        pv("5g", "5Gi"),
        pv("4g", "4Gi"),
        pv("3g-bound", "3Gi", phase="Bound"),
    ]
    assert name_of(vol.find_matching_volume(claim(), volumes)) == "4g"
    assert name_of(vol.find_matching_volume(claim("20Gi"), volumes)) is None


def test_class_access_modes_volume_mode_and_selector() -> None:
    assert vol.find_matching_volume(claim(), [pv("silver", "5Gi", cls="silver")]) is None
    assert vol.find_matching_volume(claim(modes=("ReadWriteMany",)), [pv("rwo", "5Gi")]) is None
    both = pv("both", "5Gi", modes=("ReadWriteOnce", "ReadWriteMany"))
    assert name_of(vol.find_matching_volume(claim(modes=("ReadWriteMany",)), [both])) == "both"
    assert vol.find_matching_volume(claim(volumeMode="Block"), [pv("fs", "5Gi")]) is None
    picky = claim(selector={"matchLabels": {"tier": "fast"}})
    assert vol.find_matching_volume(picky, [pv("plain", "5Gi")]) is None
    assert name_of(vol.find_matching_volume(picky, [pv("fast", "9Gi", labels={"tier": "fast"})])) == "fast"
    deleting = pv("going", "5Gi")
    deleting["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    assert vol.find_matching_volume(claim(), [deleting]) is None


def test_pre_bound_wins_and_delay_binding() -> None:
    mine = pv("mine", "50Gi", phase="Pending", claimRef={"namespace": "ns", "name": "c", "uid": "u1"})
    other = pv("other", "5Gi", claimRef={"namespace": "ns", "name": "c", "uid": "old"})
    assert name_of(vol.find_matching_volume(claim(), [pv("fits", "4Gi"), mine, other])) == "mine"
    assert vol.find_matching_volume(claim(), [pv("fits", "4Gi")], delay_binding=True) is None
    assert name_of(vol.find_matching_volume(claim(), [mine], delay_binding=True)) == "mine"


def test_node_affinity_on_the_scheduler_path() -> None:
    pinned = pv(
        "pinned",
        "5Gi",
        nodeAffinity={
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]}
                        ]
                    }
                ]
            }
        },
    )
    assert (
        name_of(vol.find_matching_volume(claim(), [pinned], ("a", {"kubernetes.io/hostname": "a"}), True))
        == "pinned"
    )
    assert vol.find_matching_volume(claim(), [pinned], ("b", {"kubernetes.io/hostname": "b"}), True) is None
    by_field = {
        "required": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}
            ]
        }
    }
    assert vol.node_affinity_fits({"spec": {"nodeAffinity": by_field}}, "b", {})
    assert not vol.node_affinity_fits({"spec": {"nodeAffinity": by_field}}, "a", {})


def test_claim_update_rule() -> None:
    old = {
        "metadata": {},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    # a class may be set once on a claim that had none
    assert validate_claim_update({**old, "spec": {**old["spec"], "storageClassName": "late"}}, old) == []
    grown = {"metadata": {}, "spec": {**old["spec"], "resources": {"requests": {"storage": "2Gi"}}}}
    assert IMMUTABLE_SPEC in validate_claim_update(grown, old)[0].detail  # unbound: no resize
    assert validate_claim_update({**grown, "status": {"phase": "Bound"}}, old) == []


def test_local_path_volume_and_helper() -> None:
    c = claim("2Gi", "local-path")
    sc = {"metadata": {"name": "local-path"}, "reclaimPolicy": "Delete"}
    node = {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "host-1"}}}
    made = volume_for(c, sc, node, "/srv/lp/")
    assert made["metadata"]["name"] == "pvc-u1"
    assert made["spec"]["hostPath"] == {"path": "/srv/lp/pvc-u1_ns_c", "type": "DirectoryOrCreate"}
    assert made["spec"]["capacity"] == {"storage": "2Gi"} and made["spec"]["claimRef"]["uid"] == "u1"
    assert volume_node(made) == "host-1"
    helper = delete_helper(made, "n1", "busybox:latest", "/srv/lp")
    assert helper["metadata"] == {"name": "helper-pod-delete-pvc-u1", "namespace": "kube-system"}
    assert helper["spec"]["nodeName"] == "n1"
    assert helper["spec"]["containers"][0]["env"] == [{"name": "VOL_DIR", "value": "/srv/lp/pvc-u1_ns_c"}]
    assert helper["spec"]["volumes"][0]["hostPath"]["path"] == "/srv/lp"


def test_uses_claim_only_when_scheduled() -> None:
    spec = {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
    assert uses_claim({"spec": {**spec, "nodeName": "n1"}}, "data")
    assert not uses_claim({"spec": spec}, "data")
    assert not uses_claim({"spec": {**spec, "nodeName": "n1"}}, "other")
