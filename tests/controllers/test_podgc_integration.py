"""Pod GC against the real API server, with a 0.5 s period and a 2 s quarantine instead of 20 s and 40 s:
terminated pods beyond the threshold (evicted, then oldest), orphans of a deleted node (marked Failed
with DisruptionTarget, after the quarantine), terminating pods on out-of-service nodes, and unscheduled
terminating pods."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.controllers.conftest import eventually, running
from tests.controllers.kubeletplay import delete_node, make_node, pod_condition, pod_on, read_pod

pytestmark = pytest.mark.integration

FAST = {"pod_gc_period": 0.5, "pod_gc_quarantine": 2.0}
HOLD = "example.com/hold"


@pytest.fixture
def nodes(v1: client.CoreV1Api) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        delete_node(v1, None, name)


@pytest.fixture
def held(v1: client.CoreV1Api, namespace: str) -> Iterator[list[str]]:
    """Pods the test gave a finalizer (to look at them after GC): released and removed afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        release(v1, namespace, name)


def release(v1: client.CoreV1Api, namespace: str, name: str) -> None:
    if read_pod(v1, namespace, name) is not None:
        v1.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None}})


def unbound(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def finish(v1: client.CoreV1Api, namespace: str, name: str, phase: str, reason: str = "") -> None:
    v1.patch_namespaced_pod_status(
        name, namespace, {"status": {"phase": phase, **({"reason": reason} if reason else {})}}
    )


async def test_terminated_pods_beyond_the_threshold_go_evicted_first_then_oldest(apiserver, v1, namespace):
    v1.create_namespaced_pod(namespace, unbound("z-oldest"))
    finish(v1, namespace, "z-oldest", "Succeeded")
    time.sleep(
        1.05
    )  # a later creationTimestamp (second resolution) for the next ones: age, not name, decides
    for name, phase in (("a-newer", "Failed"), ("b-newer", "Succeeded")):
        v1.create_namespaced_pod(namespace, unbound(name))
        finish(v1, namespace, name, phase)
    v1.create_namespaced_pod(namespace, unbound("y-evicted"))
    finish(v1, namespace, "y-evicted", "Failed", "Evicted")
    v1.create_namespaced_pod(namespace, unbound("running"))
    async with running(apiserver, "podgc", terminated_pod_gc_threshold=2, **FAST):
        left = await eventually(
            lambda: len(p := v1.list_namespaced_pod(namespace).items) == 3 and p,
            what="2 terminated pods collected",
        )
        names = {p.metadata.name for p in left}
        assert names == {"a-newer", "b-newer", "running"}, names


async def test_orphans_of_a_deleted_node_are_failed_and_deleted_after_the_quarantine(
    apiserver, v1, namespace, nodes, held
):
    make_node(v1, None, "doomed")
    make_node(v1, None, "kept")
    nodes += ["doomed", "kept"]
    v1.create_namespaced_pod(namespace, pod_on("orphan", "doomed", finalizers=[HOLD]))
    v1.create_namespaced_pod(namespace, pod_on("plain-orphan", "doomed"))
    v1.create_namespaced_pod(namespace, pod_on("safe", "kept"))
    held.append("orphan")
    v1.patch_namespaced_pod_status("orphan", namespace, {"status": {"phase": "Running"}})
    async with running(apiserver, "podgc", **FAST):
        v1.delete_node("doomed")
        gone_at = time.monotonic()
        pod = await eventually(
            lambda: (p := read_pod(v1, namespace, "orphan")) and p.metadata.deletion_timestamp and p,
            what="orphan deleted",
        )
        assert time.monotonic() - gone_at >= 1.5  # the quarantine
        assert pod.status.phase == "Failed"
        target = pod_condition(pod, "DisruptionTarget")
        assert (target.status, target.reason, target.message) == (
            "True",
            "DeletionByPodGC",
            "PodGC: node no longer exists",
        )
        assert pod.metadata.deletion_grace_period_seconds == 0
        await eventually(lambda: read_pod(v1, namespace, "plain-orphan") is None, what="plain orphan gone")
        assert read_pod(v1, namespace, "safe").metadata.deletion_timestamp is None


async def test_terminating_pods_on_an_out_of_service_node_are_force_deleted(apiserver, v1, namespace, nodes):
    out_of_service = {
        "key": "node.kubernetes.io/out-of-service",
        "value": "nodeshutdown",
        "effect": "NoExecute",
    }
    make_node(v1, None, "shut", ready="False", taints=[out_of_service])
    make_node(v1, None, "merely-down", ready="False")
    nodes += ["shut", "merely-down"]
    for name, node in (("stuck", "shut"), ("waiting", "merely-down")):
        v1.create_namespaced_pod(namespace, pod_on(name, node))
        v1.patch_namespaced_pod_status(name, namespace, {"status": {"phase": "Running"}})
        v1.delete_namespaced_pod(name, namespace)  # graceful: stays Terminating, no kubelet will confirm
    async with running(apiserver, "podgc", **FAST):
        await eventually(lambda: read_pod(v1, namespace, "stuck") is None, what="stuck pod force-deleted")
        waiting = read_pod(v1, namespace, "waiting")
        assert waiting.metadata.deletion_timestamp is not None and waiting.status.phase == "Running"


async def test_unscheduled_terminating_pods_are_failed_and_force_deleted(apiserver, v1, namespace, held):
    v1.create_namespaced_pod(
        namespace, {**unbound("never-bound"), "metadata": {"name": "never-bound", "finalizers": [HOLD]}}
    )
    held.append("never-bound")
    v1.delete_namespaced_pod("never-bound", namespace)
    async with running(apiserver, "podgc", **FAST):
        pod = await eventually(
            lambda: (p := read_pod(v1, namespace, "never-bound")) and p.status.phase == "Failed" and p,
            what="never-bound pod Failed",
        )
        assert pod.metadata.deletion_grace_period_seconds == 0
        assert pod_condition(pod, "DisruptionTarget") is None  # only orphans say why
    release(v1, namespace, "never-bound")
    await eventually(lambda: read_pod(v1, namespace, "never-bound") is None, what="released and gone")
