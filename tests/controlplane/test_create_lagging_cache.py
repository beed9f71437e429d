"""A create on a server whose watch cache lags its store, as a loaded server's on etcd lags by seconds: it
waits for the cache no longer than a read-modify-write does (WRITE_PATIENCE), then admits against the cache
as it is, as upstream's informer-fed admission does (upstream does not wait at all); NamespaceLifecycle
reads the store for a namespace the cache does not hold yet, as upstream's plugin makes a live call.

The lag is made by holding the in-process store's commits back from the cache (its one listener), the
server otherwise real (SQLite, every admission plugin)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.kinds.configmap import KIND as CONFIGMAP
from controlplane.apiserver.kinds.namespace import KIND as NAMESPACE
from controlplane.apiserver.options import DeleteOptions
from controlplane.apiserver.server import ApiServer, ServerConfig
from controlplane.storage.cache import WRITE_PATIENCE


class Lagging:
    """The server with its cache held behind: commits are kept until `catch_up()`."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.held: list[Any] = []
        listeners = server.backend._listeners  # type: ignore[union-attr]
        assert len(listeners) == 1, listeners  # the cache is the store's one listener
        self._apply = listeners[0]
        listeners[:] = [self.held.append]

    def catch_up(self) -> None:
        self.server.backend._listeners[:] = [self._apply]  # type: ignore[union-attr]
        for event in self.held:
            self._apply(event)
        self.held.clear()


@pytest.fixture
async def lagging(tmp_path: Path) -> AsyncIterator[Lagging]:
    server = ApiServer(ServerConfig(tmp_path / "d", port=0, insecure_http=True))
    await server.start()
    try:
        yield Lagging(server)
    finally:
        await server.stop()


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


async def test_a_create_waits_for_a_lagging_cache_no_longer_than_a_write_does(lagging: Lagging) -> None:
    registry = lagging.server.registry
    first = await registry.create(CONFIGMAP, "default", configmap("first"))
    assert lagging.held, "the first create reached the cache: nothing lags"
    started = time.perf_counter()
    second = await registry.create(CONFIGMAP, "default", configmap("second"))
    took = time.perf_counter() - started
    # The cache never reaches the first create's revision here: the wait ends at the patience (the old
    # wait, 3 s, was most of a create's latency on a loaded server).
    assert WRITE_PATIENCE <= took < WRITE_PATIENCE + 0.9, took
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert lagging.server.cache.get(CONFIGMAP.key("default", "second")) is None
    lagging.catch_up()
    held = [c.key for c in lagging.server.cache.list(CONFIGMAP.bucket, CONFIGMAP.prefix("default"))]
    assert CONFIGMAP.key("default", "first") in held and CONFIGMAP.key("default", "second") in held


async def test_namespace_lifecycle_reads_the_store_for_a_namespace_the_cache_does_not_hold(
    lagging: Lagging,
) -> None:
    registry = lagging.server.registry
    await registry.create(
        NAMESPACE, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fresh"}}
    )
    assert lagging.server.cache.get(NAMESPACE.key("", "fresh")) is None  # only the store has it
    created = await registry.create(CONFIGMAP, "fresh", configmap("in-fresh"))
    assert created["metadata"]["namespace"] == "fresh"

    with pytest.raises(ApiError) as missing:
        await registry.create(CONFIGMAP, "nowhere", configmap("lost"))
    assert (missing.value.code, missing.value.message) == (404, 'namespaces "nowhere" not found')

    # A namespace being deleted that the cache has not seen at all: the store's copy says Terminating.
    await registry.create(
        NAMESPACE, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "going"}}
    )
    _, gone = await registry.delete(NAMESPACE, "", "going", DeleteOptions())
    assert not gone  # held by its `kubernetes` finalizer: Terminating
    assert lagging.server.cache.get(NAMESPACE.key("", "going")) is None
    with pytest.raises(ApiError) as terminating:
        await registry.create(CONFIGMAP, "going", configmap("late"))
    assert terminating.value.code == 403
    assert terminating.value.message == (
        'configmaps "late" is forbidden: unable to create new content in namespace going because it is being '
        "terminated"
    )
    lagging.catch_up()
