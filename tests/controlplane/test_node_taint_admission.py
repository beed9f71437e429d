"""TaintNodesByCondition against the real API server (with the plugin on, as on a genuine cluster):
every Node is created with `node.kubernetes.io/not-ready:NoSchedule`, which the node lifecycle
controller lifts once the node is Ready; later writes are left alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from pykubelet.rig.apiserver import ApiServer


@pytest.fixture(scope="module")
def v1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.CoreV1Api]:
    with ApiServer(tmp_path_factory.mktemp("taint-api"), node_taint_admission=True) as server:
        with server.api_client() as api:
            yield client.CoreV1Api(api)


def taints(node: client.V1Node) -> list[tuple[str, str | None, str]]:
    return [(t.key, t.value, t.effect) for t in node.spec.taints or []]


def test_a_new_node_starts_not_ready(v1: client.CoreV1Api) -> None:
    made = v1.create_node({"metadata": {"name": "fresh"}})
    assert taints(made) == [("node.kubernetes.io/not-ready", None, "NoSchedule")]
    assert made.spec.taints[0].time_added is None
    # Lifted (as the node lifecycle controller does once Ready), it stays lifted: only creates are tainted.
    lifted = v1.patch_node("fresh", {"spec": {"taints": None}})
    assert taints(lifted) == []
    assert taints(v1.patch_node("fresh", {"metadata": {"labels": {"a": "b"}}})) == []


def test_the_taint_joins_the_nodes_own_and_is_never_doubled(v1: client.CoreV1Api) -> None:
    own = {"key": "dedicated", "value": "db", "effect": "NoSchedule"}
    made = v1.create_node({"metadata": {"name": "tainted"}, "spec": {"taints": [own]}})
    assert taints(made) == [
        ("dedicated", "db", "NoSchedule"),
        ("node.kubernetes.io/not-ready", None, "NoSchedule"),
    ]
    already = {"key": "node.kubernetes.io/not-ready", "value": "x", "effect": "NoSchedule"}
    made = v1.create_node({"metadata": {"name": "already"}, "spec": {"taints": [already]}})
    assert taints(made) == [("node.kubernetes.io/not-ready", "x", "NoSchedule")]
    execute = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}
    made = v1.create_node({"metadata": {"name": "execute"}, "spec": {"taints": [execute]}})
    assert taints(made) == [
        ("node.kubernetes.io/not-ready", None, "NoExecute"),
        ("node.kubernetes.io/not-ready", None, "NoSchedule"),
    ]
