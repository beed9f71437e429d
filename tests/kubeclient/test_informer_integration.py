"""The informer against the real API server: list, watch, and relist when the server answers 410."""

from __future__ import annotations

import asyncio

import pytest

from kubeclient.client import MERGE_PATCH, KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.informer import Informer, drop_managed_fields
from pykubelet.rig.apiserver import ApiServer

pytestmark = pytest.mark.integration

PATH = "/api/v1/namespaces/default/configmaps"


async def until(predicate, timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def test_resumes_and_relists_after_410(tmp_path):
    # A watch window of 5 events: a watcher that misses more than that must start over.
    with ApiServer(tmp_path / "api", extra_args=["--watch-cache-size", "5"]) as server:
        client = KubeClient(load_kubeconfig(server.kubeconfig))
        seen: dict[str, str] = {}
        deleted: list[str] = []
        informer = Informer(client, PATH)
        informer.add_handler(
            on_add=lambda o: seen.__setitem__(o["metadata"]["name"], o["data"]["v"]),
            on_update=lambda old, new: seen.__setitem__(new["metadata"]["name"], new["data"]["v"]),
            on_delete=lambda o: (
                seen.pop(o["metadata"]["name"], None),
                deleted.append(o["metadata"]["name"]),
            ),
        )
        try:
            await client.create(PATH, {"metadata": {"name": "before"}, "data": {"v": "0"}})
            task = asyncio.create_task(informer.run())
            await asyncio.wait_for(informer.synced.wait(), 15)
            assert seen == {"before": "0"} and informer.lists == 1
            await client.create(PATH, {"metadata": {"name": "watched"}, "data": {"v": "1"}})
            await until(lambda: "watched" in seen)
            assert informer.lists == 1  # that came through the watch, not a list

            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            # While it is away: more changes than the window holds, including a delete and an update.
            for i in range(12):
                await client.create(PATH, {"metadata": {"name": f"missed-{i}"}, "data": {"v": "2"}})
            await client.delete(f"{PATH}/before")
            await client.patch(f"{PATH}/watched", {"data": {"v": "3"}}, content_type=MERGE_PATCH)

            task = asyncio.create_task(informer.run())
            await until(lambda: len(seen) == 13)
            assert informer.lists == 2  # resumed, got 410 Gone, listed again
            assert seen["watched"] == "3" and "before" not in seen and deleted == ["before"]
            await client.create(PATH, {"metadata": {"name": "after"}, "data": {"v": "4"}})
            await until(lambda: "after" in seen)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        finally:
            await client.close()


async def test_a_transform_applies_to_listed_and_watched_objects(tmp_path):
    """drop_managed_fields, as the controller manager's informers use it: what the cache holds and the
    handlers see has no managedFields, while the server keeps them."""
    with ApiServer(tmp_path / "api") as server:
        client = KubeClient(load_kubeconfig(server.kubeconfig))
        handed: list[dict] = []
        informer = Informer(client, PATH, transform=drop_managed_fields)
        informer.add_handler(on_add=handed.append, on_update=lambda _old, new: handed.append(new))
        try:
            await client.create(PATH, {"metadata": {"name": "listed"}, "data": {"v": "0"}})
            task = asyncio.create_task(informer.run())
            await asyncio.wait_for(informer.synced.wait(), 15)
            await client.create(PATH, {"metadata": {"name": "watched"}, "data": {"v": "1"}})
            await client.patch(f"{PATH}/listed", {"data": {"v": "2"}}, content_type=MERGE_PATCH)
            await until(lambda: len(handed) == 3)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            assert (await client.get(f"{PATH}/watched"))["metadata"]["managedFields"]
            for obj in [*handed, *informer.list()]:
                assert "managedFields" not in obj["metadata"], obj["metadata"]["name"]
            assert informer.get("default/listed")["data"] == {"v": "2"}
        finally:
            await client.close()
