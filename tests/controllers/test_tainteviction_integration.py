"""The taint eviction controller against the real API server, with NoExecute taints the test sets on
Nodes itself: untolerated means deleted at once, tolerationSeconds means deleted that much later, a
toleration without seconds means never, and a taint removed in time cancels the deletion."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from controlplane.controllers.tainteviction import TaintEvictionController
from tests.controllers.conftest import eventually, running
from tests.controllers.kubeletplay import delete_node, events, make_node, pod_condition, pod_on, read_pod

pytestmark = pytest.mark.integration

TAINT = {"key": "example.com/maintenance", "value": "now", "effect": "NoExecute"}


def tolerate(seconds: int | None = None) -> list[dict]:
    toleration = {"key": TAINT["key"], "operator": "Exists", "effect": "NoExecute"}
    if seconds is not None:
        toleration["tolerationSeconds"] = seconds
    return [toleration]


@pytest.fixture
def nodes(v1: client.CoreV1Api) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        delete_node(v1, None, name)


def set_taints(v1: client.CoreV1Api, node: str, taints: list[dict] | None) -> None:
    v1.patch_node(node, {"spec": {"taints": taints}})


def deleted(v1: client.CoreV1Api, namespace: str, name: str):
    return lambda: (p := read_pod(v1, namespace, name)) is None or (p.metadata.deletion_timestamp and p)


async def test_untolerated_goes_at_once_timed_after_its_seconds_forever_never(
    apiserver, v1, namespace, nodes
):
    make_node(v1, None, "maint")
    nodes.append("maint")
    v1.create_namespaced_pod(namespace, pod_on("intolerant", "maint"))
    v1.create_namespaced_pod(namespace, pod_on("patient", "maint", tolerate(2)))
    v1.create_namespaced_pod(namespace, pod_on("loyal", "maint", tolerate()))
    async with running(apiserver, "taint-eviction-controller"):
        tainted_at = time.monotonic()
        set_taints(v1, "maint", [TAINT])
        pod = await eventually(deleted(v1, namespace, "intolerant"), what="intolerant deleted")
        assert time.monotonic() - tainted_at < 1.5
        target = pod_condition(pod, "DisruptionTarget")
        assert (target.status, target.reason, target.message) == (
            "True",
            "DeletionByTaintManager",
            "Taint manager: deleting due to NoExecute taint",
        )
        # A pod bound after the taint is judged against it at once too.
        v1.create_namespaced_pod(namespace, pod_on("late", "maint"))
        await eventually(deleted(v1, namespace, "late"), what="late pod deleted")
        await eventually(deleted(v1, namespace, "patient"), what="patient deleted", timeout=10)
        assert time.monotonic() - tainted_at >= 1.9
        loyal = read_pod(v1, namespace, "loyal")
        assert loyal.metadata.deletion_timestamp is None and pod_condition(loyal, "DisruptionTarget") is None
        marked = await eventually(lambda: len(e := events(v1, namespace, "TaintManagerEviction")) >= 3 and e)
        assert {e.message for e in marked} == {
            f"Marking for deletion Pod {namespace}/{n}" for n in ("intolerant", "late", "patient")
        }
        assert {(e.type, e.source.component, e.involved_object.kind) for e in marked} == {
            ("Normal", "taint-eviction-controller", "Pod")
        }


async def test_a_taint_removed_in_time_cancels_the_deletion(apiserver, v1, namespace, nodes):
    make_node(v1, None, "flaky")
    make_node(v1, None, "witness-node")
    nodes += ["flaky", "witness-node"]
    v1.create_namespaced_pod(namespace, pod_on("rescued", "flaky", tolerate(3)))
    v1.create_namespaced_pod(namespace, pod_on("witness", "witness-node", tolerate(4)))
    async with running(apiserver, "taint-eviction-controller") as manager:
        controller = await eventually(
            lambda: next((c for c in manager.controllers if isinstance(c, TaintEvictionController)), None),
            what="controller",
        )
        set_taints(v1, "flaky", [TAINT])
        set_taints(v1, "witness-node", [TAINT])
        await eventually(lambda: f"{namespace}/rescued" in controller.evictions, what="deletion scheduled")
        set_taints(v1, "flaky", None)
        cancelled = await eventually(lambda: events(v1, namespace, "TaintManagerEviction", "rescued"))
        assert cancelled[0].message == f"Cancelling deletion of Pod {namespace}/rescued"
        # The witness (4 s) goes on its own node: by then the rescued pod's 3 s are long over.
        await eventually(deleted(v1, namespace, "witness"), what="witness deleted", timeout=10)
        assert read_pod(v1, namespace, "rescued").metadata.deletion_timestamp is None
