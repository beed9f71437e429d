"""The node lifecycle controller (with the taint eviction controller) against the real API server. The
test plays the kubelets: it writes Nodes and their Leases, keeps one node alive with heartbeats and lets
another fall silent, with a grace period of 3 s instead of 50 s."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime

import pytest
from kubernetes import client

from controlplane.controllers.nodelifecycle import NodeLifecycleController
from tests.controllers.conftest import eventually, running
from tests.controllers.kubeletplay import (
    condition,
    delete_node,
    events,
    heartbeat,
    make_node,
    pod_condition,
    pod_on,
    post_status,
    read_pod,
    renew_lease,
    run_ready,
    taint_set,
)

pytestmark = pytest.mark.integration

FAST = {"node_monitor_grace_period": 3.0, "node_monitor_period": 0.5, "node_startup_grace_period": 2.0}
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"


@pytest.fixture(scope="module")
def coord(api: client.ApiClient) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(api)


@pytest.fixture
def nodes(v1: client.CoreV1Api, coord: client.CoordinationV1Api) -> Iterator[list[str]]:
    """Names of nodes the test made; deleted (with their leases) afterwards, so tests do not share zones."""
    made: list[str] = []
    yield made
    for name in made:
        delete_node(v1, coord, name)


def when(stamp: datetime | None) -> float:
    assert stamp is not None
    return stamp.timestamp()


async def lifecycle(manager) -> NodeLifecycleController:
    return await eventually(
        lambda: next((c for c in manager.controllers if isinstance(c, NodeLifecycleController)), None),
        what="the controller",
    )


async def test_a_silent_node_goes_unknown_is_tainted_and_its_pods_go_as_they_tolerate(
    apiserver, v1, coord, namespace, nodes
):
    make_node(v1, coord, "live", labels={"kubernetes.io/os": "linux"})
    lost = make_node(v1, coord, "lost")
    nodes += ["live", "lost"]
    unreachable = {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}
    v1.create_namespaced_pod(namespace, pod_on("short", "lost", [{**unreachable, "tolerationSeconds": 2}]))
    v1.create_namespaced_pod(namespace, pod_on("forever", "lost", [unreachable]))
    v1.create_namespaced_pod(namespace, pod_on("default", "lost"))  # the API server's 300 s
    for name in ("short", "forever", "default"):
        run_ready(v1, namespace, name)
    heartbeat_before = condition(lost, "Ready").last_heartbeat_time
    async with (
        heartbeat(v1, coord, "live"),
        running(apiserver, "nodelifecycle", "taint-eviction-controller", **FAST),
    ):
        node = await eventually(
            lambda: (n := v1.read_node("lost")) and condition(n, "Ready").status == "Unknown" and n,
            what="lost node Unknown",
        )
        ready = condition(node, "Ready")
        assert (ready.reason, ready.message) == ("NodeStatusUnknown", "Kubelet stopped posting node status.")
        assert ready.last_heartbeat_time == heartbeat_before
        for type_ in ("MemoryPressure", "DiskPressure", "PIDPressure"):
            assert condition(node, type_).status == "Unknown"
        node = await eventually(
            lambda: (
                (n := v1.read_node("lost"))
                and {(UNREACHABLE, "NoExecute"), (UNREACHABLE, "NoSchedule")} <= taint_set(n)
                and n
            ),
            what="unreachable taints",
        )
        no_execute = next(t for t in node.spec.taints if t.effect == "NoExecute")
        assert no_execute.time_added is not None
        # Every pod's Ready condition is False, each with upstream's event.
        for name in ("short", "forever", "default"):
            await eventually(
                lambda n=name: (
                    (p := read_pod(v1, namespace, n))
                    and p.status.conditions
                    and pod_condition(p, "Ready").status == "False"
                    and p
                ),
                what=f"{name} not ready",
            )
        warned = await eventually(lambda: len(e := events(v1, namespace, "NodeNotReady")) >= 3 and e)
        assert {(e.type, e.message, e.source.component) for e in warned} == {
            ("Warning", "Node is not ready", "node-controller")
        }
        node_event = await eventually(lambda: events(v1, "default", "NodeNotReady", "lost"))
        assert node_event[0].message == "Node lost status is now: NodeNotReady"
        assert node_event[0].involved_object.kind == "Node"
        # tolerationSeconds 2: deleted about 2 s after the taint, marked as a disruption first.
        short = await eventually(
            lambda: (p := read_pod(v1, namespace, "short")) and p.metadata.deletion_timestamp and p,
            timeout=15,
            what="short pod deleted",
        )
        disruption = pod_condition(short, "DisruptionTarget")
        assert (disruption.status, disruption.reason, disruption.message) == (
            "True",
            "DeletionByTaintManager",
            "Taint manager: deleting due to NoExecute taint",
        )
        waited = when(disruption.last_transition_time) - when(no_execute.time_added)
        assert 1 <= waited <= 5, waited
        marked = await eventually(lambda: events(v1, namespace, "TaintManagerEviction", "short"))
        assert marked[0].message == f"Marking for deletion Pod {namespace}/short"
        assert marked[0].source.component == "taint-eviction-controller"
        for name in ("forever", "default"):
            assert read_pod(v1, namespace, name).metadata.deletion_timestamp is None
        # The kubelet is back: Ready again, and both taints go.
        post_status(v1, "lost")
        renew_lease(coord, "lost")
        async with heartbeat(v1, coord, "lost"):
            await eventually(lambda: not taint_set(v1.read_node("lost")), what="taints removed")
            assert condition(v1.read_node("lost"), "Ready").status == "True"
        live = v1.read_node("live")
        assert not live.spec.taints and condition(live, "Ready").status == "True"
        assert live.metadata.labels["beta.kubernetes.io/os"] == "linux"  # reconciled from the stable label
        registered = events(v1, "default", "RegisteredNode", "live")
        assert registered and registered[0].message == "Node live event: Registered Node live in Controller"


async def test_a_not_ready_node_gets_not_ready_taints_then_swaps_to_unreachable(apiserver, v1, coord, nodes):
    make_node(v1, coord, "live")
    make_node(v1, coord, "sick", ready="False")
    nodes += ["live", "sick"]
    async with heartbeat(v1, coord, "live"), running(apiserver, "nodelifecycle", **FAST):
        async with heartbeat(v1, coord, "sick"):
            node = await eventually(
                lambda: (
                    (n := v1.read_node("sick"))
                    and {(NOT_READY, "NoExecute"), (NOT_READY, "NoSchedule")} <= taint_set(n)
                    and n
                ),
                what="not-ready taints",
            )
            # The kubelet is posting (its lease is fresh): its condition stays as it wrote it.
            assert condition(node, "Ready").reason == "KubeletNotReady"
        # Now it falls silent too: Unknown, and the NoExecute taint swaps at once.
        await eventually(
            lambda: (
                taint_set(v1.read_node("sick")) == {(UNREACHABLE, "NoExecute"), (UNREACHABLE, "NoSchedule")}
            ),
            what="unreachable taints instead",
            timeout=15,
        )
        assert condition(v1.read_node("sick"), "Ready").status == "Unknown"


async def test_when_every_node_is_down_no_noexecute_taint_is_set(apiserver, v1, coord, nodes):
    """Upstream's master disruption mode: all zones fully disrupted looks like the control plane lost
    its network, so nothing is evicted (the NoSchedule taint still keeps new pods away)."""
    make_node(v1, coord, "alone")
    nodes.append("alone")
    async with running(apiserver, "nodelifecycle", **FAST) as manager:
        await eventually(
            lambda: (UNREACHABLE, "NoSchedule") in taint_set(v1.read_node("alone")), what="NoSchedule"
        )
        controller = await lifecycle(manager)
        seen = controller.passes
        await eventually(lambda: controller.passes >= seen + 4, what="four more health passes")
        assert taint_set(v1.read_node("alone")) == {(UNREACHABLE, "NoSchedule")}
        assert controller.zone_states == {"": "FullDisruption"}


async def test_a_node_that_never_posted_status_goes_unknown_after_the_startup_grace(apiserver, v1, nodes):
    async with running(apiserver, "nodelifecycle", **FAST):
        created = time.monotonic()
        bare = make_node(v1, None, "bare", ready=None)
        nodes.append("bare")
        node = await eventually(
            lambda: (n := v1.read_node("bare")) and n.status and n.status.conditions and n,
            what="conditions written",
        )
        # The grace (2 s) runs from creationTimestamp, which has whole seconds: up to 1 s of it may have
        # passed already when the Node was written, so only 1 s is sure to be waited here.
        assert time.monotonic() - created >= FAST["node_startup_grace_period"] - 1.0
        assert [c.type for c in node.status.conditions] == [
            "Ready",
            "MemoryPressure",
            "DiskPressure",
            "PIDPressure",
        ]
        for cond in node.status.conditions:
            assert (cond.status, cond.reason, cond.message) == (
                "Unknown",
                "NodeStatusNeverUpdated",
                "Kubelet never posted node status.",
            )
            assert cond.last_heartbeat_time == bare.metadata.creation_timestamp


async def test_a_pod_bound_to_a_not_ready_node_is_marked_not_ready(apiserver, v1, coord, namespace, nodes):
    make_node(v1, coord, "live")
    make_node(v1, coord, "gone-quiet")
    nodes += ["live", "gone-quiet"]
    async with heartbeat(v1, coord, "live"), running(apiserver, "nodelifecycle", **FAST):
        await eventually(lambda: condition(v1.read_node("gone-quiet"), "Ready").status == "Unknown")
        v1.create_namespaced_pod(
            namespace,
            {"metadata": {"name": "late"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        )
        run_ready(v1, namespace, "late")
        v1.create_namespaced_binding(
            namespace,
            client.V1Binding(
                metadata=client.V1ObjectMeta(name="late"),
                target=client.V1ObjectReference(kind="Node", name="gone-quiet"),
            ),
            _preload_content=False,
        )
        await eventually(
            lambda: pod_condition(v1.read_namespaced_pod("late", namespace), "Ready").status == "False",
            what="late pod not ready",
        )


async def test_nodes_of_a_healthy_zone_are_tainted_at_the_eviction_rate(apiserver, v1, coord, nodes):
    make_node(v1, coord, "live")
    for name in ("lost-a", "lost-b"):
        make_node(v1, coord, name)
    nodes += ["live", "lost-a", "lost-b"]
    tainted = lambda n: (UNREACHABLE, "NoExecute") in taint_set(v1.read_node(n))  # noqa: E731
    async with (
        heartbeat(v1, coord, "live"),
        running(apiserver, "nodelifecycle", node_eviction_rate=0.5, **FAST),
    ):
        # Two of three not Ready is still a Normal zone (PartialDisruption needs more than 2).
        await eventually(lambda: tainted("lost-a") or tainted("lost-b"), what="first taint")
        first = time.monotonic()
        await eventually(lambda: tainted("lost-a") and tainted("lost-b"), what="second taint")
        assert time.monotonic() - first >= 1.5  # 0.5 nodes a second, burst 1


async def test_a_small_zone_in_partial_disruption_gets_no_noexecute_taints(apiserver, v1, coord, nodes):
    make_node(v1, coord, "live")
    lost = ["lost-1", "lost-2", "lost-3"]
    for name in lost:
        make_node(v1, coord, name)
    nodes += ["live", *lost]
    async with heartbeat(v1, coord, "live"), running(apiserver, "nodelifecycle", **FAST) as manager:
        for name in lost:
            await eventually(lambda n=name: (UNREACHABLE, "NoSchedule") in taint_set(v1.read_node(n)))
        controller = await lifecycle(manager)
        seen = controller.passes
        await eventually(lambda: controller.passes >= seen + 4, what="four more health passes")
        # 3 of 4 not Ready: PartialDisruption, whose rate is the secondary one, 0 at or below 50 nodes.
        assert controller.zone_states == {"": "PartialDisruption"}
        for name in lost:
            assert (UNREACHABLE, "NoExecute") not in taint_set(v1.read_node(name))
