"""`pykubelet simulate` against the real API server with its scheduler and controllers: simulated nodes
register Ready and renew their Leases at the configured cadence, a Deployment's and a Job's pods go
through their lives on them, deletions are honoured, a node that is not the simulation's is left alone,
and nothing the simulation made is left after it stops."""

from __future__ import annotations

import ipaddress
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from e2e.manifests import deployment
from e2e.simulator import Simulator, node_ready, simulation_leftovers
from e2e.waiting import wait_for
from pykubelet.rig.apiserver import ApiServer

pytestmark = pytest.mark.integration

PREFIX = "nsim-"
NODES = [f"{PREFIX}{i}" for i in range(3)]
LEASE_SECONDS = 4  # renewed every second
# The simulation's stage file: pods labelled nsim-stage=fails run 200 ms and exit 1 (phase Failed).
STAGES = """
apiVersion: nodesim.pykubelet.io/v1alpha1
kind: Stage
metadata: {name: fails}
spec:
  selector: {matchLabels: {nsim-stage: fails}}
  runFor: 200ms
  phase: Failed
"""


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("nodesim-api"), scheduler=True, controllers=True) as server:
        yield server


@pytest.fixture(scope="module")
def v1(apiserver: ApiServer) -> Iterator[client.CoreV1Api]:
    with apiserver.api_client() as api:
        yield client.CoreV1Api(api)


@pytest.fixture(scope="module")
def simulation(
    apiserver: ApiServer, v1: client.CoreV1Api, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Simulator]:
    folder = tmp_path_factory.mktemp("nodesim")
    (folder / "stages.yaml").write_text(STAGES)
    sim = Simulator(
        apiserver.kubeconfig,
        folder / "simulate.log",
        f"--stage-file={folder / 'stages.yaml'}",
        "--nodes=3",
        f"--name-prefix={PREFIX}",
        "--node-labels=topology.kubernetes.io/zone=sim-a",
        "--start-delay=300ms",
        "--job-duration=500ms",
        f"--node-lease-duration-seconds={LEASE_SECONDS}",
    )
    try:
        wait_for(
            lambda: all(_ready(v1, n) for n in NODES),
            60,
            what="the simulated nodes Ready",
            retrying=(client.ApiException,),
        )
        yield sim
    finally:
        code = sim.stop()
    assert code == 0, sim.output()
    left = simulation_leftovers(v1, PREFIX)
    assert not left, f"left after simulate stopped: {left}"


def _ready(v1: client.CoreV1Api, name: str) -> bool:
    return node_ready(v1.read_node(name))


@pytest.fixture
def namespace(v1: client.CoreV1Api) -> Iterator[str]:
    name = f"nsim-{uuid.uuid4().hex[:6]}"
    v1.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: v1.list_namespaced_service_account(name).items, 30, what="the default ServiceAccount")
    yield name
    v1.delete_namespace(name)


def test_nodes_register_ready_and_renew_their_leases_at_the_configured_cadence(
    simulation: Simulator, v1: client.CoreV1Api
) -> None:
    node = v1.read_node(NODES[1])
    assert node.metadata.labels["topology.kubernetes.io/zone"] == "sim-a"
    assert node.status.allocatable["pods"] == "110"
    assert node.spec.pod_cidr == "100.64.1.0/24"
    leases = client.CoordinationV1Api(v1.api_client)
    stamps: list[datetime] = []
    stream = watch.Watch()
    for event in stream.stream(
        leases.list_namespaced_lease,
        "kube-node-lease",
        field_selector=f"metadata.name={NODES[0]}",
        timeout_seconds=10,
    ):
        lease = event["object"]
        assert lease.spec.lease_duration_seconds == LEASE_SECONDS
        assert lease.metadata.owner_references[0].uid == v1.read_node(NODES[0]).metadata.uid
        if not stamps or lease.spec.renew_time != stamps[-1]:
            stamps.append(lease.spec.renew_time)
        if len(stamps) >= 5:
            stream.stop()
    assert len(stamps) >= 5, f"only {len(stamps)} renewals seen in 10 s: {simulation.output()}"
    gaps = sorted((b - a).total_seconds() for a, b in zip(stamps, stamps[1:], strict=False))
    median = gaps[len(gaps) // 2]
    assert 0.5 <= median <= 2.0, f"renewals every {gaps} s, configured every {LEASE_SECONDS / 4} s"


def test_a_deployments_pods_run_and_are_ready_on_the_simulated_nodes(
    simulation: Simulator, v1: client.CoreV1Api, namespace: str
) -> None:
    apps = client.AppsV1Api(v1.api_client)
    apps.create_namespaced_deployment(
        namespace, deployment("web", [{"name": "c", "image": "busybox"}], replicas=6)
    )
    wait_for(
        lambda: (
            (
                apps.read_namespaced_deployment("web", namespace).status or client.V1DeploymentStatus()
            ).available_replicas
            == 6
        ),
        60,
        what="6 available replicas",
    )
    pods = v1.list_namespaced_pod(namespace).items
    assert len(pods) == 6
    for pod in pods:
        index = NODES.index(pod.spec.node_name)
        assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(f"100.64.{index}.0/24")
        assert pod.status.host_ip == f"198.18.0.{index + 1}"
        (status,) = pod.status.container_statuses
        assert status.ready and status.restart_count == 0 and status.state.running is not None
    assert len({p.status.pod_ip for p in pods}) == 6
    assert len({p.spec.node_name for p in pods}) >= 2


def test_a_jobs_pods_complete(simulation: Simulator, v1: client.CoreV1Api, namespace: str) -> None:
    batch = client.BatchV1Api(v1.api_client)
    batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": "once"},
            "spec": {
                "completions": 2,
                "parallelism": 2,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
                    }
                },
            },
        },
    )

    def complete() -> bool:
        status = batch.read_namespaced_job("once", namespace).status or client.V1JobStatus()
        return any(c.type == "Complete" and c.status == "True" for c in status.conditions or [])

    wait_for(complete, 60, what="the Job Complete")
    phases = [p.status.phase for p in v1.list_namespaced_pod(namespace).items]
    assert phases == ["Succeeded", "Succeeded"]


def _pod(name: str, annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"nodeName": NODES[2], "containers": [{"name": "c", "image": "busybox"}], **spec},
    }


def test_a_crashing_container_backs_off_with_its_exit_shown(
    simulation: Simulator, v1: client.CoreV1Api, namespace: str
) -> None:
    annotations = {"nodesim.pykubelet.io/run-for": "200ms", "nodesim.pykubelet.io/exit-code": "1"}
    v1.create_namespaced_pod(namespace, _pod("crash", annotations))

    def backing_off() -> Any:
        statuses = v1.read_namespaced_pod("crash", namespace).status.container_statuses or []
        return statuses and statuses[0].state.waiting is not None and statuses[0]

    status = wait_for(backing_off, 30, what="CrashLoopBackOff")
    assert status.state.waiting.reason == "CrashLoopBackOff"
    assert status.last_state.terminated.exit_code == 1 and status.restart_count == 1


def test_a_stage_file_ends_the_pods_it_selects_in_its_phase(
    simulation: Simulator, v1: client.CoreV1Api, namespace: str
) -> None:
    staged = _pod("staged", {}, restartPolicy="Never")
    staged["metadata"]["labels"] = {"nsim-stage": "fails"}
    v1.create_namespaced_pod(namespace, staged)
    v1.create_namespaced_pod(namespace, _pod("unstaged", {}, restartPolicy="Never"))

    def ended() -> Any:
        pod = v1.read_namespaced_pod("staged", namespace)
        return pod.status.phase in ("Succeeded", "Failed") and pod

    pod = wait_for(ended, 30, what="the staged pod ended")
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 1
    other = v1.read_namespaced_pod("unstaged", namespace)
    assert other.status.phase == "Running", "a pod no stage selects runs until deleted"


def test_deletion_is_honoured_and_a_stubborn_pod_takes_its_grace_period(
    simulation: Simulator, v1: client.CoreV1Api, namespace: str
) -> None:
    v1.create_namespaced_pod(namespace, _pod("quick", {}))
    stubborn = {"nodesim.pykubelet.io/ignore-sigterm": "true"}
    v1.create_namespaced_pod(namespace, _pod("stubborn", stubborn, terminationGracePeriodSeconds=3))
    for name in ("quick", "stubborn"):
        wait_for(lambda n=name: v1.read_namespaced_pod(n, namespace).status.phase == "Running", 30, what=name)
    started = time.monotonic()
    v1.delete_namespaced_pod("quick", namespace)
    v1.delete_namespaced_pod("stubborn", namespace)

    def gone(name: str) -> bool:
        try:
            v1.read_namespaced_pod(name, namespace)
        except client.ApiException as err:
            return err.status == 404
        return False

    wait_for(lambda: gone("quick"), 15, what="the deleted pod gone")
    assert not gone("stubborn") or time.monotonic() - started >= 3
    wait_for(lambda: gone("stubborn"), 20, what="the stubborn pod gone after its grace period")
    assert time.monotonic() - started >= 3


def test_a_node_that_is_not_the_simulations_is_left_alone(
    apiserver: ApiServer, v1: client.CoreV1Api, tmp_path: Path
) -> None:
    v1.create_node({"metadata": {"name": "taken-0", "labels": {"owner": "someone"}}})
    try:
        sim = Simulator(apiserver.kubeconfig, tmp_path / "refused.log", "--nodes=1", "--name-prefix=taken-")
        assert sim.proc.wait(60) == 1, sim.output()
        assert "node taken-0 exists and is not this simulation's" in sim.output()
        node = v1.read_node("taken-0")
        assert node.metadata.labels == {"owner": "someone"}
        assert not (node.metadata.annotations or {}).get("nodesim.pykubelet.io/simulation")
    finally:
        v1.delete_node("taken-0")


def test_nodes_spread_over_several_api_servers_one_kubeconfig_each(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    """Given a kubeconfig per API server, node i registers, renews its Lease and runs its pods through
    the (i mod K)-th. Two servers of separate stores (not replicas of one) show where each node's writes
    went: a node's objects exist on its own server only."""
    prefix = "spread-"
    with ApiServer(tmp_path / "second") as second, second.api_client() as api:
        v1b = client.CoreV1Api(api)
        v1b.create_namespace({"metadata": {"name": "spread"}})
        sim = Simulator(
            apiserver.kubeconfig,
            tmp_path / "spread.log",
            f"--kubeconfig={second.kubeconfig}",
            "--nodes=3",
            f"--name-prefix={prefix}",
            "--start-delay=0s",
            f"--node-lease-duration-seconds={LEASE_SECONDS}",
        )
        try:
            on = {"first": ["spread-0", "spread-2"], "second": ["spread-1"]}
            for where, api_v1 in (("first", v1), ("second", v1b)):
                wait_for(
                    lambda a=api_v1, w=where: all(_ready(a, n) for n in on[w]),
                    60,
                    what=f"{on[where]} Ready on the {where} server",
                    retrying=(client.ApiException,),
                )
            assert _ours(v1, prefix) == on["first"], sim.output()
            assert _ours(v1b, prefix) == on["second"], sim.output()
            wait_for(
                lambda: _leases(v1, prefix) == on["first"] and _leases(v1b, prefix) == on["second"],
                10,
                what="each node's Lease on its own server",
            )
            v1.create_namespaced_pod(namespace, _bound("a", "spread-0"))
            v1b.create_namespaced_pod("spread", _bound("b", "spread-1"))
            for api_v1, ns, name in ((v1, namespace, "a"), (v1b, "spread", "b")):
                pod = wait_for(
                    lambda a=api_v1, s=ns, n=name: (
                        (p := a.read_namespaced_pod(n, s)).status.phase == "Running" and p
                    ),
                    30,
                    what=f"pod {name} Running",
                )
                assert pod.status.pod_ip, pod.status
        finally:
            code = sim.stop()
        assert code == 0, sim.output()
        for api_v1 in (v1, v1b):
            assert not _ours(api_v1, prefix) and not _leases(api_v1, prefix)
        assert not v1b.list_namespaced_pod("spread").items, "the simulation's pod was left on its server"


def _ours(v1: client.CoreV1Api, prefix: str) -> list[str]:
    return sorted(n.metadata.name for n in v1.list_node().items if n.metadata.name.startswith(prefix))


def _leases(v1: client.CoreV1Api, prefix: str) -> list[str]:
    leases = client.CoordinationV1Api(v1.api_client).list_namespaced_lease("kube-node-lease").items
    return sorted(x.metadata.name for x in leases if x.metadata.name.startswith(prefix))


def _bound(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }
