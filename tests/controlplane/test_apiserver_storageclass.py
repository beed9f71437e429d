"""storage.k8s.io/v1 StorageClass served as upstream serves it: defaults (reclaimPolicy Delete,
volumeBindingMode Immediate), ValidateStorageClass's 422s, the fields an update may not change, and
kubectl's columns with `(default)` after the default class."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controlplane.conftest import Kubectl, message

DEFAULT = "storageclass.kubernetes.io/is-default-class"


def sc(name: str, **fields: object) -> dict:
    return {"metadata": {"name": name}, "provisioner": "example.com/disk", **fields}


@pytest.fixture(scope="module")
def storage(api: client.ApiClient) -> client.StorageV1Api:
    return client.StorageV1Api(api)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_defaults(storage: client.StorageV1Api) -> None:
    made = storage.create_storage_class(sc(unique("plain")))
    assert made.reclaim_policy == "Delete" and made.volume_binding_mode == "Immediate"
    assert made.allow_volume_expansion is None
    storage.delete_storage_class(made.metadata.name)


def test_local_path_is_served(storage: client.StorageV1Api, kubectl: Kubectl) -> None:
    local = storage.read_storage_class("local-path")
    assert (local.provisioner, local.reclaim_policy, local.volume_binding_mode) == (
        "rancher.io/local-path",
        "Delete",
        "WaitForFirstConsumer",
    )
    assert local.metadata.annotations[DEFAULT] == "true"
    row = kubectl("get", "sc", "local-path").splitlines()[1].split()
    assert row[:6] == [
        "local-path",
        "(default)",
        "rancher.io/local-path",
        "Delete",
        "WaitForFirstConsumer",
        "false",
    ]


def test_validation(storage: client.StorageV1Api, kubectl: Kubectl) -> None:
    manifest = json.dumps(
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "none"}}
    )
    refused = kubectl.run("create", "-f", "-", input=manifest, check=False)
    assert refused.returncode == 1
    assert 'The StorageClass "none" is invalid: provisioner: Required value' in refused.stderr
    with pytest.raises(ApiException) as err:
        storage.create_storage_class(sc("bad", reclaimPolicy="Recycle", volumeBindingMode="Later"))
    assert message(err) == (
        'StorageClass.storage.k8s.io "bad" is invalid: [reclaimPolicy: Unsupported value: "Recycle": supported '
        'values: "Delete", "Retain", volumeBindingMode: Unsupported value: "Later": supported values: '
        '"Immediate", "WaitForFirstConsumer"]'
    )
    with pytest.raises(ApiException) as err:
        storage.create_storage_class(sc("badprov", provisioner="no/such/thing"))
    assert 'provisioner: Invalid value: "no/such/thing"' in message(err)


def test_update_rules(storage: client.StorageV1Api) -> None:
    name = unique("fixed")
    storage.create_storage_class(
        sc(name, parameters={"type": "ssd"}, volumeBindingMode="WaitForFirstConsumer")
    )
    with pytest.raises(ApiException) as err:
        storage.patch_storage_class(
            name, {"parameters": {"type": "hdd"}, "reclaimPolicy": "Retain", "provisioner": "x.io/y"}
        )
    assert message(err) == (
        f'StorageClass.storage.k8s.io "{name}" is invalid: [parameters: Forbidden: updates to parameters are '
        "forbidden., provisioner: Forbidden: updates to provisioner are forbidden., reclaimPolicy: Forbidden: "
        "updates to reclaimPolicy are forbidden.]"
    )
    with pytest.raises(ApiException) as err:
        storage.patch_storage_class(name, {"volumeBindingMode": "Immediate"})
    assert message(err) == (
        f'StorageClass.storage.k8s.io "{name}" is invalid: volumeBindingMode: Invalid value: "Immediate": '
        "field is immutable"
    )
    grown = storage.patch_storage_class(name, {"allowVolumeExpansion": True})
    assert grown.allow_volume_expansion is True
    storage.delete_storage_class(name)


def test_columns(kubectl: Kubectl, storage: client.StorageV1Api) -> None:
    name = unique("marked")
    storage.create_storage_class(
        sc(
            name,
            metadata={"name": name, "annotations": {DEFAULT: "true"}},
            volumeBindingMode="WaitForFirstConsumer",
        )
    )
    try:
        lines = kubectl("get", "storageclass", name).splitlines()
        assert lines[0].split() == [
            "NAME",
            "PROVISIONER",
            "RECLAIMPOLICY",
            "VOLUMEBINDINGMODE",
            "ALLOWVOLUMEEXPANSION",
            "AGE",
        ]
        cells = lines[1].split()
        assert cells[:6] == [name, "(default)", "example.com/disk", "Delete", "WaitForFirstConsumer", "false"]
        assert kubectl("get", "sc", name, "-o", "name").strip() == f"storageclass.storage.k8s.io/{name}"
    finally:
        storage.delete_storage_class(name)
