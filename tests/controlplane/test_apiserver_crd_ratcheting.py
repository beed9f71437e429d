"""CRD validation ratcheting (upstream's CRDValidationRatcheting, GA in 1.33) against a real API server
through the official client: after a CRD's schema is tightened, objects stored under the old schema can
still be updated as long as the fields now invalid are left as they are; a changed field, a new object,
and a transition rule are validated in full."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.controlplane.test_apiserver_crd import crd_body, delete_crd, established, served, wait_for

Obj = dict[str, Any]

LOOSE: Obj = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "size": {"type": "integer"},
                "note": {"type": "string"},
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                    },
                },
                "args": {"type": "array", "items": {"type": "string"}},
                "stable": {"type": "string"},
            },
        },
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}


def tightened() -> Obj:
    schema = copy.deepcopy(LOOSE)
    props = schema["properties"]["spec"]["properties"]
    props["name"]["minLength"] = 5
    props["size"]["maximum"] = 3
    props["ports"]["items"]["properties"]["port"]["minimum"] = 1024
    props["args"]["items"]["maxLength"] = 3
    props["stable"]["x-kubernetes-validations"] = [
        {"rule": "self == oldSelf", "message": "stable is immutable"}
    ]
    props["note"]["x-kubernetes-validations"] = [
        {"rule": "self.startsWith('ok')", "message": "note must start with ok"}
    ]
    return schema


def version(schema: Obj) -> Obj:
    return {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "subresources": {"status": {}},
    }


@pytest.fixture
def group(api: client.ApiClient) -> Iterator[str]:
    ext = client.ApiextensionsV1Api(api)
    name = f"r{uuid.uuid4().hex[:8]}.example.com"
    ext.create_custom_resource_definition(crd_body(name, versions=[version(LOOSE)]))
    wait_for(lambda: established(ext, f"crontabs.{name}") and served(api, name, "v1"))
    yield name
    delete_crd(ext, f"crontabs.{name}")


def tighten(api: client.ApiClient, group: str) -> None:
    ext = client.ApiextensionsV1Api(api)
    crd = ext.read_custom_resource_definition(f"crontabs.{group}")
    body = api.sanitize_for_serialization(crd)
    body["spec"]["versions"] = [version(tightened())]
    ext.replace_custom_resource_definition(f"crontabs.{group}", body)


def messages(err: ApiException) -> str:
    return str(err.body)


def test_unchanged_invalid_fields_do_not_block_an_update(
    api: client.ApiClient, group: str, namespace: str
) -> None:
    custom = client.CustomObjectsApi(api)
    spec = {
        "name": "ab",
        "size": 9,
        "note": "legacy",
        "ports": [{"name": "web", "port": 80}, {"name": "dns", "port": 53}],
        "args": ["long-arg"],
        "stable": "x",
    }
    obj = {"apiVersion": f"{group}/v1", "kind": "CronTab", "metadata": {"name": "old"}, "spec": spec}
    custom.create_namespaced_custom_object(group, "v1", namespace, "crontabs", obj)
    tighten(api, group)

    def rejects_new() -> bool:
        try:
            custom.create_namespaced_custom_object(
                group, "v1", namespace, "crontabs", {**obj, "metadata": {"name": "probe"}}
            )
        except ApiException as err:
            return err.status == 422
        custom.delete_namespaced_custom_object(group, "v1", namespace, "crontabs", "probe")
        return False

    wait_for(rejects_new)  # the tightened schema is in force: a new object with these values is a 422
    try:
        custom.create_namespaced_custom_object(
            group, "v1", namespace, "crontabs", {**obj, "metadata": {"name": "new"}}
        )
        raise AssertionError("a new object breaking the tightened schema was stored")
    except ApiException as err:
        assert err.status == 422
        for text in (
            "spec.name",
            "spec.size",
            "spec.ports[0].port",
            "spec.args[0]",
            # upstream's hasBlockingErr: a size violation (args) keeps the CEL rules from running
            "some validation rules were not checked because the object was invalid",
        ):
            assert text in messages(err), text

    # Another field changes, a map-list item is added, an item is reordered: the old values ratchet.
    patched = custom.patch_namespaced_custom_object(
        group,
        "v1",
        namespace,
        "crontabs",
        "old",
        {
            "metadata": {"labels": {"touched": "yes"}},
            "spec": {
                "ports": [
                    {"name": "dns", "port": 53},
                    {"name": "web", "port": 80},
                    {"name": "m", "port": 9090},
                ]
            },
        },
    )
    assert patched["metadata"]["labels"] == {"touched": "yes"}
    assert [p["name"] for p in patched["spec"]["ports"]] == ["dns", "web", "m"]
    # The status subresource writes too, with the spec as it was.
    status = custom.patch_namespaced_custom_object_status(
        group, "v1", namespace, "crontabs", "old", {"status": {"phase": "Running"}}
    )
    assert status["status"] == {"phase": "Running"}

    # A changed field is validated in full, the rest still ratchets.
    for change, field in (
        ({"name": "abc"}, "spec.name"),
        ({"size": 8}, "spec.size"),
        ({"ports": [{"name": "web", "port": 81}, {"name": "dns", "port": 53}]}, "spec.ports[0].port"),
        ({"args": ["other-long"]}, "spec.args[0]"),
        ({"note": "still bad"}, "note must start with ok"),
    ):
        with pytest.raises(ApiException) as caught:
            custom.patch_namespaced_custom_object(group, "v1", namespace, "crontabs", "old", {"spec": change})
        assert caught.value.status == 422
        assert field in messages(caught.value), (change, messages(caught.value))
        others = [f for f in ("spec.name", "spec.size", "spec.args[0]") if f != field]
        assert not any(f + ":" in messages(caught.value) for f in others), messages(caught.value)

    # A transition rule never ratchets.
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(
            group, "v1", namespace, "crontabs", "old", {"spec": {"stable": "y"}}
        )
    assert caught.value.status == 422 and "stable is immutable" in messages(caught.value)

    # Fixing a field is accepted, and it is then held to the new schema.
    fixed = custom.patch_namespaced_custom_object(
        group, "v1", namespace, "crontabs", "old", {"spec": {"name": "abcdef"}}
    )
    assert fixed["spec"]["name"] == "abcdef"
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(
            group, "v1", namespace, "crontabs", "old", {"spec": {"name": "ab"}}
        )
    assert caught.value.status == 422 and "spec.name" in messages(caught.value)
