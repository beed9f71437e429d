"""CRDs where servers come and go: two API servers on one etcd each learn a CRD from their own watch (one
creates it, the other serves its objects; deleting it through either removes them from both), and a
restarted server serves the established CRDs from its first answer."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from pykubelet.rig.apiserver import ApiServer, ApiServerReplicas, api_client
from pykubelet.rig.etcd import Etcd
from tests.controlplane.test_apiserver_crd import crd_body, established, raw, served, wait_for

pytestmark = pytest.mark.integration  # real servers, etcd or processes


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServerReplicas]:
    root = tmp_path_factory.mktemp("crd-multi")
    etcd = Etcd(root / "etcd", progress_notify_interval="1s")
    etcd.start()
    group = ApiServerReplicas(root, 2, etcd)
    group.start()
    yield group
    group.stop()
    etcd.remove()


def cr(group: str, name: str) -> dict:
    return {
        "apiVersion": f"{group}/v1",
        "kind": "CronTab",
        "metadata": {"name": name},
        "spec": {"cronSpec": "* * * * *"},
    }


def test_each_replica_learns_the_crd_from_its_own_watch(replicas: ApiServerReplicas) -> None:
    first, second = (api_client(s.kubeconfig) for s in replicas.servers)
    group = f"r{uuid.uuid4().hex[:8]}.example.com"
    name = f"crontabs.{group}"
    core = client.CoreV1Api(first)
    ns = f"t-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    client.ApiextensionsV1Api(first).create_custom_resource_definition(crd_body(group))
    for api in (first, second):
        wait_for(
            lambda api=api: established(client.ApiextensionsV1Api(api), name) and served(api, group, "v1")
        )
    made = client.CustomObjectsApi(second).create_namespaced_custom_object(
        group, "v1", ns, "crontabs", cr(group, "a")
    )
    assert made["spec"]["replicas"] == 1  # the schema's default, applied by the second replica
    path = f"/apis/{group}/v1/namespaces/{ns}/crontabs/a"
    wait_for(lambda: raw(first, "GET", path)[0] == 200)  # the write reaches the other replica's cache
    assert raw(first, "GET", path)[1]["metadata"]["uid"] == made["metadata"]["uid"]
    status, answer = raw(
        first,
        "POST",
        f"/apis/{group}/v1/namespaces/{ns}/crontabs",
        {**cr(group, "b"), "spec": {"cronSpec": "x"}},
    )
    assert status == 422 and "spec.cronSpec in body should match" in answer["message"]

    client.ApiextensionsV1Api(second).delete_custom_resource_definition(name)
    for api in (first, second):
        wait_for(lambda api=api: not served(api, group, "v1"), timeout=20)
    status, _ = raw(first, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    assert status == 404


def test_a_restarted_server_serves_established_crds_at_once(tmp_path: Path) -> None:
    server = ApiServer(tmp_path / "api")
    group = f"s{uuid.uuid4().hex[:8]}.example.com"
    with server:
        with server.api_client() as api:
            client.ApiextensionsV1Api(api).create_custom_resource_definition(crd_body(group, scope="Cluster"))
            wait_for(lambda: served(api, group, "v1"))
            client.CustomObjectsApi(api).create_cluster_custom_object(
                group, "v1", "crontabs", cr(group, "kept")
            )
    with server:
        with server.api_client() as api:
            status, obj = raw(api, "GET", f"/apis/{group}/v1/crontabs/kept")
            assert status == 200 and obj["spec"]["image"] == "busybox"
            kinds = {r.name for r in client.CustomObjectsApi(api).get_api_resources(group, "v1").resources}
            assert "crontabs" in kinds
