"""CRD conversion webhooks and the CRD groups' APIServices against the real API server, a real HTTPS
conversion webhook run by the test (its own CA, the caBundle in the CRD), the official client and
kubectl: a CronTab created at v1 (the storage version) reads at v2 with its field renamed, one created at
v2 is stored at v1, lists and watches at v2 convert each item, a patch at v2 goes through both ways,
reads at the storage version call nothing; metadata beyond labels and annotations is taken from the
original; a webhook that is down, or answers with a wrong uid, too few objects, the wrong apiVersion,
another name or a Failure, is a 500 with upstream's message; bad conversion settings are upstream's 422.
Each CRD's served versions become local APIServices `<version>.<group>` (label automanaged=true,
priorities 1000/100) that kubectl lists as Available, and go with the CRD."""

from __future__ import annotations

import functools
import json
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from e2e import waiting
from kubeclient.hostaddr import default_route_ip
from pykubelet.rig.apiserver import ApiServer
from tests.controlplane.conversionserver import ConversionServer, serving
from tests.controlplane.test_apiserver_crd import delete_crd, established, raw, served

pytestmark = pytest.mark.integration  # real servers, etcd or processes

Obj = dict[str, Any]
wait_for = functools.partial(waiting.wait_for, timeout=20.0, interval=0.05)


def _schema(field: str) -> Obj:
    return {
        "openAPIV3Schema": {
            "type": "object",
            "properties": {
                # each version requires its own field: a body converted to the storage version is
                # judged by that version's schema, never by the one it was sent at
                "spec": {"type": "object", "required": [field], "properties": {field: {"type": "string"}}},
            },
        }
    }


def crd_body(group: str, conversion: Obj) -> Obj:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"crontabs.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": _schema("cronSpec"),
                    "additionalPrinterColumns": [
                        {"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"}
                    ],
                },
                {
                    "name": "v2",
                    "served": True,
                    "storage": False,
                    "schema": _schema("schedule"),
                    "additionalPrinterColumns": [
                        {"name": "Schedule", "type": "string", "jsonPath": ".spec.schedule"}
                    ],
                },
            ],
            "conversion": conversion,
        },
    }


def webhook(url: str, ca_bundle: str, versions: tuple[str, ...] = ("v1",)) -> Obj:
    return {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"url": url, "caBundle": ca_bundle},
            "conversionReviewVersions": list(versions),
        },
    }


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConversionServer]:
    with serving(tmp_path_factory.mktemp("conversion")) as server:
        yield server


@pytest.fixture(scope="module")
def ext(api: client.ApiClient) -> client.ApiextensionsV1Api:
    return client.ApiextensionsV1Api(api)


@pytest.fixture(scope="module")
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


MakeCrd = Callable[[Obj], str]


@pytest.fixture
def make_crd(ext: client.ApiextensionsV1Api, api: client.ApiClient) -> Iterator[MakeCrd]:
    """make_crd(conversion) -> the group of a new established CronTab CRD serving v1 and v2."""
    made: list[str] = []

    def make(conversion: Obj) -> str:
        group = f"c{uuid.uuid4().hex[:8]}.example.com"
        ext.create_custom_resource_definition(crd_body(group, conversion))
        made.append(group)
        wait_for(
            lambda: (
                established(ext, f"crontabs.{group}")
                and served(api, group, "v1")
                and served(api, group, "v2")
            )
        )
        return group

    yield make
    for group in made:
        delete_crd(ext, f"crontabs.{group}")


def v1_cron(group: str, name: str, schedule: str = "*/5 * * * *") -> Obj:
    return {
        "apiVersion": f"{group}/v1",
        "kind": "CronTab",
        "metadata": {"name": name},
        "spec": {"cronSpec": schedule},
    }


def error_of(err: ApiException) -> Obj:
    return json.loads(err.body)


def test_create_at_one_version_read_at_the_other(
    make_crd: MakeCrd, hook: ConversionServer, custom: client.CustomObjectsApi, namespace: str
) -> None:
    group = make_crd(webhook(hook.url("/convert"), hook.ca_bundle))
    before = len(hook.got("/convert"))
    created = custom.create_namespaced_custom_object(group, "v1", namespace, "crontabs", v1_cron(group, "a"))
    assert created["spec"] == {"cronSpec": "*/5 * * * *"}
    assert len(hook.got("/convert")) == before  # v1 is the storage version: nothing to convert

    at_v2 = custom.get_namespaced_custom_object(group, "v2", namespace, "crontabs", "a")
    assert at_v2["apiVersion"] == f"{group}/v2"
    assert at_v2["spec"] == {"schedule": "*/5 * * * *"}
    # labels and annotations are the webhook's to change; the rest of metadata is the original's
    assert at_v2["metadata"]["annotations"] == {"converted-to": "v2"}
    assert at_v2["metadata"]["generation"] == created["metadata"]["generation"] == 1
    assert "finalizers" not in at_v2["metadata"]
    assert at_v2["metadata"]["uid"] == created["metadata"]["uid"]
    assert at_v2["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    review = hook.reviews[-1]
    assert review["query"] == {"timeout": "30s"}
    request = review["request"]
    assert request["desiredAPIVersion"] == f"{group}/v2"
    assert uuid.UUID(request["uid"])
    assert [o["apiVersion"] for o in request["objects"]] == [f"{group}/v1"]

    # created at v2: stored at v1 (the webhook renamed the field back), answered at v2
    body = {
        "apiVersion": f"{group}/v2",
        "kind": "CronTab",
        "metadata": {"name": "b"},
        "spec": {"schedule": "1 * * * *"},
    }
    answered = custom.create_namespaced_custom_object(group, "v2", namespace, "crontabs", body)
    assert answered["apiVersion"] == f"{group}/v2" and answered["spec"] == {"schedule": "1 * * * *"}
    stored = custom.get_namespaced_custom_object(group, "v1", namespace, "crontabs", "b")
    assert stored["spec"] == {"cronSpec": "1 * * * *"}
    assert stored["metadata"]["annotations"] == {"converted-to": "v1"}
    assert "finalizers" not in stored["metadata"]


def test_list_watch_and_patch_at_the_other_version(
    make_crd: MakeCrd, hook: ConversionServer, custom: client.CustomObjectsApi, namespace: str
) -> None:
    group = make_crd(webhook(hook.url("/convert"), hook.ca_bundle))
    for name in ("x", "y"):
        custom.create_namespaced_custom_object(group, "v1", namespace, "crontabs", v1_cron(group, name))
    before = len(hook.got("/convert"))
    listed = custom.list_namespaced_custom_object(group, "v2", namespace, "crontabs")
    assert listed["apiVersion"] == f"{group}/v2"
    assert [(i["apiVersion"], i["spec"]) for i in listed["items"]] == [
        (f"{group}/v2", {"schedule": "*/5 * * * *"})
    ] * 2
    # each item on its own, as upstream decodes each stored object into the version asked for
    assert [len(r["objects"]) for r in hook.got("/convert")[before:]] == [1, 1]

    patched = custom.patch_namespaced_custom_object(
        group, "v2", namespace, "crontabs", "x", {"spec": {"schedule": "0 0 * * *"}}
    )
    assert patched["spec"] == {"schedule": "0 0 * * *"}
    assert custom.get_namespaced_custom_object(group, "v1", namespace, "crontabs", "x")["spec"] == {
        "cronSpec": "0 0 * * *"
    }

    w = watch.Watch()
    seen: list[tuple[str, Obj]] = []
    for event in w.stream(
        custom.list_namespaced_custom_object, group, "v2", namespace, "crontabs", timeout_seconds=5
    ):
        seen.append((event["type"], event["object"]))
        if len(seen) == 2:
            custom.patch_namespaced_custom_object(
                group, "v1", namespace, "crontabs", "y", {"spec": {"cronSpec": "9 9 * * *"}}
            )
        if len(seen) == 3:
            w.stop()
    assert [t for t, _ in seen] == ["ADDED", "ADDED", "MODIFIED"]
    assert all(o["apiVersion"] == f"{group}/v2" for _, o in seen)
    assert seen[2][1]["metadata"]["name"] == "y" and seen[2][1]["spec"] == {"schedule": "9 9 * * *"}


def test_kubectl_reads_each_version(
    make_crd: MakeCrd, hook: ConversionServer, custom: client.CustomObjectsApi, namespace: str, kubectl: Any
) -> None:
    group = make_crd(webhook(hook.url("/convert"), hook.ca_bundle))
    custom.create_namespaced_custom_object(
        group, "v1", namespace, "crontabs", v1_cron(group, "k", "3 * * * *")
    )
    out = kubectl(
        "get", f"crontabs.v2.{group}", "k", "-n", namespace, "-o", "jsonpath={.apiVersion} {.spec.schedule}"
    )
    assert out.strip() == f"{group}/v2 3 * * * *"
    out = kubectl("get", f"crontabs.v1.{group}", "k", "-n", namespace, "-o", "jsonpath={.spec.cronSpec}")
    assert out.strip() == "3 * * * *"
    # the Table's columns are v2's, read from the object converted to v2
    table = kubectl("get", f"crontabs.v2.{group}", "-n", namespace).splitlines()
    assert table[0].split() == ["NAME", "SCHEDULE"]
    assert table[1].split() == ["k", "3", "*", "*", "*", "*"]
    table = kubectl("get", f"crontabs.v1.{group}", "-n", namespace).splitlines()
    assert table[0].split() == ["NAME", "SPEC"]
    # server-side apply at v2: the current object converted to v2, the result stored at v1
    applied = {
        "apiVersion": f"{group}/v2",
        "kind": "CronTab",
        "metadata": {"name": "k", "namespace": namespace},
        "spec": {"schedule": "4 * * * *"},
    }
    kubectl(
        "apply",
        "--server-side",
        "--field-manager=t",
        "--force-conflicts",
        "-f",
        "-",
        input=json.dumps(applied),
    )
    stored = custom.get_namespaced_custom_object(group, "v1", namespace, "crontabs", "k")
    assert stored["spec"] == {"cronSpec": "4 * * * *"}


def test_service_reference(
    make_crd: MakeCrd, custom: client.CustomObjectsApi, v1: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    """clientConfig.service is resolved as an admission webhook's: the Service's Endpoints give the
    address, TLS verifies `<service>.<namespace>.svc`."""
    host = default_route_ip()
    if not host:
        pytest.skip("no non-loopback address for an Endpoints object")
    with serving(tmp_path, host=host, names=(f"convsvc.{namespace}.svc",)) as server:
        v1.create_namespaced_service(
            namespace,
            {
                "metadata": {"name": "convsvc"},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": server.port}]},
            },
        )
        conversion = {
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": {
                    "service": {"namespace": namespace, "name": "convsvc", "path": "/convert"},
                    "caBundle": server.ca_bundle,
                },
                "conversionReviewVersions": ["v1"],
            },
        }
        group = make_crd(conversion)
        custom.create_namespaced_custom_object(group, "v1", namespace, "crontabs", v1_cron(group, "s"))
        with pytest.raises(ApiException) as err:
            custom.get_namespaced_custom_object(group, "v2", namespace, "crontabs", "s")
        assert err.value.status == 500
        assert error_of(err.value)["message"] == (
            f"conversion webhook for {group}/v1, Kind=CronTab failed: "
            f'Post "https://convsvc.{namespace}.svc:443/convert?timeout=30s": endpoints "convsvc" not found'
        )
        v1.create_namespaced_endpoints(
            namespace,
            {
                "metadata": {"name": "convsvc"},
                "subsets": [{"addresses": [{"ip": host}], "ports": [{"name": "https", "port": server.port}]}],
            },
        )
        got = wait_for(lambda: _get_or_none(custom, group, namespace, "s"))
        assert got["spec"] == {"schedule": "*/5 * * * *"}
        assert server.got("/convert")


def _get_or_none(custom: client.CustomObjectsApi, group: str, namespace: str, name: str) -> Obj | None:
    try:
        return custom.get_namespaced_custom_object(group, "v2", namespace, "crontabs", name)
    except ApiException as err:
        assert err.status == 500  # the Endpoints not yet in this server's cache
        return None


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_webhook_down_is_a_500_with_upstreams_message(
    make_crd: MakeCrd, hook: ConversionServer, custom: client.CustomObjectsApi, namespace: str, kubectl: Any
) -> None:
    port = _closed_port()
    group = make_crd(webhook(f"https://127.0.0.1:{port}/convert", hook.ca_bundle))
    custom.create_namespaced_custom_object(group, "v1", namespace, "crontabs", v1_cron(group, "d"))
    expected = (
        f'conversion webhook for {group}/v1, Kind=CronTab failed: Post "https://127.0.0.1:{port}/convert?timeout=30s": '
        f"dial tcp 127.0.0.1:{port}: connect: connection refused"
    )
    with pytest.raises(ApiException) as read:
        custom.get_namespaced_custom_object(group, "v2", namespace, "crontabs", "d")
    assert read.value.status == 500
    # a read answers the bare error (upstream's ErrorToAPIStatus: no reason), a write an InternalError
    assert not error_of(read.value).get("reason")
    assert error_of(read.value)["message"] == expected
    failed = kubectl.run("get", f"crontabs.v2.{group}", "d", "-n", namespace, check=False)
    assert failed.returncode != 0 and f"Error from server: {expected}" in failed.stderr
    with pytest.raises(ApiException) as listing:
        custom.list_namespaced_custom_object(group, "v2", namespace, "crontabs")
    assert listing.value.status == 500
    # a watch at v2 ends at the event it cannot convert, as upstream's watch handler does
    started = time.monotonic()
    stream = watch.Watch().stream(
        custom.list_namespaced_custom_object, group, "v2", namespace, "crontabs", timeout_seconds=30
    )
    assert list(stream) == []
    assert time.monotonic() - started < 15
    body = {
        "apiVersion": f"{group}/v2",
        "kind": "CronTab",
        "metadata": {"name": "e"},
        "spec": {"schedule": "1 * * * *"},
    }
    with pytest.raises(ApiException) as write:
        custom.create_namespaced_custom_object(group, "v2", namespace, "crontabs", body)
    assert write.value.status == 500
    assert error_of(write.value)["reason"] == "InternalError"
    assert (
        f"Internal error occurred: conversion webhook for {group}/v2, Kind=CronTab failed: Post"
        in error_of(write.value)["message"]
    )
    # nothing was stored, and the storage version still reads without the webhook
    names = [
        i["metadata"]["name"]
        for i in custom.list_namespaced_custom_object(group, "v1", namespace, "crontabs")["items"]
    ]
    assert names == ["d"]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/wronguid", 'failed: expected response.uid="'),
        ("/fewer", "returned 0 objects, expected 1"),
        (
            "/sameversion",
            "returned invalid object at index 0: invalid groupVersion (expected {group}/v2, received {group}/v1)",
        ),
        ("/rename", "returned invalid object: must have the same name: bad != someone-else"),
        ("/fail", "failed: this webhook refuses to convert"),
    ],
)
def test_bad_answers_are_refused(
    make_crd: MakeCrd,
    hook: ConversionServer,
    custom: client.CustomObjectsApi,
    namespace: str,
    path: str,
    expected: str,
) -> None:
    group = make_crd(webhook(hook.url(path), hook.ca_bundle))
    custom.create_namespaced_custom_object(group, "v1", namespace, "crontabs", v1_cron(group, "bad"))
    with pytest.raises(ApiException) as got:
        custom.get_namespaced_custom_object(group, "v2", namespace, "crontabs", "bad")
    assert got.value.status == 500
    message = error_of(got.value)["message"]
    assert f"conversion webhook for {group}/v1, Kind=CronTab " in message
    assert expected.format(group=group) in message


def test_v1beta1_reviews(
    make_crd: MakeCrd, hook: ConversionServer, custom: client.CustomObjectsApi, namespace: str
) -> None:
    group = make_crd(webhook(hook.url("/convert"), hook.ca_bundle, ("v1beta1",)))
    custom.create_namespaced_custom_object(group, "v1", namespace, "crontabs", v1_cron(group, "old"))
    assert custom.get_namespaced_custom_object(group, "v2", namespace, "crontabs", "old")["spec"] == {
        "schedule": "*/5 * * * *"
    }
    assert hook.got("/convert")[-1]["desiredAPIVersion"] == f"{group}/v2"


def test_untrusted_webhook_certificate(
    make_crd: MakeCrd, hook: ConversionServer, custom: client.CustomObjectsApi, namespace: str
) -> None:
    group = make_crd(webhook(hook.url("/convert"), ""))  # no caBundle: the system roots do not know it
    custom.create_namespaced_custom_object(group, "v1", namespace, "crontabs", v1_cron(group, "u"))
    with pytest.raises(ApiException) as got:
        custom.get_namespaced_custom_object(group, "v2", namespace, "crontabs", "u")
    assert got.value.status == 500
    assert "x509: certificate signed by unknown authority" in error_of(got.value)["message"]


@pytest.mark.parametrize(
    ("conversion", "expected"),
    [
        (
            {"strategy": "Webhook"},
            "spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook",
        ),
        (
            {"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://h/x"}}},
            "spec.conversion.conversionReviewVersions: Required value",
        ),
        (
            {
                "strategy": "Webhook",
                "webhook": {"clientConfig": {"url": "https://h/x"}, "conversionReviewVersions": ["v3"]},
            },
            'spec.conversion.conversionReviewVersions: Invalid value: []string{"v3"}: must include at least one of v1, v1beta1',
        ),
        (
            {
                "strategy": "Webhook",
                "webhook": {"clientConfig": {"url": "http://h/x"}, "conversionReviewVersions": ["v1"]},
            },
            "spec.conversion.webhookClientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme",
        ),
        (
            {"strategy": "None", "webhook": {"conversionReviewVersions": ["v1"]}},
            "spec.conversion.conversionReviewVersions: Forbidden: should not be set when strategy is not set to Webhook",
        ),
    ],
)
def test_bad_conversion_settings_are_422(api: client.ApiClient, conversion: Obj, expected: str) -> None:
    group = f"c{uuid.uuid4().hex[:8]}.example.com"
    # raw: the official client itself refuses a webhook without conversionReviewVersions
    status, body = raw(
        api, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd_body(group, conversion)
    )
    assert status == 422, body
    assert expected in body["message"]


def _apiservices(apiserver: ApiServer) -> dict[str, list[str]]:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(apiserver.kubeconfig), "get", "apiservices", "--no-headers"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done
    return {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}


def test_each_served_version_is_a_local_apiservice(
    make_crd: MakeCrd,
    ext: client.ApiextensionsV1Api,
    api: client.ApiClient,
    apiserver: ApiServer,
    kubectl: Any,
) -> None:
    group = make_crd({"strategy": "None"})
    reg = client.ApiregistrationV1Api(api)
    names = (f"v1.{group}", f"v2.{group}")

    def listed() -> dict[str, list[str]] | None:
        table = _apiservices(apiserver)
        return table if all(table.get(n, [])[:2] == ["Local", "True"] for n in names) else None

    wait_for(listed, timeout=30)
    for name in names:
        svc = reg.read_api_service(name)
        assert svc.metadata.labels == {"kube-aggregator.kubernetes.io/automanaged": "true"}
        assert (svc.spec.group, svc.spec.service) == (group, None)
        assert (svc.spec.group_priority_minimum, svc.spec.version_priority) == (1000, 100)
        (cond,) = svc.status.conditions
        assert (cond.type, cond.status, cond.reason) == ("Available", "True", "Local")

    # v2 no longer served: its APIService goes, v1's stays
    crd = ext.read_custom_resource_definition(f"crontabs.{group}")
    versions = [client.ApiClient().sanitize_for_serialization(v) for v in crd.spec.versions]
    versions[1]["served"] = False
    ext.patch_custom_resource_definition(f"crontabs.{group}", {"spec": {"versions": versions}})
    wait_for(
        lambda: names[1] not in _apiservices(apiserver) and names[0] in _apiservices(apiserver), timeout=30
    )

    delete_crd(ext, f"crontabs.{group}")
    wait_for(lambda: names[0] not in _apiservices(apiserver), timeout=30)
