"""`pykubelet server` runs the scheduler as its child: pods get bound with no other component, and the
child never outlives the server, even when the server is killed with SIGKILL."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
from kubernetes import client

from e2e.waiting import wait_for
from pykubelet.rig.apiserver import ApiServer, api_client

pytestmark = pytest.mark.integration


def _scheduler_children(server: ApiServer) -> list[psutil.Process]:
    assert server.pid is not None
    return [p for p in psutil.Process(server.pid).children() if "scheduler" in " ".join(p.cmdline())]


def test_embedded_scheduler_binds_and_dies_with_the_server(tmp_path: Path) -> None:
    server = ApiServer(tmp_path / "api", scheduler=True).start()
    try:
        children = wait_for(lambda: _scheduler_children(server), timeout=60.0, interval=0.2)
        with api_client(server.kubeconfig) as api:
            v1 = client.CoreV1Api(api)
            v1.create_node(
                {
                    "metadata": {"name": "embedded-n1"},
                    "status": {
                        "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                        "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
            )
            v1.create_namespaced_pod(
                "default",
                {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
            )
            node = wait_for(
                lambda: v1.read_namespaced_pod("p", "default").spec.node_name,
                timeout=60.0,
                interval=0.2,
            )
            assert node == "embedded-n1"
    finally:
        server.kill()
    gone, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, f"scheduler outlived a killed server: {alive}"
