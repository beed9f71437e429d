"""The base controller's rules: a key whose sync keeps failing is retried with its own backoff and
finally dropped, and never stops the other keys."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.informers import SharedInformers
from kubeclient.client import KubeClient
from kubeclient.config import ClusterConfig
from kubeclient.logsetup import V
from kubeclient.workqueue import ItemExponentialFailureRateLimiter


class Flaky(Controller):
    name = "flaky"
    workers = 2
    max_retries = 3

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.queue.rate_limiter = ItemExponentialFailureRateLimiter(base=0.001)
        self.calls: dict[str, int] = {}
        self.done = asyncio.Event()

    async def sync(self, key: str) -> None:
        self.calls[key] = self.calls.get(key, 0) + 1
        if key == "ns/broken":
            raise RuntimeError("this object cannot be synced")
        if self.calls.get("ns/broken", 0) > self.max_retries:
            self.done.set()


async def test_a_failing_key_is_retried_then_dropped_and_others_go_on() -> None:
    unused = KubeClient(ClusterConfig(server="http://127.0.0.1:9"))  # this controller never calls the API
    ctx = ControllerContext(client=unused, informers=SharedInformers(unused), registry=CollectorRegistry())
    controller = Flaky(ctx)
    stop = asyncio.Event()
    runner = asyncio.create_task(controller.run(stop))
    controller.queue.add("ns/broken")
    for _ in range(20):
        await asyncio.sleep(0.02)
        controller.queue.add("ns/fine")
        if controller.done.is_set():
            break
    stop.set()
    await runner
    assert controller.calls["ns/broken"] == 1 + Flaky.max_retries  # first try, then the retries, then dropped
    assert controller.calls["ns/fine"] >= 2
    assert controller.queue.num_requeues("ns/broken") == 0  # forgotten once dropped
    await unused.close()


async def test_a_controllers_events_are_logged_at_v3_only(caplog: pytest.LogCaptureFixture) -> None:
    """Upstream's controllers start their event broadcasters' structured logging at 3: an event is not
    logged at the default verbosity, and is at -v=3."""
    unused = KubeClient(ClusterConfig(server="http://127.0.0.1:9"))
    ctx = ControllerContext(client=unused, informers=SharedInformers(unused), registry=CollectorRegistry())
    recorder = ctx.recorder("replicaset-controller")
    pod = {"kind": "Pod", "metadata": {"name": "web-1", "namespace": "ns", "uid": "u1"}}
    with caplog.at_level(V(0), logger="kubeclient.events"):
        recorder.event(pod, "Normal", "SuccessfulCreate", "Created pod: web-1")
    assert not [r for r in caplog.records if "SuccessfulCreate" in r.getMessage()]
    with caplog.at_level(V(3), logger="kubeclient.events"):
        recorder.event(pod, "Normal", "SuccessfulDelete", "Deleted pod: web-1")
    assert [r for r in caplog.records if "SuccessfulDelete" in r.getMessage()]
    await unused.close()
