"""The API server goes away and comes back (same data, same port): the scheduler's watches reconnect
and it goes on scheduling, without being restarted itself."""

from __future__ import annotations

import time

import pytest
from kubernetes import client, config

from pykubelet.rig.apiserver import ApiServer
from tests.scheduler.conftest import Cluster, SchedulerProcess, scheduler_config

pytestmark = pytest.mark.integration


def test_scheduler_survives_an_apiserver_restart(tmp_path):
    server = ApiServer(tmp_path / "api")
    server.start()
    sched = None
    try:
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(server.kubeconfig), client_configuration=cfg)
        with client.ApiClient(cfg) as api:
            v1 = client.CoreV1Api(api)
            v1.create_namespace({"metadata": {"name": "restart"}})
            cluster = Cluster(v1, "restart")
            node = cluster.add_node("n")
            sched = SchedulerProcess(
                server.scheduler_kubeconfig,
                tmp_path,
                {**scheduler_config(), "leaderElection": {"leaderElect": False}},
            )
            cluster.create(cluster.pod("before"))
            assert cluster.wait_bound("before") == node

            server.kill()  # a crash, not a clean stop
            time.sleep(1.0)
            server.start()
            cluster.create(cluster.pod("after"))
            assert cluster.wait_bound("after", timeout=45) == node
            assert sched.process.poll() is None  # it rode it out; nobody restarted it
            assert "watch failed" in sched.log()  # the watches really broke and were re-established
    finally:
        if sched is not None:
            code = sched.stop()
            assert code == 0, sched.log()[-3000:]
        server.stop()
