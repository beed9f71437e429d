"""`run_scheduler` as `pykubelet server` will embed it: a task on the caller's loop, stopped by an Event."""

from __future__ import annotations

import asyncio

import pytest

from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.runner import run_scheduler
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig

pytestmark = pytest.mark.integration


async def test_run_scheduler_in_process_until_stopped(apiserver, cluster):
    node = cluster.add_node("embedded")
    client = KubeClient(load_kubeconfig(apiserver.kubeconfig))
    stop = asyncio.Event()
    task = asyncio.create_task(run_scheduler(apiserver.scheduler_kubeconfig, SchedulerConfig(), stop))
    try:
        ns = cluster.namespace
        await client.create(f"/api/v1/namespaces/{ns}/pods", cluster.pod("inproc"))
        async with asyncio.timeout(30):
            while True:
                pod = await client.get(f"/api/v1/namespaces/{ns}/pods/inproc")
                if pod["spec"].get("nodeName"):
                    break
                await asyncio.sleep(0.05)
        assert pod["spec"]["nodeName"] == node
        async with asyncio.timeout(30):  # the Scheduled event is flushed by the time run_scheduler returns
            stop.set()
            await task
        events, _ = await client.list(
            f"/api/v1/namespaces/{ns}/events", {"fieldSelector": "involvedObject.name=inproc"}
        )
        assert [e["reason"] for e in events] == ["Scheduled"]
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
    assert task.done() and task.exception() is None
