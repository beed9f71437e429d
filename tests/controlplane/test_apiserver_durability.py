"""Restart and kill -9 of the real server lose no acknowledged write."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from pykubelet.rig.apiserver import ApiServer, api_client

pytestmark = pytest.mark.integration


def _writer(kubeconfig: Path, prefix: str, acked: dict[str, str], stop: threading.Event) -> None:
    """Create and then update objects as fast as possible; remember every acknowledged version."""
    with api_client(kubeconfig) as api:
        v1 = client.CoreV1Api(api)
        i = 0
        while not stop.is_set():
            name = f"{prefix}-{i}"
            try:
                cm = v1.create_namespaced_config_map(
                    "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"v": "0"})
                )
                acked[name] = "0"
                v1.patch_namespaced_config_map(name, "default", {"data": {"v": "1"}})
                acked[name] = "1"
                assert cm.metadata.resource_version
            except Exception:  # the server was killed under us: whatever was not acknowledged may be lost
                return
            i += 1


def test_kill_9_and_restart_lose_no_acknowledged_write(tmp_path: Path) -> None:
    server = ApiServer(tmp_path / "dur")
    server.start()
    try:
        acked: dict[str, str] = {}
        stop = threading.Event()
        threads = [
            threading.Thread(target=_writer, args=(server.kubeconfig, f"w{t}", acked, stop)) for t in range(4)
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while len(acked) < 150 and time.monotonic() < deadline:
            time.sleep(0.05)
        server.kill()  # SIGKILL while the writers are mid-flight
        stop.set()
        for t in threads:
            t.join(10)
        snapshot = dict(acked)
        assert len(snapshot) >= 150
        server.start()
        with api_client(server.kubeconfig) as api:
            v1 = client.CoreV1Api(api)
            stored = {cm.metadata.name: cm for cm in v1.list_namespaced_config_map("default").items}
            for name, version in snapshot.items():
                assert name in stored, f"acknowledged create of {name} was lost"
                assert stored[name].data["v"] >= version, f"acknowledged update of {name} was lost"
            top = max(int(cm.metadata.resource_version) for cm in stored.values())
            after = v1.create_namespaced_config_map(
                "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="after-kill"))
            )
            assert int(after.metadata.resource_version) > top, "revisions never go backwards"
        # A clean restart keeps everything too, and the CA and kubeconfig stay the same.
        ca_before = server.ca_cert.read_bytes()
        server.stop()
        server.start()
        assert server.ca_cert.read_bytes() == ca_before
        with api_client(server.kubeconfig) as api:
            v1 = client.CoreV1Api(api)
            assert v1.read_namespaced_config_map("after-kill", "default").metadata.name == "after-kill"
            with pytest.raises(ApiException) as err:
                v1.read_namespaced_config_map("never-written", "default")
            assert err.value.status == 404
    finally:
        server.stop()
    assert not server.running
