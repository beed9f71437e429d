"""kill -9 of the controller manager in the middle of a 50-replica scale-up creates no extra pods: the
replacement starts from what the API holds (level-triggered), and expectations plus the informers'
first list keep it from acting on a stale view."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client

from pykubelet.rig.apiserver import ApiServer
from tests.controllers.test_replicaset_integration import owned, replicaset

pytestmark = pytest.mark.integration


def manager(kubeconfig: Path, log: Path) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "pykubelet",
        "controller-manager",
        "--kubeconfig",
        str(kubeconfig),
        "--controllers",
        "replicaset",
        "--secure-port",
        "0",
        "--leader-elect-lease-duration",
        "3s",
        "--leader-elect-renew-deadline",
        "2s",
        "--leader-elect-retry-period",
        "500ms",
    ]
    return subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


def test_kill_9_during_a_scale_up_creates_no_extra_pods(tmp_path: Path) -> None:
    with ApiServer(tmp_path / "api") as srv, srv.api_client() as api:
        v1, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="crash")))
        first = manager(srv.kubeconfig, tmp_path / "first.log")
        second = None
        try:
            rs = apps.create_namespaced_replica_set("crash", replicaset("web", 50))
            deadline = time.monotonic() + 60
            while len(owned(v1, "crash", rs.metadata.uid)) < 5:  # partway through the slow start
                assert time.monotonic() < deadline, "the scale-up never started"
                time.sleep(0.02)
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
            midway = len(owned(v1, "crash", rs.metadata.uid))
            second = manager(srv.kubeconfig, tmp_path / "second.log")
            deadline = time.monotonic() + 90
            counts = []
            while time.monotonic() < deadline:
                counts.append(len(owned(v1, "crash", rs.metadata.uid)))
                status = apps.read_namespaced_replica_set_status("web", "crash").status
                if counts[-1] == 50 and status is not None and status.replicas == 50:
                    break
                time.sleep(0.1)
            assert counts[-1] == 50, f"never reached 50 pods: {counts[-5:]}"
            # The replacement wrote replicas=50 from its own cache: it has seen all 50 and will not add more.
            assert max(counts) == 50  # never more than asked for, at any sample
            assert midway < 50  # the kill really came in the middle
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
