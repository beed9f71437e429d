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

from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.etcd import EtcdCluster


def eventually(check, timeout: float = 30.0, interval: float = 0.2):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
            if result:
                return result
        except ApiException:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s: {check}")
        time.sleep(interval)


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
    eventually(lambda: etcd.leader() is third, timeout=10)
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
            # Reads served by the watch cache keep answering.
            got = v1.read_namespaced_config_map("one-down-3", ns)
            assert got.data == {"n": "one-down-3"}
            cached = v1.list_namespaced_config_map(ns, resource_version="0")
            assert set(names) <= {c.metadata.name for c in cached.items}
        finally:
            etcd.start()  # both members come back
        # Converged: writes go through again and are seen at once (the cache's watch resumed).
        eventually(lambda: v1.create_namespaced_config_map(ns, cm("after")))
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
            leader = eventually(etcd.leader, timeout=10)
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
        assert sorted(p.name for p in (tmp_path / "etcd").iterdir()) == ["m0", "m1", "m2", "pki"]
    finally:
        etcd.remove()
    assert not (tmp_path / "etcd").exists() and not etcd.running
