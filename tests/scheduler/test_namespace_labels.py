"""The namespace labels every decision reads (affinity terms' namespaceSelector) follow the namespace
watch: built once, built again after any namespace is added, relabelled or deleted."""

from __future__ import annotations

import asyncio

from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.scheduler import Scheduler
from kubeclient.client import KubeClient
from kubeclient.config import ClusterConfig


def _ns(name: str, **labels: str) -> dict:  # type: ignore[type-arg]
    return {"metadata": {"name": name, "resourceVersion": "1", "labels": labels}}


def test_namespace_labels_follow_every_namespace_event() -> None:
    async def scenario() -> None:
        client = KubeClient(ClusterConfig(server="http://127.0.0.1:9"))  # never called here
        sched = Scheduler(client, SchedulerConfig())
        watch = sched.namespaces._apply  # what the namespace watch does with each event
        watch({"type": "ADDED", "object": _ns("a", team="x")})
        assert sched.cluster_view().namespace_labels == {"a": {"team": "x"}}
        assert sched.cluster_view().namespace_labels is sched.cluster_view().namespace_labels  # kept
        watch({"type": "MODIFIED", "object": _ns("a", team="y")})
        watch({"type": "ADDED", "object": _ns("b")})
        assert sched.cluster_view().namespace_labels == {"a": {"team": "y"}, "b": {}}
        watch({"type": "DELETED", "object": _ns("a", team="y")})
        assert sched.cluster_view().namespace_labels == {"b": {}}
        await client.close()

    asyncio.run(scenario())
