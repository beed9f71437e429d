"""A CRD schema's `pattern` against a real API server, as upstream compiles it: a Go (RE2) regular
expression, so calico's and prometheus-operator's `^(?i)...` patterns are accepted and enforced, and a
pattern Go refuses (lookahead, a bad repetition) is a 422 at CRD create with Go's regexp error text."""

from __future__ import annotations

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


def schema(pattern: str) -> Obj:
    return {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"protocol": {"type": "string", "pattern": pattern}},
            }
        },
    }


def versions(pattern: str) -> list[Obj]:
    return [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema(pattern)}}]


# calico's NetworkPolicy protocol pattern (a case-insensitive flag group after ^)
CALICO = "^(?i)(tcp|udp|icmp|icmpv6|sctp|udplite)$"


@pytest.fixture
def grp(api: client.ApiClient) -> Iterator[str]:
    ext = client.ApiextensionsV1Api(api)
    name = f"p{uuid.uuid4().hex[:8]}.example.com"
    ext.create_custom_resource_definition(crd_body(name, versions=versions(CALICO)))
    wait_for(lambda: established(ext, f"crontabs.{name}") and served(api, name, "v1"))
    yield name
    delete_crd(ext, f"crontabs.{name}")


def body(grp: str, name: str, protocol: str) -> Obj:
    return {
        "apiVersion": f"{grp}/v1",
        "kind": "CronTab",
        "metadata": {"name": name},
        "spec": {"protocol": protocol},
    }


def test_re2_flag_groups_are_accepted_and_enforced(api: client.ApiClient, grp: str, namespace: str) -> None:
    custom = client.CustomObjectsApi(api)
    made = custom.create_namespaced_custom_object(grp, "v1", namespace, "crontabs", body(grp, "a", "TCP"))
    assert made["spec"]["protocol"] == "TCP"
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(grp, "v1", namespace, "crontabs", body(grp, "b", "gre"))
    assert err.value.status == 422
    assert error_of(err.value)["message"] == (
        "CronTab." + grp + ' "b" is invalid: spec.protocol: Invalid value: "gre": '
        f"spec.protocol in body should match '{CALICO}'"
    )


@pytest.mark.parametrize(
    ("pattern", "go_error"),
    [
        ("+", "error parsing regexp: missing argument to repetition operator: `+`"),
        ("^a(?=b)", "error parsing regexp: invalid or unsupported Perl syntax: `(?=`"),
        ("(a)\\1", "error parsing regexp: invalid escape sequence: `\\1`"),
    ],
)
def test_patterns_go_refuses_are_422(api: client.ApiClient, pattern: str, go_error: str) -> None:
    ext = client.ApiextensionsV1Api(api)
    name = f"p{uuid.uuid4().hex[:8]}.example.com"
    with pytest.raises(ApiException) as err:
        ext.create_custom_resource_definition(crd_body(name, versions=versions(pattern)))
    assert err.value.status == 422
    quoted = pattern.replace("\\", "\\\\")
    assert (
        f'spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[protocol].pattern: Invalid value: "{quoted}": '
        f"must be a valid regular expression, but isn't: {go_error}"
    ) in error_of(err.value)["message"]
