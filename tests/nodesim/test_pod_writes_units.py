"""A status write the API server refuses leaves the simulated pod where the API shows it, so the retry
writes it again: the density bench at 300 nodes left 9 of 9 000 pods Pending for good after one burst of
500s, because the driver had noted them started before their Running status was stored.

The client is a stand-in that refuses the first write (one module's test); the driver is the real one.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubeclient.client import KubeClient
from kubeclient.config import ClusterConfig
from kubeclient.errors import ApiError
from nodesim.addressing import Addresses
from nodesim.heartbeats import SimNode
from nodesim.pods import PodDriver, pod_key
from nodesim.settings import SimSettings


class RefusesFirst:
    """Answers the first `refusals` status writes with a 500, then stores them."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.stored: list[dict[str, Any]] = []

    async def patch(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        if self.refusals:
            self.refusals -= 1
            raise ApiError(500, "InternalError", "Internal error occurred: refused for the test")
        self.stored.append(body["status"])
        return body


def pod(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "annotations": annotations or {},
        },
        "spec": {"nodeName": "sim-0", "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Pending"},
    }


def driver(client: RefusesFirst) -> PodDriver:
    settings = SimSettings(start_delay=0.0)
    node = SimNode(name="sim-0", index=0, uid="uid-sim-0", ip="10.0.0.1")
    unused = KubeClient(ClusterConfig(server="http://127.0.0.1:9"))  # the informer never runs here
    sim = PodDriver(
        unused, settings, {"sim-0": node}, Addresses("10.0.0.0", "10.1.0.0"), asyncio.Semaphore(1)
    )
    sim.client = client  # type: ignore[assignment]
    return sim


async def test_a_refused_start_is_started_again() -> None:
    client = RefusesFirst(refusals=1)
    sim = driver(client)
    p = pod("web")
    sim.informer._put(pod_key(p), p)
    try:
        await sim.sync(pod_key(p))
        raise AssertionError("the refused write should have raised")
    except ApiError:
        pass
    await sim.sync(pod_key(p))  # the queue's retry
    assert [s["phase"] for s in client.stored] == ["Running"]


async def test_a_refused_exit_is_written_again() -> None:
    client = RefusesFirst(refusals=0)
    sim = driver(client)
    # Runs for no time, then exits 0 and ends (restartPolicy Never): Succeeded.
    p = pod("job", {"nodesim.pykubelet.io/run-for": "0s", "nodesim.pykubelet.io/exit-code": "0"})
    p["spec"]["restartPolicy"] = "Never"
    sim.informer._put(pod_key(p), p)
    await sim.sync(pod_key(p))
    assert [s["phase"] for s in client.stored] == ["Running"]
    client.refusals = 1
    try:
        await sim.sync(pod_key(p))
        raise AssertionError("the refused write should have raised")
    except ApiError:
        pass
    await sim.sync(pod_key(p))
    assert [s["phase"] for s in client.stored] == ["Running", "Succeeded"]
