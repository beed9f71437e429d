"""`pykubelet migrate-store --from sqlite:PATH --to etcd:URL`: a cluster written on SQLite, copied with the
real command into a real etcd, served again by an API server on etcd: the same objects (names, UIDs,
creation timestamps, contents) in the same resourceVersion order; every old resourceVersion answered 410
Gone (watches relist, as after upstream's etcd restore); an etcd that already holds a cluster refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from controlplane.storage.interface import KeyValue
from controlplane.storage.migrate import in_write_order
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.etcd import Etcd

pytestmark = pytest.mark.integration  # real servers, etcd or processes


def migrate(state_db: Path, etcd: Etcd) -> subprocess.CompletedProcess[str]:
    pki = etcd.pki
    argv = [sys.executable, "-m", "pykubelet", "migrate-store", "--from", f"sqlite:{state_db}", "--to",
            f"etcd:{etcd.url}", "--etcd-cafile", str(pki.ca_cert), "--etcd-certfile", str(pki.client_cert),
            "--etcd-keyfile", str(pki.client_key)]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def snapshot(v1: client.CoreV1Api, ns: str) -> list[tuple[str, str, str, dict | None]]:
    """The namespace's ConfigMaps and Secrets by resourceVersion order: kind/name, uid, created, data."""
    objs = [("cm", o) for o in v1.list_namespaced_config_map(ns).items]
    objs += [("secret", o) for o in v1.list_namespaced_secret(ns).items]
    objs.sort(key=lambda pair: int(pair[1].metadata.resource_version))
    return [
        (f"{kind}/{o.metadata.name}", o.metadata.uid, o.metadata.creation_timestamp.isoformat(), o.data)
        for kind, o in objs
    ]


def test_write_order_is_the_resource_version_order() -> None:
    items = [KeyValue("/b", b"", 7, 1), KeyValue("/a", b"", 9, 2), KeyValue("/c", b"", 3, 3)]
    assert [kv.key for kv in in_write_order(items)] == ["/c", "/b", "/a"]


def test_a_sqlite_cluster_moves_to_etcd_with_its_objects_and_old_versions_are_gone(tmp_path: Path) -> None:
    data = tmp_path / "api"
    ns = "moved"
    with ApiServer(data) as server, server.api_client() as api:
        v1 = client.CoreV1Api(api)
        v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        for i in range(5):
            body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"c{i}"), data={"i": str(i)})
            v1.create_namespaced_config_map(ns, body)
        v1.create_namespaced_secret(
            ns, client.V1Secret(metadata=client.V1ObjectMeta(name="s"), string_data={"k": "v"})
        )
        v1.patch_namespaced_config_map("c1", ns, {"data": {"i": "one"}})  # now newer than the secret
        v1.delete_namespaced_config_map("c3", ns)
        before = snapshot(v1, ns)
        old_rv = v1.list_namespaced_config_map(ns).metadata.resource_version
        uid = v1.read_namespace(ns).metadata.uid
    etcd = Etcd(tmp_path / "etcd")
    etcd.start()
    try:
        done = migrate(data / "state.db", etcd)
        assert done.returncode == 0, done.stderr
        assert "copied" in done.stderr and "410 Gone" in done.stderr
        # The same data dir (its CA and service-account keys) now on etcd.
        with ApiServer(data, etcd=etcd) as server, server.api_client() as api:
            v1 = client.CoreV1Api(api)
            assert v1.read_namespace(ns).metadata.uid == uid
            after = snapshot(v1, ns)
            assert after == before  # same objects, same order
            assert [name for name, *_ in after][-1] == "cm/c1"
            new_rv = int(v1.list_namespaced_config_map(ns).metadata.resource_version)
            assert new_rv > int(old_rv)
            # A client's resourceVersion from the old store is too old: a watch ends with 410, as after an
            # etcd restore with --mark-compacted, and a list at it too.
            with pytest.raises(ApiException) as gone:
                for _ in watch.Watch().stream(
                    v1.list_namespaced_config_map, ns, resource_version=old_rv, timeout_seconds=5
                ):
                    pass
            assert gone.value.status == 410
            with pytest.raises(ApiException) as gone_list:
                v1.list_namespaced_config_map(ns, resource_version=old_rv, resource_version_match="Exact")
            assert gone_list.value.status == 410
            # Writes go on from there.
            v1.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="new")))
            assert snapshot(v1, ns)[-1][0] == "cm/new"
        # A second migration into the same etcd is refused, naming why.
        again = migrate(data / "state.db", etcd)
        assert again.returncode != 0
        assert "etcd already holds" in again.stderr and "/registry/" in again.stderr
    finally:
        etcd.remove()


def test_bad_store_urls_are_refused(tmp_path: Path) -> None:
    for source, target, text in (
        ("sqlite:/nonexistent/state.db", "etcd:https://127.0.0.1:2379", "no such file"),
        (f"mysql:{tmp_path}", "etcd:https://127.0.0.1:2379", "expected sqlite:PATH"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "pykubelet", "migrate-store", "--from", source, "--to", target],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode != 0 and text in proc.stderr, proc.stderr
