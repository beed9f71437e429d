"""Custom resources read from storage against a real API server, as upstream's storage decoder reads
them: objects stored before a default was added get it on every read (get, list, Table); what a
mutating webhook adds is pruned to the schema again; objects stored at an older storage version are
converted (None strategy: apiVersion) on read and on write."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.controlplane.test_apiserver_crd import crd_body, delete_crd, established, served, wait_for
from tests.controlplane.webhookserver import serving

Obj = dict[str, Any]

SCHEMA: Obj = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {"size": {"type": "integer"}, "name": {"type": "string"}},
        }
    },
}


def version(name: str, openapi: Obj, storage: bool = True) -> Obj:
    return {
        "name": name,
        "served": True,
        "storage": storage,
        "schema": {"openAPIV3Schema": openapi},
        "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
    }


@pytest.fixture
def grp(api: client.ApiClient) -> Iterator[str]:
    ext = client.ApiextensionsV1Api(api)
    name = f"s{uuid.uuid4().hex[:8]}.example.com"
    ext.create_custom_resource_definition(crd_body(name, versions=[version("v1", SCHEMA)]))
    wait_for(lambda: established(ext, f"crontabs.{name}") and served(api, name, "v1"))
    yield name
    delete_crd(ext, f"crontabs.{name}")


def test_defaults_added_later_are_applied_on_read(api: client.ApiClient, grp: str, namespace: str) -> None:
    custom = client.CustomObjectsApi(api)
    ext = client.ApiextensionsV1Api(api)
    body = {"apiVersion": f"{grp}/v1", "kind": "CronTab", "metadata": {"name": "old"}, "spec": {"name": "x"}}
    custom.create_namespaced_custom_object(grp, "v1", namespace, "crontabs", body)
    defaulted = copy.deepcopy(SCHEMA)
    defaulted["properties"]["spec"]["properties"]["size"]["default"] = 3
    ext.patch_custom_resource_definition(
        f"crontabs.{grp}", [{"op": "replace", "path": "/spec/versions/0", "value": version("v1", defaulted)}]
    )

    def size() -> Any:
        return custom.get_namespaced_custom_object(grp, "v1", namespace, "crontabs", "old")["spec"].get(
            "size"
        )

    wait_for(lambda: size() == 3)
    listed = custom.list_namespaced_custom_object(grp, "v1", namespace, "crontabs")
    assert [item["spec"] for item in listed["items"]] == [{"name": "x", "size": 3}]
    answer = api.call_api(
        "GET",
        api.configuration.host + f"/apis/{grp}/v1/namespaces/{namespace}/crontabs",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    )
    answer.read()
    assert [row["cells"][1] for row in json.loads(answer.data)["rows"]] == [3]


def test_fields_a_mutating_webhook_adds_are_pruned(
    api: client.ApiClient, grp: str, namespace: str, tmp_path: Any
) -> None:
    adm = client.AdmissionregistrationV1Api(api)
    custom = client.CustomObjectsApi(api)
    with serving(tmp_path) as server:
        name = f"prune-{uuid.uuid4().hex[:8]}"
        webhook = {
            "name": "fields.example.com",
            "clientConfig": {"url": server.url("/add-fields"), "caBundle": server.ca_bundle},
            "rules": [
                {
                    "operations": ["CREATE"],
                    "apiGroups": [grp],
                    "apiVersions": ["v1"],
                    "resources": ["crontabs"],
                }
            ],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        }
        adm.create_mutating_webhook_configuration({"metadata": {"name": name}, "webhooks": [webhook]})
        try:
            body = {
                "apiVersion": f"{grp}/v1",
                "kind": "CronTab",
                "metadata": {"name": "m"},
                "spec": {"size": 1},
            }
            made = custom.create_namespaced_custom_object(grp, "v1", namespace, "crontabs", body)
        finally:
            adm.delete_mutating_webhook_configuration(name)
    assert [r["name"] for r in server.got("/add-fields")] == ["m"]
    assert made["spec"] == {"size": 1, "name": "hooked"}
    stored = custom.get_namespaced_custom_object(grp, "v1", namespace, "crontabs", "m")
    assert stored["spec"] == {"size": 1, "name": "hooked"}


def test_objects_stored_at_an_older_storage_version_are_converted(
    api: client.ApiClient, grp: str, namespace: str
) -> None:
    custom = client.CustomObjectsApi(api)
    ext = client.ApiextensionsV1Api(api)
    body = {"apiVersion": f"{grp}/v1", "kind": "CronTab", "metadata": {"name": "old"}, "spec": {"size": 1}}
    custom.create_namespaced_custom_object(grp, "v1", namespace, "crontabs", body)
    ext.patch_custom_resource_definition(
        f"crontabs.{grp}",
        [
            {
                "op": "replace",
                "path": "/spec/versions",
                "value": [version("v1", SCHEMA, False), version("v2", SCHEMA)],
            }
        ],
    )
    wait_for(lambda: served(api, grp, "v2"))

    got = custom.get_namespaced_custom_object(grp, "v2", namespace, "crontabs", "old")
    assert got["apiVersion"] == f"{grp}/v2"
    listed = custom.list_namespaced_custom_object(grp, "v2", namespace, "crontabs")
    assert [item["apiVersion"] for item in listed["items"]] == [f"{grp}/v2"]
    patched = custom.patch_namespaced_custom_object(
        grp, "v2", namespace, "crontabs", "old", {"spec": {"size": 2}}
    )
    assert patched["apiVersion"] == f"{grp}/v2" and patched["spec"]["size"] == 2
    got["spec"]["size"] = 3
    replaced = custom.replace_namespaced_custom_object(
        grp,
        "v2",
        namespace,
        "crontabs",
        "old",
        {**got, "metadata": {**got["metadata"], "resourceVersion": patched["metadata"]["resourceVersion"]}},
    )
    assert replaced["apiVersion"] == f"{grp}/v2" and replaced["spec"]["size"] == 3
    old = custom.get_namespaced_custom_object(grp, "v1", namespace, "crontabs", "old")
    assert old["apiVersion"] == f"{grp}/v1" and old["spec"]["size"] == 3
