"""`pykubelet simulate` against the real API server when it refuses or disappears (issue 36's bad input,
beside test_simulate_refused.py's 429s from a fake): an identity RBAC does not allow is refused with 403s,
which the simulation reports and backs off from (its request rate counted from the server's own audit log),
and it registers its nodes once a binding allows it; an API server killed under a running simulation
costs it no busy loop while it is down, and its nodes renew their Leases again once it is back."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest
from kubernetes import client

from e2e.simulator import Simulator, node_ready, simulation_leftovers
from e2e.waiting import wait_for
from pykubelet.rig.apiserver import ApiServer

pytestmark = pytest.mark.integration

POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
"""
USER = "nodesim-refused"
NODES = 4


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    folder = tmp_path_factory.mktemp("nodesim-refused")
    (folder / "policy.yaml").write_text(POLICY)
    audit = [
        "--audit-policy-file",
        str(folder / "policy.yaml"),
        "--audit-log-path",
        str(folder / "audit.log"),
    ]
    with ApiServer(folder / "api", extra_args=audit) as server:
        yield server


def audit_log(server: ApiServer) -> Path:
    return server.data_dir.parent / "audit.log"


def calls_by(server: ApiServer, user: str, start: datetime, end: datetime) -> list[int]:
    """The answer codes of `user`'s calls the server received between `start` and `end` (wall clock)."""
    codes = []
    for line in audit_log(server).read_text().splitlines():
        event = json.loads(line)
        if event["user"].get("username") != user or event["stage"] != "ResponseComplete":
            continue
        received = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
        if start <= received < end:
            codes.append(event["responseStatus"]["code"])
    return codes


def ready(v1: client.CoreV1Api, name: str) -> bool:
    return node_ready(v1.read_node(name))


def test_refused_by_rbac_it_backs_off_reports_and_registers_once_allowed(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    kubeconfig = apiserver.client_kubeconfig(USER, (), tmp_path / "sim.kubeconfig")
    prefix = "rbac-"
    sim = Simulator(kubeconfig, tmp_path / "simulate.log", f"--nodes={NODES}", f"--name-prefix={prefix}")
    with apiserver.api_client() as api:
        v1, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
        try:
            refused = f'nodes is forbidden: User "{USER}" cannot create resource "nodes"'
            wait_for(lambda: refused in sim.output(), 30, what="the 403 reported in simulate's output")
            assert "registration failed, retrying in" in sim.output()
            # Every node is refused and retries: count its calls in the server's own log over 10 s.
            # The 10 s counted are the server's, from now on: they are over once its log holds a refused
            # call received after them, and then it holds every call of them (it is written in order).
            start = datetime.now(UTC)
            end = start + timedelta(seconds=10)
            far = datetime(9999, 1, 1, tzinfo=UTC)
            wait_for(
                lambda: calls_by(apiserver, USER, end, far), 30, what="a refused call after the 10 s counted"
            )
            codes = calls_by(apiserver, USER, start, end)
            assert set(codes) == {403}, codes
            # Back-off from 0.2 s doubling to 7 s (+ up to 20 % jitter): after its first refusal a node
            # tries at most 5 times in 10 s, and at least once in any 8.4 s; a retry without back-off
            # would be hundreds a second.
            assert len(codes) <= NODES * 5, f"{len(codes)} calls in 10 s from {NODES} refused nodes"
            assert len(codes) >= NODES, f"only {len(codes)} calls in 10 s: the simulation stopped trying"
            assert sim.proc.poll() is None, sim.output()

            binding = client.V1ClusterRoleBinding(
                metadata=client.V1ObjectMeta(name=USER),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
                ),
                subjects=[
                    client.RbacV1Subject(kind="User", name=USER, api_group="rbac.authorization.k8s.io")
                ],
            )
            rbac.create_cluster_role_binding(binding)
            names = [f"{prefix}{i}" for i in range(NODES)]
            wait_for(
                lambda: all(ready(v1, n) for n in names),
                30,
                what="every node registered and Ready once allowed",
                retrying=(client.ApiException,),
            )
        finally:
            code = sim.stop()
            rbac.delete_cluster_role_binding(USER)
        assert code == 0, sim.output()
        assert not simulation_leftovers(v1, prefix)


def test_a_killed_api_server_costs_no_busy_loop_and_leases_renew_once_it_is_back(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    prefix = "dying-"
    names = [f"{prefix}{i}" for i in range(NODES)]
    sim = Simulator(
        apiserver.kubeconfig,
        tmp_path / "simulate.log",
        f"--nodes={NODES}",
        f"--name-prefix={prefix}",
        "--node-lease-duration-seconds=4",  # renewed every second
    )
    try:
        with apiserver.api_client() as api:
            v1 = client.CoreV1Api(api)
            wait_for(
                lambda: all(ready(v1, n) for n in names),
                60,
                what="the nodes Ready",
                retrying=(client.ApiException,),
            )
        apiserver.kill()
        down = psutil.Process(sim.proc.pid)
        before = sum(down.cpu_times()[:2])
        time.sleep(6)  # the stretch the server is down for, whose CPU is measured
        spent = sum(down.cpu_times()[:2]) - before
        assert sim.proc.poll() is None, sim.output()
        assert spent < 1.5, f"simulate used {spent:.2f} CPU s in 6 s against a dead server: a busy loop"
        assert "lease write failed, retrying with back-off" in sim.output()
        back = datetime.now(UTC)
        apiserver.start()
        with apiserver.api_client() as api:
            v1 = client.CoreV1Api(api)
            leases = client.CoordinationV1Api(api)

            def renewed_since_back() -> bool:
                times = [leases.read_namespaced_lease(n, "kube-node-lease").spec.renew_time for n in names]
                return all(t > back for t in times)

            wait_for(
                renewed_since_back,
                30,
                what="every Lease renewed after the restart",
                retrying=(client.ApiException,),
            )
            wait_for(lambda: "lease writes succeed again" in sim.output(), 10, what="the recovery reported")
            code = sim.stop()
            assert code == 0, sim.output()
            assert not simulation_leftovers(v1, prefix)
    finally:
        if sim.proc.poll() is None:
            sim.stop()
