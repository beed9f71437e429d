"""core/v1 PersistentVolumeClaim served as upstream serves it: defaults, the pvc-protection finalizer,
DefaultStorageClass admission, ValidatePersistentVolumeClaim's 422s, the update rules (spec immutable
but for volumeName once, a class on a claim without one, and a bound claim's request, never below its capacity),
PersistentVolumeClaimResize, the status subresource and kubectl's columns."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controlplane.conftest import Kubectl, message

DEFAULT = "storageclass.kubernetes.io/is-default-class"
IMMUTABLE = (
    "spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName "
    "for bound claims"
)


def pvc(name: str, size: str = "1Gi", **spec: object) -> dict:
    body: dict = {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    }
    body["spec"].update(spec)
    return body


@pytest.fixture(scope="module")
def storage(api: client.ApiClient) -> client.StorageV1Api:
    return client.StorageV1Api(api)


@pytest.fixture
def classes(storage: client.StorageV1Api) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        storage.delete_storage_class(name)


def test_defaults_finalizer_and_local_path_default(v1: client.CoreV1Api, namespace: str) -> None:
    made = v1.create_namespaced_persistent_volume_claim(namespace, pvc("data", "500Mi"))
    assert made.spec.storage_class_name == "local-path"  # the server's default class, as k3s's
    assert made.status.phase == "Pending"
    assert made.spec.volume_mode == "Filesystem"
    assert made.metadata.finalizers == ["kubernetes.io/pvc-protection"]
    assert made.spec.resources.requests == {"storage": "500Mi"}


def test_default_storage_class(
    v1: client.CoreV1Api, storage: client.StorageV1Api, classes: list[str], namespace: str
) -> None:
    name = f"dflt-{uuid.uuid4().hex[:6]}"
    storage.create_storage_class(
        {"metadata": {"name": name, "annotations": {DEFAULT: "true"}}, "provisioner": "example.com/p"}
    )
    classes.append(name)
    got = v1.create_namespaced_persistent_volume_claim(namespace, pvc("auto"))
    assert got.spec.storage_class_name == name
    explicit = v1.create_namespaced_persistent_volume_claim(namespace, pvc("none", storageClassName=""))
    assert explicit.spec.storage_class_name == ""
    other = v1.create_namespaced_persistent_volume_claim(namespace, pvc("other", storageClassName="slow"))
    assert other.spec.storage_class_name == "slow"


def test_validation(v1: client.CoreV1Api, namespace: str) -> None:
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_persistent_volume_claim(namespace, pvc("a", accessModes=[]))
    assert message(err) == (
        'PersistentVolumeClaim "a" is invalid: spec.accessModes: Required value: at least 1 access mode is required'
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_persistent_volume_claim(namespace, pvc("b", "0"))
    assert message(err) == (
        'PersistentVolumeClaim "b" is invalid: spec.resources[storage]: Invalid value: "0": must be greater than zero'
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_persistent_volume_claim(namespace, pvc("c", resources={"requests": {}}))
    assert message(err) == 'PersistentVolumeClaim "c" is invalid: spec.resources[storage]: Required value'
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_persistent_volume_claim(
            namespace, pvc("d", accessModes=["WriteSometimes"], storageClassName="Bad_Name", volumeMode="Raw")
        )
    text = message(err)
    assert 'spec.accessModes: Unsupported value: "WriteSometimes": supported values: "ReadOnlyMany", ' in text
    assert 'spec.storageClassName: Invalid value: "Bad_Name"' in text
    assert 'spec.volumeMode: Unsupported value: "Raw": supported values: "Block", "Filesystem"' in text


def test_update_rules(v1: client.CoreV1Api, namespace: str) -> None:
    v1.create_namespaced_persistent_volume_claim(namespace, pvc("claim", "1Gi"))
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_persistent_volume_claim(
            "claim", namespace, {"spec": {"accessModes": ["ReadWriteMany"]}}
        )
    assert message(err).startswith(f'PersistentVolumeClaim "claim" is invalid: {IMMUTABLE}')
    # unbound: the request may not change either
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_persistent_volume_claim(
            "claim", namespace, {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}
        )
    assert IMMUTABLE in message(err)
    # volumeName may be set once (the PV controller's binding)
    named = v1.patch_namespaced_persistent_volume_claim("claim", namespace, {"spec": {"volumeName": "pv-1"}})
    assert (named.spec.volume_name, named.spec.storage_class_name) == ("pv-1", "local-path")
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_persistent_volume_claim("claim", namespace, {"spec": {"volumeName": "pv-2"}})
    assert IMMUTABLE in message(err)
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_persistent_volume_claim(
            "claim", namespace, {"spec": {"storageClassName": "later"}}
        )
    assert IMMUTABLE in message(err)


def test_bound_claim_resize(
    v1: client.CoreV1Api, storage: client.StorageV1Api, classes: list[str], namespace: str
) -> None:
    fixed, growing = f"fixed-{uuid.uuid4().hex[:6]}", f"grow-{uuid.uuid4().hex[:6]}"
    storage.create_storage_class({"metadata": {"name": fixed}, "provisioner": "example.com/p"})
    storage.create_storage_class(
        {"metadata": {"name": growing}, "provisioner": "example.com/p", "allowVolumeExpansion": True}
    )
    classes += [fixed, growing]
    for name, cls in (("small", fixed), ("big", growing)):
        v1.create_namespaced_persistent_volume_claim(namespace, pvc(name, "1Gi", storageClassName=cls))
        v1.patch_namespaced_persistent_volume_claim_status(
            name,
            namespace,
            {"status": {"phase": "Bound", "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]}},
        )
    grow = {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_persistent_volume_claim("small", namespace, grow)
    assert message(err, 403) == (
        'persistentvolumeclaims "small" is forbidden: only dynamically provisioned pvc can be resized and the '
        "storageclass that provisions the pvc must support resize"
    )
    grown = v1.patch_namespaced_persistent_volume_claim("big", namespace, grow)
    assert grown.spec.resources.requests["storage"] == "2Gi"
    # RecoverVolumeExpansionFailure (on in 1.32): a request may come down again, but not to the capacity
    lowered = v1.patch_namespaced_persistent_volume_claim(
        "big", namespace, {"spec": {"resources": {"requests": {"storage": "1536Mi"}}}}
    )
    assert lowered.spec.resources.requests["storage"] == "1536Mi"
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_persistent_volume_claim(
            "big", namespace, {"spec": {"resources": {"requests": {"storage": "1Gi"}}}}
        )
    assert message(err) == (
        'PersistentVolumeClaim "big" is invalid: spec.resources.requests.storage: Forbidden: field can not be less '
        "than status.capacity"
    )


def test_columns(kubectl: Kubectl, v1: client.CoreV1Api, namespace: str) -> None:
    v1.create_namespaced_persistent_volume_claim(namespace, pvc("web", "3Gi", storageClassName="fast"))
    lines = kubectl("get", "pvc", "-n", namespace).splitlines()
    assert lines[0].split() == [
        "NAME",
        "STATUS",
        "VOLUME",
        "CAPACITY",
        "ACCESS",
        "MODES",
        "STORAGECLASS",
        "VOLUMEATTRIBUTESCLASS",
        "AGE",
    ]
    assert lines[1].split()[:4] == ["web", "Pending", "fast", "<unset>"]
    v1.patch_namespaced_persistent_volume_claim("web", namespace, {"spec": {"volumeName": "pv-web"}})
    v1.patch_namespaced_persistent_volume_claim_status(
        "web",
        namespace,
        {"status": {"phase": "Bound", "capacity": {"storage": "4Gi"}, "accessModes": ["ReadWriteOnce"]}},
    )
    row = kubectl("get", "pvc", "web", "-n", namespace).splitlines()[1].split()
    assert row[:7] == ["web", "Bound", "pv-web", "4Gi", "RWO", "fast", "<unset>"]
    wide = kubectl("get", "pvc", "web", "-n", namespace, "-o", "wide").splitlines()
    assert wide[0].split()[-1] == "VOLUMEMODE" and wide[1].split()[-1] == "Filesystem"
    v1.delete_namespaced_persistent_volume_claim("web", namespace)
    assert kubectl("get", "pvc", "web", "-n", namespace).splitlines()[1].split()[1] == "Terminating"
