"""core/v1 PersistentVolume served as upstream serves it: defaults (Retain, Filesystem, phase Pending),
the pv-protection finalizer, ValidatePersistentVolume's 422s (capacity, access modes, one volume source,
hostPath and local rules), the immutable source, the status subresource and kubectl's columns."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controlplane.conftest import Kubectl


def pv(name: str, size: str = "1Gi", **spec: object) -> dict:
    body: dict = {
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": "/tmp/x"},
        },
    }
    body["spec"].update(spec)
    return body


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def refused(kubectl: Kubectl, manifest: dict) -> str:
    """kubectl's error for a PersistentVolume the server refuses (the client validates too much itself)."""
    proc = kubectl.run(
        "create",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "PersistentVolume", **manifest}),
        check=False,
    )
    assert proc.returncode == 1, proc.stdout
    return proc.stderr.strip()


@pytest.fixture
def cleanup(v1: client.CoreV1Api):
    names: list[str] = []
    yield names
    for name in names:
        try:
            v1.patch_persistent_volume(name, {"metadata": {"finalizers": None}})
            v1.delete_persistent_volume(name)
        except ApiException as err:
            assert err.status == 404


def test_defaults_and_finalizer(v1: client.CoreV1Api, cleanup: list[str]) -> None:
    name = unique("pv")
    cleanup.append(name)
    made = v1.create_persistent_volume({**pv(name), "status": {"phase": "Bound"}})
    assert made.spec.persistent_volume_reclaim_policy == "Retain"
    assert made.spec.volume_mode == "Filesystem"
    assert made.spec.host_path.type == ""
    assert made.status.phase == "Pending" and made.status.last_phase_transition_time is not None
    assert made.metadata.finalizers == ["kubernetes.io/pv-protection"]
    assert v1.read_persistent_volume(name).spec.capacity == {"storage": "1Gi"}


def test_validation(kubectl: Kubectl) -> None:
    bare = refused(kubectl, {"metadata": {"name": "a"}, "spec": {"hostPath": {"path": "/x"}}})
    assert "* spec.accessModes: Required value: must specify at least 1 access mode" in bare
    assert "* spec.capacity: Required value" in bare
    none = refused(kubectl, pv("b", hostPath=None))
    assert "spec: Required value: must specify a volume type" in none
    two = refused(kubectl, pv("c", local={"path": "/mnt"}))
    assert "spec.local: Forbidden: may not specify more than 1 volume type" in two
    local = refused(kubectl, pv("d", hostPath=None, local={"path": "/mnt"}))
    assert (
        local
        == 'The PersistentVolume "d" is invalid: spec.nodeAffinity: Required value: Local volume requires node affinity'
    )
    modes = refused(kubectl, pv("e", accessModes=["ReadWriteOncePod", "ReadOnlyMany"]))
    assert modes == (
        'The PersistentVolume "e" is invalid: spec.accessModes: Forbidden: may not use ReadWriteOncePod with '
        "other access modes"
    )
    zero = refused(kubectl, pv("f", size="0"))
    assert (
        zero
        == 'The PersistentVolume "f" is invalid: spec.capacity[storage]: Invalid value: "0": must be greater than zero'
    )
    back = refused(kubectl, pv("g", hostPath={"path": "/a/../b", "type": "Sometimes"}))
    assert "spec.hostPath.path: Invalid value: \"/a/../b\": must not contain '..'" in back
    assert 'spec.hostPath.type: Unsupported value: "Sometimes"' in back
    policy = refused(kubectl, pv("h", persistentVolumeReclaimPolicy="Keep"))
    assert policy == (
        'The PersistentVolume "h" is invalid: spec.persistentVolumeReclaimPolicy: Unsupported value: "Keep": '
        'supported values: "Delete", "Recycle", "Retain"'
    )
    affinity = refused(kubectl, pv("i", nodeAffinity={"required": {"nodeSelectorTerms": []}}))
    assert affinity == (
        'The PersistentVolume "i" is invalid: spec.nodeAffinity.required.nodeSelectorTerms: Required value: must '
        "have at least one node selector term"
    )


def test_source_immutable_status_and_columns(
    kubectl: Kubectl, v1: client.CoreV1Api, cleanup: list[str]
) -> None:
    name = unique("pv")
    cleanup.append(name)
    v1.create_persistent_volume(
        pv(name, "5Gi", storageClassName="fast", accessModes=["ReadWriteOnce", "ReadOnlyMany"])
    )
    with pytest.raises(ApiException) as err:
        v1.patch_persistent_volume(name, {"spec": {"hostPath": {"path": "/elsewhere"}}})
    assert err.value.status == 422
    assert (
        "spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable after creation"
        in (json.loads(err.value.body)["message"])
    )
    claimed = v1.patch_persistent_volume(
        name,
        {
            "spec": {
                "claimRef": {"namespace": "ns1", "name": "data"},
                "persistentVolumeReclaimPolicy": "Delete",
            }
        },
    )
    assert claimed.spec.claim_ref.name == "data"
    before = v1.read_persistent_volume_status(name).status.last_phase_transition_time
    bound = v1.patch_persistent_volume_status(name, {"status": {"phase": "Bound"}})
    assert bound.status.phase == "Bound" and bound.status.last_phase_transition_time >= before
    lines = kubectl("get", "pv", name).splitlines()
    assert lines[0].split() == [
        "NAME",
        "CAPACITY",
        "ACCESS",
        "MODES",
        "RECLAIM",
        "POLICY",
        "STATUS",
        "CLAIM",
        "STORAGECLASS",
        "VOLUMEATTRIBUTESCLASS",
        "REASON",
        "AGE",
    ]
    assert lines[1].split()[:8] == [name, "5Gi", "RWO,ROX", "Delete", "Bound", "ns1/data", "fast", "<unset>"]
    wide = kubectl("get", "pv", name, "-o", "wide").splitlines()
    assert wide[0].split()[-1] == "VOLUMEMODE" and wide[1].split()[-1] == "Filesystem"
    v1.delete_persistent_volume(name)
    assert "Terminating" in kubectl("get", "pv", name).splitlines()[1].split()
