"""Several API servers on one etcd, as a user meets them: the `kubernetes` Endpoints and EndpointSlice
list every live replica (upstream's lease endpoint reconciler: /masterleases/<ip> with a TTL), a watch on
one replica sees the writes made through another with the same resourceVersions, optimistic concurrency
holds across replicas, and a client given every replica (kubeclient's failover) keeps its requests,
its informer (every event exactly once, resumed not relisted) and its leader election going when the
replica it talks to is killed. Also: a list at a future resourceVersion is upstream's 504 on both stores."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from controlplane.apiserver.protobuf import codec, wire
from controlplane.storage.etcd import EtcdConfig, EtcdStore
from e2e.waiting import wait_for
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.informer import Informer
from kubeclient.leaderelection import LeaderElection, LeaderElector
from pykubelet.rig.apiserver import ApiServer, ApiServerReplicas, api_client
from pykubelet.rig.etcd import Etcd
from tests.controlplane.test_apiserver_protobuf import Http, _pod
from tests.tcprelay import TcpRelay

pytestmark = pytest.mark.integration  # real servers, etcd or processes

# Counted as "not yet" while polling: an API error or a check that fails while a member or replica is down.
RETRY = (ApiException, AssertionError)


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServerReplicas]:
    root = tmp_path_factory.mktemp("multi")
    etcd = Etcd(root / "etcd", progress_notify_interval="1s")
    etcd.start()
    replicas = ApiServerReplicas(root, 2, etcd)
    replicas.start()
    yield replicas
    replicas.stop()
    etcd.remove()
    assert not any(s.running for s in replicas.servers) and not etcd.running


def core(server: ApiServer | Path) -> client.CoreV1Api:
    return client.CoreV1Api(api_client(server if isinstance(server, Path) else server.kubeconfig))


def endpoint_ips(v1: client.CoreV1Api) -> tuple[list[str], list[int]]:
    ep = v1.read_namespaced_endpoints("kubernetes", "default")
    subsets = ep.subsets or []
    return [a.ip for s in subsets for a in s.addresses or []], [
        p.port for s in subsets for p in s.ports or []
    ]


def slice_ips(api: client.ApiClient) -> list[str]:
    es = client.DiscoveryV1Api(api).read_namespaced_endpoint_slice("kubernetes", "default")
    return [a for e in es.endpoints for a in e.addresses]


def master_leases(etcd: Etcd) -> list[tuple[str, int]]:
    """The /registry/masterleases/ keys in etcd and their lease ids (0: no TTL), read directly."""

    async def read() -> list[tuple[str, int]]:
        pki = etcd.pki
        store = EtcdStore(EtcdConfig((etcd.url,), pki.ca_cert, pki.client_cert, pki.client_key))
        await store.start()
        try:
            from controlplane.storage.etcdpb import rpc_pb2 as pb

            low = b"/registry/masterleases/"
            response = await store.kv.Range(pb.RangeRequest(key=low, range_end=low[:-1] + b"0"))
            return [(kv.key.decode()[len(low) :], kv.lease) for kv in response.kvs]
        finally:
            await store.close()

    return asyncio.run(read())


def readyz(server: ApiServer) -> int:
    """The replica's /readyz status (anonymous, as a load balancer asks)."""
    context = ssl.create_default_context(cafile=str(server.ca_cert))
    context.check_hostname = False
    try:
        with urllib.request.urlopen(f"{server.url}/readyz", context=context, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def test_kubernetes_endpoints_list_every_live_ready_replica(group: ApiServerReplicas) -> None:
    """Upstream's lease reconciler: every replica renews a /masterleases record (TTL 15 s) every 10 s and
    lists the live records. A replica that stops takes itself out at once (RemoveEndpoints on shutdown);
    one cut off from etcd is not ready (its /readyz fails on the etcd check) and cannot renew, so its
    record runs out and a ready replica's round drops it (a replica that dies goes the same way); once
    etcd is reachable again it is ready, renews, and lists itself again at its next round."""
    first, second = group.servers
    etcd = first.etcd
    assert isinstance(etcd, Etcd)
    v1 = core(first)
    both = ["127.0.0.1", "127.0.0.2"]
    assert endpoint_ips(v1) == (both, [group.port])
    assert slice_ips(v1.api_client) == both
    leases = master_leases(etcd)
    assert sorted(ip for ip, _ in leases) == both
    assert all(lease for _, lease in leases), "every record expires unless renewed"

    def listed(ips: list[str]) -> bool:
        # The Endpoints and the EndpointSlice are two writes: wait for both.
        return endpoint_ips(v1)[0] == ips and slice_ips(v1.api_client) == ips

    second.stop()
    try:
        wait_for(lambda: listed(["127.0.0.1"]), timeout=5, interval=0.1, retrying=RETRY)
        # The second replica again, its only way to etcd through a relay the test cuts.
        with TcpRelay(etcd.port) as relay:
            args = [arg for s in group.servers for arg in ("--tls-san", s.host)]
            args += ["--etcd-servers", f"https://127.0.0.1:{relay.port}", *etcd.server_args()[2:]]
            cut_off = ApiServer(second.data_dir, group.port, host=second.host, extra_args=args)
            try:
                cut_off.start()
                wait_for(lambda: listed(both), timeout=5, interval=0.1, retrying=RETRY)
                relay.cut()
                wait_for(lambda: readyz(cut_off) == 500, timeout=15, interval=0.2)
                started = time.monotonic()
                wait_for(lambda: listed(["127.0.0.1"]), timeout=40, interval=0.5, retrying=RETRY)
                assert time.monotonic() - started <= 15 + 10 + 5  # the record's TTL, a round, our polling
                assert [ip for ip, _ in master_leases(etcd)] == ["127.0.0.1"]
                assert readyz(cut_off) == 500  # still cut off: not listed while not ready
                relay.restore()
                wait_for(lambda: readyz(cut_off) == 200, timeout=20, interval=0.2)
                wait_for(lambda: listed(both), timeout=15, interval=0.2, retrying=RETRY)
            finally:
                cut_off.stop()
    finally:
        second.start()
    wait_for(lambda: listed(both), timeout=5, interval=0.1, retrying=RETRY)


def test_a_watch_on_one_replica_sees_writes_through_the_other_at_the_same_versions(
    group: ApiServerReplicas,
) -> None:
    writer, watcher = core(group.servers[0]), core(group.servers[1])
    ns = f"m-{uuid.uuid4().hex[:6]}"
    writer.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    start_rv = wait_for(
        lambda: watcher.list_namespaced_config_map(ns).metadata.resource_version,
        timeout=15.0,
        interval=0.1,
        retrying=RETRY,
    )
    seen: list[tuple[str, str, str]] = []
    done = threading.Event()

    def watch_b() -> None:
        w = watch.Watch()
        for ev in w.stream(
            watcher.list_namespaced_config_map, ns, resource_version=start_rv, timeout_seconds=20
        ):
            seen.append((ev["type"], ev["object"].metadata.name, ev["object"].metadata.resource_version))
            if len(seen) == 4:
                w.stop()
        done.set()

    thread = threading.Thread(target=watch_b, daemon=True)
    thread.start()
    written = []
    for i in range(3):
        cm = writer.create_namespaced_config_map(
            ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"c{i}"), data={"i": str(i)})
        )
        written.append(("ADDED", f"c{i}", cm.metadata.resource_version))
    gone = writer.delete_namespaced_config_map("c1", ns)
    assert gone is not None
    assert done.wait(15), f"watch through the other replica saw only {seen}"
    assert seen[:3] == written
    assert seen[3][:2] == ("DELETED", "c1") and int(seen[3][2]) > int(written[-1][2])
    # Reads through either replica agree on every object's resourceVersion and the list's.
    a = {c.metadata.name: c.metadata.resource_version for c in writer.list_namespaced_config_map(ns).items}
    b = wait_for(
        lambda: (
            {
                c.metadata.name: c.metadata.resource_version
                for c in watcher.list_namespaced_config_map(ns).items
            }
            if len(watcher.list_namespaced_config_map(ns).items) == 2
            else None
        ),
        timeout=15.0,
        interval=0.1,
        retrying=RETRY,
    )
    assert a == b == {"c0": written[0][2], "c2": written[2][2]}
    # A list at an exact resourceVersion served by the replica that did not write it.
    old = watcher.list_namespaced_config_map(
        ns, resource_version=written[1][2], resource_version_match="Exact"
    )
    assert [c.metadata.name for c in old.items] == ["c0", "c1"]


def test_optimistic_concurrency_holds_across_replicas(group: ApiServerReplicas) -> None:
    a, b = core(group.servers[0]), core(group.servers[1])
    ns = "default"
    name = f"cc-{uuid.uuid4().hex[:6]}"
    cm = a.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name)))
    stale = cm.metadata.resource_version
    a.patch_namespaced_config_map(name, ns, {"data": {"x": "1"}})
    body = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, resource_version=stale), data={"y": "2"}
    )
    with pytest.raises(ApiException) as err:
        b.replace_namespaced_config_map(name, ns, body)
    assert err.value.status == 409
    # Patches through both replicas at once: none is lost (each replica retries on a conflict).
    threads = [
        threading.Thread(
            target=lambda api=api, i=i: api.patch_namespaced_config_map(name, ns, {"data": {f"k{i}": "v"}})
        )
        for i, api in enumerate([a, b] * 5)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = wait_for(
        lambda: (
            b.read_namespaced_config_map(name, ns)
            if len(b.read_namespaced_config_map(name, ns).data) == 11
            else None
        ),
        timeout=15.0,
        interval=0.1,
        retrying=RETRY,
    )
    assert set(final.data) == {"x"} | {f"k{i}" for i in range(10)}


def test_service_allocations_stay_unique_across_replicas(group: ApiServerReplicas) -> None:
    """Services created at once through both replicas (each allocating from its own process) never
    share a cluster IP or a node port, and a node port one replica handed out is refused by the other
    with upstream's text (the allocation record in etcd, not each replica's cache, decides)."""
    apis = [core(group.servers[0]), core(group.servers[1])]
    ns = "default"
    tag = uuid.uuid4().hex[:6]
    made: list[client.V1Service] = []
    failures: list[BaseException] = []

    def create(api: client.CoreV1Api, i: int) -> None:
        body = {
            "metadata": {"name": f"race-{tag}-{i}"},
            "spec": {"type": "NodePort", "ports": [{"port": 80}]},
        }
        try:
            made.append(api.create_namespaced_service(ns, body))
        except BaseException as err:  # reported below, with the others
            failures.append(err)

    threads = [threading.Thread(target=create, args=(apis[i % 2], i)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    ips = [s.spec.cluster_ip for s in made]
    ports = [s.spec.ports[0].node_port for s in made]
    assert len(made) == 16 and len(set(ips)) == 16 and len(set(ports)) == 16
    taken = ports[0]
    with pytest.raises(ApiException) as err:
        apis[1].create_namespaced_service(
            ns,
            {
                "metadata": {"name": f"race-{tag}-dup"},
                "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": taken}]},
            },
        )
    assert err.value.status == 422
    assert (
        f"spec.ports[0].nodePort: Invalid value: {taken}: provided port is already allocated"
        in (json.loads(err.value.body)["message"])
    )
    # deleted through one replica, the port is free at the other at once
    owner = next(s.metadata.name for s in made if s.spec.ports[0].node_port == taken)
    apis[0].delete_namespaced_service(owner, ns)
    again = apis[1].create_namespaced_service(
        ns,
        {
            "metadata": {"name": f"race-{tag}-again"},
            "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": taken}]},
        },
    )
    assert again.spec.ports[0].node_port == taken
    for s in [*made, again]:
        if s.metadata.name != owner:
            apis[0].delete_namespaced_service(s.metadata.name, ns)


def test_a_list_at_a_future_resource_version_is_a_504(group: ApiServerReplicas, apiserver: ApiServer) -> None:
    """Upstream's storage.NewTooLargeResourceVersionError on the etcd replicas and on the session's
    server (SQLite unless PYKUBE_STORE=etcd)."""

    def refused(server: ApiServer, extra: dict[str, object]) -> None:
        with pytest.raises(ApiException) as err:
            core(server).list_namespace(resource_version="999999999", **extra)
        assert err.value.status == 504, (server.url, extra, err.value.body)
        status = json.loads(err.value.body)
        assert status["reason"] == "Timeout"
        assert status["message"].startswith("Too large resource version: 999999999, current: ")
        assert status["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
        assert status["details"]["retryAfterSeconds"] == 1

    # Each waits the cache's 3 s for the version before it answers: asked side by side.
    cases = [
        (server, extra)
        for server in (group.servers[1], apiserver)
        for extra in ({}, {"resource_version_match": "Exact"}, {"limit": 1})
    ]
    with ThreadPoolExecutor(len(cases)) as pool:
        for done in [pool.submit(refused, server, extra) for server, extra in cases]:
            done.result()


async def test_a_failover_client_survives_the_loss_of_its_replica(
    group: ApiServerReplicas, tmp_path: Path
) -> None:
    """Informer, writes and leader election through a kubeconfig naming both replicas; the one in use is
    killed mid-stream: every acknowledged write is seen by the informer exactly once (resumed from its
    resourceVersion on the other replica, no relist), and the leader keeps its lease."""
    first, second = group.servers
    config = load_kubeconfig(group.kubeconfig)
    assert config.all_servers == (first.url, second.url)
    kube = KubeClient(config)
    ns = f"f-{uuid.uuid4().hex[:6]}"
    await kube.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    seen: list[str] = []
    informer = Informer(kube, f"/api/v1/namespaces/{ns}/configmaps")
    informer.add_handler(on_add=lambda o: seen.append(o["metadata"]["name"]))
    elector = LeaderElector(kube, LeaderElection(f"multi-{ns}", namespace=ns), identity="me")
    run = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 10)
        await asyncio.wait_for(elector.acquire(), 10)
        holding = asyncio.create_task(elector.hold())
        acked = []
        for i in range(40):
            if i == 15:
                await asyncio.to_thread(first.kill)  # its watch breaks, its connections die
            body = {"metadata": {"name": f"c{i:02d}"}}
            out = await kube.create(f"/api/v1/namespaces/{ns}/configmaps", body)
            acked.append(out["metadata"]["name"])
        assert kube.server == second.url
        deadline = time.monotonic() + 20
        while len(seen) < len(acked) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert seen == acked  # each once, in order
        assert informer.lists == 1
        # The leader kept renewing through the survivor for longer than the lease lasts.
        await asyncio.sleep(LeaderElection("x").lease_duration + 2)
        assert not holding.done()
        lease = await kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/multi-{ns}")
        assert lease["spec"]["holderIdentity"] == "me"
        holding.cancel()
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        await kube.close()
        await asyncio.to_thread(first.start)


async def test_a_client_learns_the_replicas_from_the_kubernetes_endpoints(group: ApiServerReplicas) -> None:
    config = load_kubeconfig(group.servers[0].kubeconfig)  # names one server, as an in-cluster config does
    assert config.all_servers == (group.servers[0].url,)
    kube = KubeClient(config)
    try:
        assert await kube.discover_replicas() == tuple(group.urls)
    finally:
        await kube.close()


def test_replicas_share_the_ca_and_service_account_keys(group: ApiServerReplicas) -> None:
    """A token one replica issues authenticates at the other (one sa.key), and each replica's serving
    certificate is from the one CA and names its own address."""
    first, second = group.servers
    v1 = core(first)
    name = f"robot-{uuid.uuid4().hex[:6]}"
    v1.create_namespaced_service_account(
        "default", client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
    )
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    token = v1.create_namespaced_service_account_token(name, "default", request).status.token
    configuration = client.Configuration()
    configuration.host = second.url  # https://127.0.0.2:PORT: verified against the shared CA
    configuration.ssl_ca_cert = str(second.ca_cert)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    with client.ApiClient(configuration) as api:
        review = client.AuthenticationV1Api(api).create_self_subject_review(client.V1SelfSubjectReview())
    assert review.status.user_info.username == f"system:serviceaccount:default:{name}"
    assert first.ca_cert.read_bytes() == second.ca_cert.read_bytes()


def test_protobuf_written_through_one_replica_is_read_and_watched_in_protobuf_through_the_other(
    group: ApiServerReplicas,
) -> None:
    """Upstream's components write protobuf to whichever replica their connection reached: a pod POSTed in
    protobuf through replica A is read back in protobuf through replica B, and B's protobuf watch carries it."""
    a, b = Http(group.servers[0]), Http(group.servers[1])
    name = f"pb-{uuid.uuid4().hex[:6]}"
    status, _, listed = b.call("GET", "/api/v1/namespaces/default/pods?limit=1")
    assert status == 200
    since = listed["metadata"]["resourceVersion"]
    status, content_type, made = a.call("POST", "/api/v1/namespaces/default/pods", _pod(name))
    assert status == 201 and content_type.startswith("application/vnd.kubernetes.protobuf"), made
    got = wait_for(
        lambda: (r := b.call("GET", f"/api/v1/namespaces/default/pods/{name}"))[0] == 200 and r,
        30,
        what="the pod through replica B",
    )
    assert got[1].startswith("application/vnd.kubernetes.protobuf")
    assert got[2]["spec"]["containers"][0]["livenessProbe"] == made["spec"]["containers"][0]["livenessProbe"]
    assert got[2]["metadata"]["uid"] == made["metadata"]["uid"]
    response = b.open(
        "GET", f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={since}&timeoutSeconds=5"
    )
    assert response.headers["Content-Type"].startswith("application/vnd.kubernetes.protobuf;stream=watch")
    events = []
    while not any(obj["metadata"]["name"] == name for _, obj in events):
        head = response.read(4)
        if len(head) < 4:
            break  # the watch's timeout ended it
        frame = dict((n, v) for n, _, v in wire.fields(response.read(int.from_bytes(head, "big"))))
        raw = dict((n, v) for n, _, v in wire.fields(frame[2]))[1]
        events.append((frame[1].decode(), codec.decode_envelope(raw)[0]))
    assert ("ADDED", name) in [(kind, obj["metadata"]["name"]) for kind, obj in events], events
    a.call("DELETE", f"/api/v1/namespaces/default/pods/{name}")
