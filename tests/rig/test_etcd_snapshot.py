"""`pykubelet etcd-snapshot save|list|restore` on a real API server (with its controllers) on etcd and on
SQLite (one etcd member and three), laid out as `pykubelet up` lays out a stack: a snapshot is taken while it runs, a namespace is
deleted, a restore is refused while the control plane runs and for a truncated snapshot or one of
another cluster (nothing changed), the control plane stops, the restore brings the namespace back, and
the resourceVersions go on upward from where they were: a watch from before the restore is told 410."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e.waiting import wait_for
from pykubelet.rig.apiserver import ApiServer, api_client
from pykubelet.rig.etcd import Etcd, EtcdCluster
from tests.rig.stacks import run_pykubelet

pytestmark = pytest.mark.integration


def snapshot(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_pykubelet("etcd-snapshot", *args, "--state-dir", str(state), timeout=300)


class ControlPlane:
    """The stack's store and API server in `state` (state/etcd, state/apiserver), stopped and started."""

    def __init__(self, state: Path, store: str) -> None:
        self.state, self.store = state, store
        self.etcd: Etcd | EtcdCluster | None = None
        self.server: ApiServer | None = None

    def start(self) -> client.CoreV1Api:
        if self.store == "etcd-3":  # three members, as `up --etcd-members 3` lays them out
            self.etcd = EtcdCluster(self.state / "etcd", 3)
        else:
            self.etcd = Etcd(self.state / "etcd") if self.store == "etcd" else None
        if self.etcd is not None:
            self.etcd.start()
        self.server = ApiServer(self.state / "apiserver", controllers=True, etcd=self.etcd).start()
        return client.CoreV1Api(api_client(self.server.kubeconfig))

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self.etcd is not None:
            self.etcd.stop()


def _gone(core: client.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespace(name)
    except ApiException as err:
        return err.status == 404
    return False


def _watch_from(core: client.CoreV1Api, rv: str) -> int:
    """The code a namespace watch from `rv` ends with: the HTTP status, or an ERROR event's code."""
    api = core.api_client
    params = api.param_serialize(
        "GET", "/api/v1/namespaces", query_params=[("watch", "true"), ("resourceVersion", rv),
                                                   ("timeoutSeconds", "2")],
        header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
    )  # fmt: skip
    response = api.call_api(*params, _request_timeout=10)
    response.read()
    if response.status != 200:
        return response.status
    for line in (response.data or b"").decode().splitlines():
        event = json.loads(line)
        if event["type"] == "ERROR":
            return int(event["object"]["code"])
    return 200


@pytest.mark.parametrize("store", ["etcd", "etcd-3", "sqlite"])
def test_snapshot_delete_restore_brings_the_namespace_back(tmp_path: Path, store: str) -> None:
    state = tmp_path / "s"
    plane = ControlPlane(state, store)
    try:
        core = plane.start()
        core.create_namespace({"metadata": {"name": "keep"}})
        saved = snapshot(state, "save", "--name", "before")
        assert saved.returncode == 0, saved.stderr
        assert "Snapshot before saved" in saved.stdout
        listed = snapshot(state, "list")
        assert listed.returncode == 0 and "before" in listed.stdout
        later = core.create_namespace({"metadata": {"name": "later"}}).metadata.resource_version
        core.delete_namespace("keep")
        wait_for(lambda: _gone(core, "keep"), timeout=60, interval=0.5)
        highest = int(core.list_namespace().metadata.resource_version)
        assert highest >= int(later)

        refused = snapshot(state, "restore", "before")
        assert refused.returncode == 1
        assert "is running" in refused.stderr and "pykubelet down --state-dir" in refused.stderr
        plane.stop()

        snapshots = state / "snapshots"
        truncated = snapshots / "truncated"
        truncated.write_bytes((snapshots / "before").read_bytes()[:4096])
        shutil.copyfile(snapshots / "before.json", snapshots / "truncated.json")
        bad = snapshot(state, "restore", "truncated")
        assert bad.returncode == 1 and "damaged or truncated" in bad.stderr
        foreign = snapshots / "foreign"
        shutil.copyfile(snapshots / "before", foreign)
        meta = json.loads((snapshots / "before.json").read_text())
        (snapshots / "foreign.json").write_text(json.dumps({**meta, "cluster": "0" * 64}))
        other = snapshot(state, "restore", "foreign")
        assert other.returncode == 1 and "another cluster" in other.stderr

        # Nothing changed by the refusals: the cluster starts as it was stopped.
        core = plane.start()
        assert _gone(core, "keep") and core.read_namespace("later")
        plane.stop()

        restored = snapshot(state, "restore", "before")
        assert restored.returncode == 0, restored.stderr
        core = plane.start()
        assert core.read_namespace("keep").status.phase == "Active"
        assert _gone(core, "later")
        fresh = core.create_namespace({"metadata": {"name": "after"}}).metadata.resource_version
        assert int(fresh) > highest
        assert _watch_from(core, str(highest)) == 410
    finally:
        plane.stop()
