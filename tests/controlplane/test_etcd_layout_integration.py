"""An etcd an older pykubelet wrote (eleven grouped resources and the custom resources under
`<plural>.<group>`) is moved to upstream's layout when the API server starts, on a real etcd: each object
once, with its value, a newer revision and a log line; a clash kept, not overwritten; a second start finds
nothing to move. Then served: a real API server reads the moved objects back, and `etcdctl get --prefix
--keys-only` of the running server shows upstream's paths for a pod, a service, a deployment, a CRD and
its custom resource."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from controlplane.apiserver.etcdlayout import relayout_store
from controlplane.apiserver.kindparts import builtin_table
from controlplane.storage.etcd import EtcdStore
from controlplane.storage.etcdkeys import prefix_end
from controlplane.storage.etcdpb import rpc_pb2 as pb
from controlplane.storage.etcdrelayout import legacy_name
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.etcd import Etcd
from tests.controlplane.test_apiserver_crd import crd_body, established, served, wait_for

from .conftest import etcd_store

pytestmark = pytest.mark.integration  # real etcd and API servers


async def raw_keys(store: EtcdStore) -> dict[str, int]:
    """Every key under the store's prefix (without it) and its mod revision."""
    low = store.prefix.encode()
    response = await store.kv.Range(pb.RangeRequest(key=low, range_end=prefix_end(low), keys_only=True))
    return {kv.key.decode()[len(store.prefix) :]: kv.mod_revision for kv in response.kvs}


def obj(kind: str, name: str, **fields: object) -> bytes:
    return json.dumps({"kind": kind, "metadata": {"name": name}, **fields}).encode()


CRD = obj(
    "CustomResourceDefinition",
    "widgets.example.com",
    spec={"group": "example.com", "names": {"plural": "widgets", "kind": "Widget"}, "scope": "Namespaced"},
)
OLDER = {
    "horizontalpodautoscalers.autoscaling/ns/h": obj("HorizontalPodAutoscaler", "h"),
    "customresourcedefinitions.apiextensions.k8s.io/widgets.example.com": CRD,
    "widgets.example.com/ns/w1": obj("Widget", "w1"),
    "storageclasses.storage.k8s.io/fast": obj("StorageClass", "fast", provisioner="older"),
    "pods/ns/p": obj("Pod", "p"),  # already where upstream keeps it
}
UPSTREAM = {
    "horizontalpodautoscalers.autoscaling/ns/h": "horizontalpodautoscalers/ns/h",
    "customresourcedefinitions.apiextensions.k8s.io/widgets.example.com": (
        "apiextensions.k8s.io/customresourcedefinitions/widgets.example.com"
    ),
    "widgets.example.com/ns/w1": "example.com/widgets/ns/w1",
}


async def test_an_older_layout_is_moved_once_and_a_clash_is_kept(
    etcd: Etcd, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = etcd_store(etcd, f"/t-{tmp_path.name[-12:]}/")
    await store.start()
    try:
        for key, value in OLDER.items():
            await store.kv.Put(pb.PutRequest(key=(store.prefix + key).encode(), value=value))
        # A StorageClass of that name already where upstream keeps it: the older copy must not replace it.
        newer = obj("StorageClass", "fast", provisioner="newer")
        await store.kv.Put(pb.PutRequest(key=(store.prefix + "storageclasses/fast").encode(), value=newer))
        before = await raw_keys(store)
        with caplog.at_level(logging.INFO, logger="controlplane.storage.etcdrelayout"):
            moved = await relayout_store(store, builtin_table())
        assert sorted((m.bucket, m.objects, m.kept) for m in moved) == [
            ("customresourcedefinitions.apiextensions.k8s.io", 1, 0),
            ("horizontalpodautoscalers.autoscaling", 1, 0),
            ("storageclasses.storage.k8s.io", 0, 1),
            ("widgets.example.com", 1, 0),
        ]
        after = await raw_keys(store)
        assert set(after) == {
            *UPSTREAM.values(),
            "pods/ns/p",
            "storageclasses/fast",
            "storageclasses.storage.k8s.io/fast",  # kept: the newer place holds another object
        }
        for old, new in UPSTREAM.items():
            assert after[new] > max(before.values()), "a moved object's resourceVersion only grows"
            got = await store.kv.Range(pb.RangeRequest(key=(store.prefix + new).encode()))
            assert got.kvs[0].value == OLDER[old]
        assert after["pods/ns/p"] == before["pods/ns/p"]
        hpa = await store.get("/horizontalpodautoscalers.autoscaling/ns/h")
        assert hpa is not None and hpa.value == OLDER["horizontalpodautoscalers.autoscaling/ns/h"]
        widget = await store.get("/widgets.example.com/ns/w1")
        assert widget is not None and widget.value == OLDER["widgets.example.com/ns/w1"]
        sc = await store.get("/storageclasses.storage.k8s.io/fast")
        assert sc is not None and sc.value == newer
        assert (
            "event=etcd-relayout resource=horizontalpodautoscalers.autoscaling "
            f"from={store.prefix}horizontalpodautoscalers.autoscaling/ to={store.prefix}horizontalpodautoscalers/"
        ) in caplog.text
        assert "event=etcd-relayout-conflict resource=storageclasses.storage.k8s.io kept=1" in caplog.text
        again = await relayout_store(store, builtin_table())
        assert [(m.bucket, m.objects) for m in again] == [("storageclasses.storage.k8s.io", 0)]
        assert await raw_keys(store) == after
    finally:
        await store.close()


def etcdctl_keys(etcd: Etcd, prefix: str) -> list[str]:
    pki = etcd.pki
    argv = ["etcdctl", "--endpoints", etcd.url, "--cacert", str(pki.ca_cert), "--cert", str(pki.client_cert),
            "--key", str(pki.client_key), "get", "--prefix", prefix, "--keys-only"]  # fmt: skip
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=30, check=True, env={**os.environ, "ETCDCTL_API": "3"}
    )
    return [line for line in done.stdout.splitlines() if line]


def to_older(etcd: Etcd, prefix: str, buckets: list[str]) -> None:
    """Put the buckets' objects back where an older pykubelet kept them."""

    async def move() -> None:
        store = etcd_store(etcd, prefix)
        await store.start()
        try:
            for bucket in buckets:
                moved, _ = await store.move_resource(store.layout.name(bucket), legacy_name(bucket))
                assert moved, bucket
        finally:
            await store.close()

    asyncio.run(move())


def test_an_older_pykubelets_etcd_is_served_in_upstreams_layout(etcd: Etcd, tmp_path: Path) -> None:
    prefix = f"/relayout-{uuid.uuid4().hex[:8]}"
    data, group, ns = tmp_path / "api", f"r{uuid.uuid4().hex[:6]}.example.com", "moved"
    args = ["--etcd-prefix", prefix]
    with ApiServer(data, etcd=etcd, extra_args=args) as server, server.api_client() as api:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
        ext = client.ApiextensionsV1Api(api)
        ext.create_custom_resource_definition(crd_body(group))
        wait_for(lambda: established(ext, f"crontabs.{group}") and served(api, group, "v1"))
        cr = {
            "apiVersion": f"{group}/v1",
            "kind": "CronTab",
            "metadata": {"name": "a"},
            "spec": {"cronSpec": "* * * * *"},
        }
        made = [
            client.CustomObjectsApi(api).create_namespaced_custom_object(group, "v1", ns, "crontabs", cr),
            api.sanitize_for_serialization(
                client.AutoscalingV2Api(api).create_namespaced_horizontal_pod_autoscaler(
                    ns,
                    {
                        "metadata": {"name": "h"},
                        "spec": {
                            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
                            "maxReplicas": 3,
                        },
                    },
                )
            ),
            api.sanitize_for_serialization(
                client.StorageV1Api(api).create_storage_class(
                    {"metadata": {"name": f"fast-{ns}"}, "provisioner": "example.com/x"}
                )
            ),
        ]
    older = [f"crontabs.{group}", "horizontalpodautoscalers.autoscaling", "storageclasses.storage.k8s.io"]
    to_older(etcd, prefix + "/", [*older, "customresourcedefinitions.apiextensions.k8s.io"])
    keys = etcdctl_keys(etcd, prefix + "/")
    assert f"{prefix}/horizontalpodautoscalers.autoscaling/{ns}/h" in keys
    assert f"{prefix}/customresourcedefinitions.apiextensions.k8s.io/crontabs.{group}" in keys

    with ApiServer(data, etcd=etcd, extra_args=args) as server, server.api_client() as api:
        served_again = [
            client.CustomObjectsApi(api).get_namespaced_custom_object(group, "v1", ns, "crontabs", "a"),
            api.sanitize_for_serialization(
                client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler("h", ns)
            ),
            api.sanitize_for_serialization(client.StorageV1Api(api).read_storage_class(f"fast-{ns}")),
        ]
        for was, now in zip(made, served_again, strict=True):
            assert now["metadata"]["uid"] == was["metadata"]["uid"]
            assert int(now["metadata"]["resourceVersion"]) > int(was["metadata"]["resourceVersion"])
        assert established(client.ApiextensionsV1Api(api), f"crontabs.{group}")
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        core.create_namespaced_pod(
            ns, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        )
        core.create_namespaced_service(ns, {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
        labels = {"app": "d"}
        apps.create_namespaced_deployment(
            ns,
            {
                "metadata": {"name": "d"},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [{"name": "c", "image": "x"}]},
                    },
                },
            },
        )
        keys = etcdctl_keys(etcd, prefix + "/")
        log = server.log_path.read_text()
    for path in (
        f"pods/{ns}/p",
        f"services/specs/{ns}/s",
        f"deployments/{ns}/d",
        f"apiextensions.k8s.io/customresourcedefinitions/crontabs.{group}",
        f"{group}/crontabs/{ns}/a",
        f"horizontalpodautoscalers/{ns}/h",
        f"storageclasses/fast-{ns}",
    ):
        assert f"{prefix}/{path}" in keys, path
    assert not [
        k for k in keys if k.split("/")[2] in {*older, "customresourcedefinitions.apiextensions.k8s.io"}
    ]
    assert f"event=etcd-relayout resource=crontabs.{group}" in log
