"""CRD printer columns against a real API server, as upstream's table convertor prints them: JSONPath
filters (cert-manager's Ready column), the first result, a string column printing other values as
kubectl's JSONPath printer does; a jsonPath not starting with `.` is a 422 at CRD create."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.controlplane.test_apiserver_crd import (
    crd_body,
    delete_crd,
    error_of,
    established,
    served,
    wait_for,
)

Obj = dict[str, Any]

SCHEMA: Obj = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
COLUMNS: list[Obj] = [
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Reason", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].reason"},
    {"name": "Count", "type": "string", "jsonPath": ".spec.count"},
    {"name": "Labels", "type": "string", "jsonPath": ".spec.sel"},
    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
    {"name": "Hosts", "type": "string", "jsonPath": ".spec.hosts[*]"},
]


@pytest.fixture
def grp(api: client.ApiClient) -> Iterator[str]:
    ext = client.ApiextensionsV1Api(api)
    name = f"c{uuid.uuid4().hex[:8]}.example.com"
    versions = [
        {
            "name": "v1",
            "served": True,
            "storage": True,
            "schema": {"openAPIV3Schema": SCHEMA},
            "subresources": {"status": {}},
            "additionalPrinterColumns": COLUMNS,
        }
    ]
    ext.create_custom_resource_definition(crd_body(name, versions=versions))
    wait_for(lambda: established(ext, f"crontabs.{name}") and served(api, name, "v1"))
    yield name
    delete_crd(ext, f"crontabs.{name}")


def test_filter_columns_print_the_first_match(
    api: client.ApiClient, kubectl: Any, grp: str, namespace: str, tmp_path: Any
) -> None:
    custom = client.CustomObjectsApi(api)
    body = {
        "apiVersion": f"{grp}/v1",
        "kind": "CronTab",
        "metadata": {"name": "c"},
        "spec": {"count": 3, "sel": {"b": "<x>", "a": 1}, "size": "big", "hosts": ["h1", "h2"]},
    }
    custom.create_namespaced_custom_object(grp, "v1", namespace, "crontabs", body)
    conditions = [
        {"type": "Issuing", "status": "False", "reason": "Done"},
        {"type": "Ready", "status": "True", "reason": "Ok"},
    ]
    custom.patch_namespaced_custom_object_status(
        grp, "v1", namespace, "crontabs", "c", {"status": {"conditions": conditions}}
    )
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
    answer = api.call_api(
        "GET",
        api.configuration.host + f"/apis/{grp}/v1/namespaces/{namespace}/crontabs/c",
        header_params={"Accept": accept},
    )
    answer.read()
    assert answer.status == 200
    table = json.loads(answer.data)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", *(c["name"] for c in COLUMNS)]
    assert table["columnDefinitions"][1]["description"] == (
        'Custom resource definition column (in JSONPath format): .status.conditions[?(@.type=="Ready")].status'
    )
    # Go's json.Marshal for the object (sorted keys, < and > escaped); a string not an integer is no cell
    assert table["rows"][0]["cells"] == ["c", "True", "Ok", "3", '{"a":1,"b":"\\u003cx\\u003e"}', None, "h1"]
    out = kubectl("--cache-dir", str(tmp_path / "cache"), "get", f"crontabs.{grp}", "-n", namespace)
    header, row = out.splitlines()
    assert header.split()[:4] == ["NAME", "READY", "REASON", "COUNT"]
    assert row.split()[:4] == ["c", "True", "Ok", "3"]


def test_a_column_path_not_starting_with_a_dot_is_422(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    name = f"c{uuid.uuid4().hex[:8]}.example.com"
    versions = [
        {
            "name": "v1",
            "served": True,
            "storage": True,
            "schema": {"openAPIV3Schema": SCHEMA},
            "additionalPrinterColumns": [{"name": "X", "type": "string", "jsonPath": "spec.x"}],
        }
    ]
    with pytest.raises(ApiException) as err:
        ext.create_custom_resource_definition(crd_body(name, versions=versions))
    assert err.value.status == 422
    assert (
        'spec.versions[0].additionalPrinterColumns[0].jsonPath: Invalid value: "spec.x": '
        "must be a simple json path starting with ."
    ) in error_of(err.value)["message"]
