"""The API server on etcd, as a user meets it: state in etcd across a server restart, compaction turning
an old watch into 410 and an informer relisting, etcd lost mid-request (a retryable 5xx, nothing half
written, and everything resumes when it is back), an object over etcd's request limit (upstream's 500 with etcd's words), and an
unreachable etcd at start (the server exits within seconds naming it); a subset of the kubectl scenarios
and paged lists. All the API-server tests run on etcd with PYKUBE_STORE=etcd (tests/controlplane/conftest.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e.waiting import wait_for
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.errors import ApiError
from kubeclient.informer import Informer
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.etcd import Etcd
from pykubelet.rig.process import free_port
from tests.etcdmembers import read_from_cache

from . import test_apiserver_kubectl as kubectl_scenarios
from .conftest import KUBECTL, Kubectl
from .test_apiserver_wire import fetch, remaining_item_counts

pytestmark = pytest.mark.integration  # real servers, etcd or processes

# The kubectl scenarios that run on etcd in every run (all of them do with PYKUBE_STORE=etcd): writes of
# each kind of patch, apply and server-side apply, watches, scale, Table output.
ON_ETCD = (
    "test_apply_twice_second_is_noop_and_validates",
    "test_get_table_wide_yaml",
    "test_get_watch_sees_changes",
    "test_patch_label_annotate_all_types",
    "test_scale_deployment",
    "test_server_side_apply_conflicts_and_force",
    "test_create_and_expose_services",
)

# Counted as "not yet" while polling: an API error or a check that fails while a member or replica is down.
RETRY = (ApiException, AssertionError)


def configmap(name: str, **data: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data=data)


@pytest.fixture(scope="module")
def fragile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Etcd, ApiServer]]:
    """An etcd of its own (tests here stop it) with a small request limit, and a server on it that
    compacts every second."""
    root = tmp_path_factory.mktemp("fragile")
    etcd = Etcd(root / "etcd", max_request_bytes=64 * 1024, progress_notify_interval="1s")
    etcd.start()
    server = ApiServer(root / "api", etcd=etcd, extra_args=["--etcd-compaction-interval", "1s"])
    server.start()
    yield etcd, server
    server.stop()
    etcd.remove()
    assert not server.running and not etcd.running


@pytest.fixture(scope="module")
def steady(etcd: Etcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A server on the session's etcd, under a prefix of its own (the shared server may be on etcd too)."""
    server = ApiServer(tmp_path_factory.mktemp("steady"), etcd=etcd, extra_args=["--etcd-prefix", "/steady"])
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("scenario", ON_ETCD)
def test_kubectl_scenario_on_etcd(scenario: str, steady: ApiServer, tmp_path: Path) -> None:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    kubectl = Kubectl(steady.kubeconfig, tmp_path)
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", namespace)
    getattr(kubectl_scenarios, scenario)(kubectl, namespace)


def test_write_answers_on_etcd_are_the_bytes_then_read_back(steady: ApiServer) -> None:
    """On etcd a write's event comes back through the watch after the write returned; the answers to a
    create, an update and each kind of patch (the status subresource too) are still byte for byte what a
    GET of that version gives (resourceVersion at the end of metadata, managedFields), and a list of
    objects over 256 KiB (sent in slices) parses whole."""
    ns = f"t-{uuid.uuid4().hex[:8]}"
    assert (
        fetch(steady, "/api/v1/namespaces", "POST", json.dumps({"metadata": {"name": ns}}).encode())[0] == 201
    )
    base = f"/api/v1/namespaces/{ns}/pods"
    pod = {
        "metadata": {"name": "p", "labels": {"a": "1"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }

    def relabelled(answer: bytes) -> bytes:
        current = json.loads(answer)
        current["metadata"]["labels"]["b"] = "2"
        return json.dumps(current).encode()

    answer = b""
    writes = [
        ("POST", base, lambda _: json.dumps(pod).encode(), "application/json", 201),
        ("PUT", f"{base}/p", relabelled, "application/json", 200),
        (
            "PATCH",
            f"{base}/p",
            lambda _: b'{"metadata":{"labels":{"c":"3"}}}',
            "application/merge-patch+json",
            200,
        ),
        (
            "PATCH",
            f"{base}/p",
            lambda _: b'{"spec":{"containers":[{"name":"c","image":"j"}]}}',
            "application/strategic-merge-patch+json",
            200,
        ),
        (
            "PATCH",
            f"{base}/p/status",
            lambda _: b'{"status":{"phase":"Running"}}',
            "application/merge-patch+json",
            200,
        ),
    ]
    for method, path, body, content_type, code in writes:
        status, answer, _ = fetch(steady, path, method, body(answer), content_type)
        assert status == code, (method, path, answer)
        version = json.loads(answer)["metadata"]["resourceVersion"]
        read_status, read, _ = fetch(steady, f"{base}/p?resourceVersion={version}")
        assert read_status == 200 and answer == read, (method, path)
    assert json.loads(answer)["status"]["phase"] == "Running"
    assert json.loads(answer)["spec"]["containers"][0]["image"] == "j"
    for i in range(40):
        cm = {"metadata": {"name": f"cm{i}"}, "data": {f"k{j}": "v" * 2000 for j in range(4)}}
        assert fetch(steady, f"/api/v1/namespaces/{ns}/configmaps", "POST", json.dumps(cm).encode())[0] == 201
    status, listed, _ = fetch(steady, f"/api/v1/namespaces/{ns}/configmaps")
    assert status == 200 and len(listed) > 256 * 1024 and listed.endswith(b"]}\n")
    assert [i["metadata"]["name"] for i in json.loads(listed)["items"]] == sorted(f"cm{i}" for i in range(40))


def test_paged_lists_come_from_one_etcd_revision(steady: ApiServer) -> None:
    """kubectl's --chunk-size pages are continue tokens: each page is read from etcd at the first
    page's revision, so a write between pages does not show."""
    with steady.api_client() as api:
        v1 = client.CoreV1Api(api)
        ns = f"t-{uuid.uuid4().hex[:8]}"
        v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        for i in range(5):
            v1.create_namespaced_config_map(ns, configmap(f"c{i}"))
        first = v1.list_namespaced_config_map(ns, limit=2)
        v1.create_namespaced_config_map(ns, configmap("c-late"))
        v1.delete_namespaced_config_map("c3", ns)
        names = [c.metadata.name for c in first.items]
        token = first.metadata._continue
        while token:
            page = v1.list_namespaced_config_map(ns, limit=2, _continue=token)
            assert page.metadata.resource_version == first.metadata.resource_version
            names += [c.metadata.name for c in page.items]
            token = page.metadata._continue
        assert names == [f"c{i}" for i in range(5)]


def test_state_lives_in_etcd_across_a_server_restart_and_old_watches_get_410(fragile) -> None:
    etcd, server = fragile
    ns = f"t-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        kube = KubeClient(load_kubeconfig(server.kubeconfig))
        informer = Informer(kube, f"/api/v1/namespaces/{ns}/configmaps")
        try:
            await kube.create("/api/v1/namespaces", {"metadata": {"name": ns}})
            await kube.create(f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "before"}})
            task = asyncio.create_task(informer.run())
            await asyncio.wait_for(informer.synced.wait(), 10)
            assert informer.lists == 1 and f"{ns}/before" in informer.store
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            old_rv = informer.resource_version
            # While it is away: a change, then compaction passes its resourceVersion.
            await kube.create(f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "while-away"}})

            async def compacted() -> bool:
                try:
                    await kube.list(
                        f"/api/v1/namespaces/{ns}/configmaps",
                        params={"resourceVersion": old_rv, "resourceVersionMatch": "Exact"},
                    )
                except ApiError as err:
                    return err.gone
                return False

            deadline = time.monotonic() + 15
            while not await compacted():
                assert time.monotonic() < deadline, "the server never compacted past the informer's revision"
                await asyncio.sleep(0.3)
            await kube.close()
            # A new server process on the same etcd: all state is there, and its window starts after the
            # compaction, so the informer's resumed watch gets 410 and it relists.
            server.stop()
            server.start()
            kube2 = KubeClient(load_kubeconfig(server.kubeconfig))
            informer.client = kube2
            task = asyncio.create_task(informer.run())
            deadline = time.monotonic() + 15
            while informer.lists < 2 or f"{ns}/while-away" not in informer.store:
                assert time.monotonic() < deadline, (
                    f"no relist: lists={informer.lists} keys={list(informer.store)}"
                )
                await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await kube2.close()
        finally:
            await kube.close()

    asyncio.run(scenario())
    with server.api_client() as api:
        names = [c.metadata.name for c in client.CoreV1Api(api).list_namespaced_config_map(ns).items]
    assert names == ["before", "while-away"]


def test_an_object_over_etcds_limit_gets_etcds_words_as_upstream(fragile) -> None:
    """etcd (here with --max-request-bytes 64 KiB) refuses the write; kube-apiserver translates no such
    error, so its answer is a 500 with no reason and etcd's message (kubectl: `Error from server:
    etcdserver: request is too large`)."""
    _, server = fragile
    with server.api_client() as api:
        v1 = client.CoreV1Api(api)
        with pytest.raises(ApiException) as err:
            v1.create_namespaced_config_map("default", configmap("big", blob="x" * 100_000))
        assert err.value.status == 500
        body = json.loads(err.value.body)
        assert "reason" not in body and body["message"] == "etcdserver: request is too large"
        with pytest.raises(ApiException) as missing:
            v1.read_namespaced_config_map("big", "default")
        assert missing.value.status == 404


def test_etcd_lost_mid_flight_is_a_retryable_5xx_and_everything_resumes(fragile) -> None:
    etcd, server = fragile
    with server.api_client() as api:
        v1 = client.CoreV1Api(api)
        v1.create_namespaced_config_map("default", configmap("kept", a="1"))
        etcd.kill()
        try:
            started = time.monotonic()
            with pytest.raises(ApiException) as err:
                v1.create_namespaced_config_map("default", configmap("lost", a="1"))
            assert time.monotonic() - started < 12
            body = json.loads(err.value.body)
            assert err.value.status == 500 and body["reason"] == "ServerTimeout"
            assert body["details"]["retryAfterSeconds"] == 2
            # Reads of cached data go on while etcd is away (resourceVersion=0); a consistent read
            # (no resourceVersion) needs etcd's current revision: a retryable 5xx, as upstream.
            assert read_from_cache(v1, "kept", "default").data == {"a": "1"}
            with pytest.raises(ApiException) as consistent:
                v1.read_namespaced_config_map("kept", "default")
            assert consistent.value.status == 500, consistent.value.body
        finally:
            etcd.start()
        # Back: writes go through again, the cache's watch has resumed (a write is readable at once),
        # and the write that failed was not applied.
        wait_for(
            lambda: v1.create_namespaced_config_map("default", configmap("after", a="2")),
            timeout=15.0,
            interval=0.1,
            retrying=RETRY,
        )
        assert v1.read_namespaced_config_map("after", "default").data == {"a": "2"}
        with pytest.raises(ApiException) as missing:
            v1.read_namespaced_config_map("lost", "default")
        assert missing.value.status == 404


def test_paged_lists_on_etcd_carry_remaining_item_count(steady: ApiServer) -> None:
    with steady.api_client() as api:
        ns = f"t-{uuid.uuid4().hex[:8]}"
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    assert remaining_item_counts(steady, ns) == [3, 1, None]


def test_readyz_fails_while_etcd_is_unreachable(fragile) -> None:
    """Upstream's etcd checks: /readyz is a 500 naming the failed checks (reason withheld) until etcd is
    back."""
    etcd, server = fragile
    assert fetch(server, "/readyz", accept="*/*")[:2] == (200, b"ok")
    etcd.kill()
    try:
        status, body, _ = fetch(server, "/readyz", accept="*/*")
        text = body.decode()
        assert status == 500, text
        assert "[+]ping ok\n" in text and "[-]etcd failed: reason withheld\n" in text
        assert "[-]etcd-readiness failed: reason withheld\n" in text and text.endswith(
            "readyz check failed\n"
        )
        status, body, _ = fetch(server, "/readyz/etcd", accept="*/*")
        assert status == 500 and body.startswith(b"internal server error: ")
    finally:
        etcd.start()
    wait_for(lambda: fetch(server, "/readyz", accept="*/*")[:2] == (200, b"ok"), timeout=15.0, interval=0.1)


def test_unreachable_etcd_at_start_exits_within_seconds_naming_it(tmp_path: Path) -> None:
    url = f"https://127.0.0.1:{free_port()}"
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pykubelet",
            "server",
            "--data-dir",
            str(tmp_path),
            "--port",
            "0",
            "--scheduler=false",
            "--controllers=false",
            "--etcd-servers",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert time.monotonic() - started < 20
    assert f"pykubelet server: etcd at {url} is not reachable" in proc.stderr
    assert "Connection refused" in proc.stderr
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "pykubelet",
            "server",
            "--data-dir",
            str(tmp_path),
            "--etcd-servers",
            "127.0.0.1:2379",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "is not an http(s)://host:port URL" in bad.stderr
