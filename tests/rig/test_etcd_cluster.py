"""A 3-member etcd cluster under the API server, killed member by member (real etcd processes): one member
lost and writes go on (the store moves to a live member); two lost and writes fail within a bounded
time with etcd's own error passed through as upstream does (`etcdserver: request timed out`, a 500)
while reads of the watch cache keep answering; the members back and everything converges. Also the
cluster's files: one data dir per member, removed with the cluster."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e.waiting import wait_for
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.etcd import EtcdCluster
from tests.etcdmembers import (
    assert_down_left_nothing,
    deployment,
    deployment_ready,
    lose_first_machine,
    read_from_cache,
    stack_down,
    stack_scope,
    stack_up,
)

# Counted as "not yet" while polling: an API error while etcd or a replica is down.
RETRY = (ApiException,)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EtcdCluster, ApiServer]]:
    root = tmp_path_factory.mktemp("etcd-cluster")
    etcd = EtcdCluster(root / "etcd", 3, progress_notify_interval="1s")
    etcd.start()
    server = ApiServer(root / "api", extra_args=etcd.server_args())
    server.start()
    yield etcd, server
    server.stop()
    etcd.remove()
    assert not etcd.running and not (root / "etcd").exists()


def cm(name: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"n": name})


def test_each_member_has_its_own_data_dir_and_ports(cluster) -> None:
    etcd, _ = cluster
    dirs = {m.state_dir / "data" for m in etcd.members}
    assert len(dirs) == 3 and all((d / "member").is_dir() for d in dirs)
    ports = {m.port for m in etcd.members} | {m.peer_port for m in etcd.members}
    assert len(ports) == 6
    assert etcd.server_args()[1] == ",".join(etcd.urls)


def test_one_member_lost_writes_go_on_two_lost_writes_fail_reads_go_on(cluster) -> None:
    etcd, server = cluster
    first, second, third = etcd.members
    etcd.move_leader(third)  # the members killed here are followers (the leader's loss is the next test)
    wait_for(lambda: etcd.leader() is third, timeout=10, interval=0.2, retrying=RETRY)
    with server.api_client() as api:
        v1 = client.CoreV1Api(api)
        ns = "default"
        v1.create_namespaced_config_map(ns, cm(f"before-{uuid.uuid4().hex[:6]}"))
        # The member the server talks to (the first named) dies: every write still succeeds at once.
        first.kill()
        try:
            names = [f"one-down-{i}" for i in range(10)]
            for name in names:
                v1.create_namespaced_config_map(ns, cm(name))
            listed = {c.metadata.name for c in v1.list_namespaced_config_map(ns).items}
            assert set(names) <= listed
            # A second member dies: no quorum. Writes fail, bounded by etcd's own request timeout,
            # with etcd's text as upstream passes it through (a 500 without a reason).
            second.kill()
            started = time.monotonic()
            with pytest.raises(ApiException) as err:
                v1.create_namespaced_config_map(ns, cm("no-quorum"))
            took = time.monotonic() - started
            assert err.value.status == 500 and took < 15, (took, err.value.body)
            status = json.loads(err.value.body)
            assert status["message"].startswith("etcdserver: ") and "reason" not in status, status
            # Reads served by the watch cache keep answering (resourceVersion=0, as upstream's cache
            # serves them; a read without one is a consistent read that needs quorum, as upstream's).
            got = read_from_cache(v1, "one-down-3", ns)
            assert got.data == {"n": "one-down-3"}
            cached = v1.list_namespaced_config_map(ns, resource_version="0")
            assert set(names) <= {c.metadata.name for c in cached.items}
        finally:
            etcd.start()  # both members come back
        # Converged: writes go through again and are seen at once (the cache's watch resumed).
        wait_for(
            lambda: v1.create_namespaced_config_map(ns, cm("after")),
            timeout=30.0,
            interval=0.2,
            retrying=RETRY,
        )
        assert v1.read_namespaced_config_map("after", ns).data == {"n": "after"}
        assert all(m.running for m in (first, second, third))


def write_through_an_election(v1: client.CoreV1Api, name: str, bound: float = 15.0) -> list[str]:
    """Create `name`, retrying while etcd elects a leader; returns the errors seen on the way (etcd's
    own texts, passed through as 500s)."""
    errors = []
    deadline = time.monotonic() + bound
    while True:
        try:
            v1.create_namespaced_config_map("default", cm(name))
            return errors
        except ApiException as err:
            if err.status == 409:  # an earlier attempt that timed out was applied after all
                return errors
            assert err.status == 500 and time.monotonic() < deadline, err.body
            errors.append(json.loads(err.body)["message"])


def test_the_leader_lost_writes_resume_after_the_election(cluster) -> None:
    etcd, server = cluster
    with server.api_client() as api:
        v1 = client.CoreV1Api(api)
        for round_ in range(len(etcd.members)):  # a rolling restart: every member in turn, the leader first
            leader = wait_for(etcd.leader, timeout=10, interval=0.2, retrying=RETRY)
            leader.kill()
            started = time.monotonic()
            errors = write_through_an_election(v1, f"leader-lost-{round_}")
            assert time.monotonic() - started < 15
            assert all(e.startswith("etcdserver: ") for e in errors), errors
            leader.start()
        listed = {c.metadata.name for c in v1.list_namespaced_config_map("default").items}
        assert {f"leader-lost-{i}" for i in range(3)} <= listed


def test_cluster_files_are_one_folder(tmp_path: Path) -> None:
    etcd = EtcdCluster(tmp_path / "etcd", 3)
    etcd.start()
    try:
        names = sorted(p.name for p in (tmp_path / "etcd").iterdir())
        assert names == ["m0", "m1", "m2", "peers.json", "pki"]
    finally:
        etcd.remove()
    assert not (tmp_path / "etcd").exists() and not etcd.running


def test_a_stopped_cluster_starts_again_on_its_data(tmp_path: Path) -> None:
    """etcd keeps its members' peer URLs in their data: a cluster started again on the same folder uses
    the peer ports of its first start (peers.json), meets its quorum, and has its keys."""
    import base64

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    first = EtcdCluster(tmp_path / "etcd", 3)
    first.start()
    try:
        first._gateway(first.members[0], "/v3/kv/put", {"key": b64(b"kept"), "value": b64(b"yes")})
    finally:
        first.stop()
    again = EtcdCluster(tmp_path / "etcd", 3)
    assert [m.peer_port for m in again.members] == [m.peer_port for m in first.members]
    again.start()
    try:
        got = again._gateway(again.members[2], "/v3/kv/range", {"key": b64(b"kept")})
        assert [base64.b64decode(kv["value"]) for kv in got["kvs"]] == [b"yes"]  # type: ignore[index]
    finally:
        again.remove()


@pytest.mark.integration
def test_up_with_two_api_servers_on_three_etcd_members_survives_losing_one_of_each(tmp_path: Path) -> None:
    """`pykubelet up --store etcd --etcd-members 3 --apiservers 2`: an API server (with its scheduler and
    controller manager) and an etcd member die; a Deployment scaled during the outage converges through
    the survivors (controller manager and scheduler take the leases over, the agent fails over), the node
    stays Ready; `pykubelet down` then leaves nothing."""
    from kubernetes import config as kconfig

    from pykubelet.rig.netlease import lease_network

    state = tmp_path / "state"
    with lease_network("m") as net:
        scope = stack_scope(state, net)
        up, record = stack_up(state, net, "ha-node", apiservers=2, timeout=300)
        try:
            assert up.returncode == 0, up.stderr
            assert record is not None
            assert {"etcd-m0", "etcd-m1", "etcd-m2", "apiserver", "apiserver-1"} <= set(record.pids)
            second = state / "apiserver" / "replica-1" / "admin.kubeconfig"
            apps = client.AppsV1Api(kconfig.new_client_from_config(config_file=str(second)))
            core = client.CoreV1Api(apps.api_client)
            eps = core.read_namespaced_endpoints("kubernetes", "default")
            assert [a.ip for a in eps.subsets[0].addresses] == ["127.0.0.1", "127.0.0.2"]
            apps.create_namespaced_deployment("default", deployment("ha", 1))

            def ready(n: int) -> bool:
                return deployment_ready(apps, "ha", n)

            wait_for(lambda: ready(1), timeout=90, interval=0.2, retrying=RETRY)
            # The first API server's machine is gone: it, its scheduler and its controller manager; and
            # one etcd member with it.
            lose_first_machine(record)
            # (If that member led, writes fail with etcd's own error until the others have elected a
            # leader, as upstream's do: the scale is retried as a user would.)
            wait_for(
                lambda: apps.patch_namespaced_deployment_scale("ha", "default", {"spec": {"replicas": 3}}),
                timeout=20,
                interval=0.2,
                retrying=RETRY,
            )
            wait_for(lambda: ready(3), timeout=120, interval=1.0, retrying=RETRY)
            node = core.read_node("ha-node")
            assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
            wait_for(
                lambda: (
                    [
                        a.ip
                        for a in core.read_namespaced_endpoints("kubernetes", "default").subsets[0].addresses
                    ]
                    == ["127.0.0.2"]
                ),
                timeout=40,
                interval=1.0,
                retrying=RETRY,
            )
        finally:
            down = stack_down(state)
        assert_down_left_nothing(down, record, scope)


@pytest.mark.integration
def test_a_stack_started_on_a_migrated_store_serves_the_same_objects(tmp_path: Path) -> None:
    """A cluster written on SQLite, moved with `pykubelet migrate-store` into the etcd a stack then starts
    on (the same API server data dir: its CA and keys): the stack serves the same objects (UIDs, creation
    times, contents) and runs the migrated Deployment's pod on its node."""
    import subprocess
    import sys

    from kubernetes import config as kconfig

    from pykubelet.rig.etcd import Etcd
    from pykubelet.rig.netlease import lease_network
    from pykubelet.rig.stack import Stack, StackConfig

    state = tmp_path / "state"
    with ApiServer(state / "apiserver") as server, server.api_client() as api:
        v1 = client.CoreV1Api(api)
        v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="kept")))
        for i in range(3):
            v1.create_namespaced_config_map("kept", cm(f"c{i}"))
        client.AppsV1Api(api).create_namespaced_deployment("kept", deployment("moved", 1))
        before = {
            c.metadata.name: (c.metadata.uid, c.metadata.creation_timestamp, c.data)
            for c in v1.list_namespaced_config_map("kept").items
        }
    etcd = Etcd(state / "etcd")  # where the stack's etcd lives; its data and PKI are kept on restart
    etcd.start()
    try:
        pki = etcd.pki
        argv = [sys.executable, "-m", "pykubelet", "migrate-store", "--from", f"sqlite:{state / 'apiserver' / 'state.db'}",
                "--to", f"etcd:{etcd.url}", "--etcd-cafile", str(pki.ca_cert), "--etcd-certfile", str(pki.client_cert),
                "--etcd-keyfile", str(pki.client_key)]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
    finally:
        etcd.stop()
    with lease_network("g") as net:
        stack = Stack(
            StackConfig(
                state_dir=state,
                node_name="moved-node",
                pod_cidr=net.pod_cidr,
                bridge=net.bridge,
                store="etcd",
            )
        )
        try:
            stack.start()
            api = kconfig.new_client_from_config(config_file=str(stack.kubeconfig))
            v1, apps = client.CoreV1Api(api), client.AppsV1Api(api)
            after = {
                c.metadata.name: (c.metadata.uid, c.metadata.creation_timestamp, c.data)
                for c in v1.list_namespaced_config_map("kept").items
            }
            assert {k: v for k, v in after.items() if k != "kube-root-ca.crt"} == {
                k: v for k, v in before.items() if k != "kube-root-ca.crt"
            }

            def running() -> bool:
                got = apps.read_namespaced_deployment("moved", "kept").status
                return got is not None and (got.ready_replicas or 0) == 1

            wait_for(running, timeout=120, interval=1.0, retrying=RETRY)
        finally:
            problems = stack.stop()
        assert not problems, problems
