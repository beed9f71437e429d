"""Client failover across API server replicas, against small local HTTP servers (the real replicas on one
etcd are driven by tests/controlplane/test_apiserver_multi.py): the replica list from a kubeconfig
extension, requests moving to a live replica (a POST only when nothing was sent or its body never left), a broken watch moving
too, and one server behaving exactly as before."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web

from kubeclient.client import KubeClient, replicas_from_endpoints
from kubeclient.config import SERVERS_EXTENSION, ClusterConfig, ConfigError, load_kubeconfig
from kubeclient.errors import ApiError
from kubeclient.informer import Informer
from pykubelet.rig.process import free_port


class Replica:
    """One stand-in API server: records the paths asked, answers `status` (200 with a ConfigMap)."""

    def __init__(self, name: str, status: int = 200) -> None:
        self.name = name
        self.status = status
        self.paths: list[tuple[str, str]] = []
        self.events: asyncio.Queue[dict | None] = asyncio.Queue()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.paths.append((request.method, request.path_qs))
        if request.query.get("watch") == "true":
            resp = web.StreamResponse()
            await resp.prepare(request)
            while (event := await self.events.get()) is not None:
                await resp.write(json.dumps(event).encode() + b"\n")
            raise ConnectionResetError  # the replica dies mid-stream
        if self.status != 200:
            body = {
                "kind": "Status",
                "status": "Failure",
                "code": self.status,
                "reason": "ServiceUnavailable",
            }
            return web.json_response(body, status=self.status)
        return web.json_response(
            {
                "kind": "ConfigMapList",
                "metadata": {"resourceVersion": "5"},
                "items": [],
                "served_by": self.name,
            }
        )


@contextlib.asynccontextmanager
async def running(replica: Replica) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", replica.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


def test_the_replica_list_comes_from_the_kubeconfig_extension(tmp_path: Path) -> None:
    doc = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [
            {
                "name": "k",
                "cluster": {
                    "server": "https://127.0.0.1:6443",
                    "extensions": [
                        {"name": "other", "extension": {"x": 1}},
                        {"name": SERVERS_EXTENSION, "extension": {"servers": ["https://127.0.0.2:6443/"]}},
                    ],
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    config = load_kubeconfig(path)
    assert config.all_servers == ("https://127.0.0.1:6443", "https://127.0.0.2:6443")
    assert KubeClient(config).server == "https://127.0.0.1:6443"
    doc["clusters"][0]["cluster"]["extensions"][1]["extension"]["servers"] = ["127.0.0.2:6443"]
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="servers must be URLs"):
        load_kubeconfig(path)
    # Without the extension: one server, as before.
    del doc["clusters"][0]["cluster"]["extensions"]
    path.write_text(yaml.safe_dump(doc))
    assert load_kubeconfig(path).all_servers == ("https://127.0.0.1:6443",)


async def test_requests_move_to_a_live_replica_and_stay_there() -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: nothing is ever sent there
    live = Replica("b")
    async with running(live) as url:
        client = KubeClient(ClusterConfig(server=dead, servers=(url,)), max_attempts=1)
        try:
            out = await client.get("/api/v1/configmaps")
            assert out["served_by"] == "b" and client.server == url
            # A create may move too when the connection was never made.
            await client.create("/api/v1/namespaces/d/configmaps", {"metadata": {"name": "x"}})
            assert [m for m, _ in live.paths] == ["GET", "POST"]
        finally:
            await client.close()


async def test_a_retryable_5xx_moves_idempotent_calls_but_never_resends_a_post() -> None:
    sick, well = Replica("a", status=503), Replica("b")
    async with running(sick) as a, running(well) as b:
        client = KubeClient(ClusterConfig(server=a, servers=(b,)), max_attempts=2)
        try:
            assert (await client.get("/api/v1/configmaps"))["served_by"] == "b"
            assert len(sick.paths) == 1 and len(well.paths) == 1
            client.replicas.index = 0  # back on the sick one
            with pytest.raises(ApiError) as err:
                await client.create("/api/v1/namespaces/d/configmaps", {"metadata": {"name": "x"}})
            # The POST reached a server, which may have acted on it: not sent again anywhere.
            assert err.value.status == 503 and len(sick.paths) == 2 and len(well.paths) == 1
            assert client.server == b  # but the next call goes to the other replica
        finally:
            await client.close()


class BrokenFirst(KubeClient):
    """A client whose first request fails with `error` before any answer (aiohttp's own exception, as a
    connection the server had closed raises it), and whose later requests go out as usual."""

    def __init__(self, config: ClusterConfig, error: Exception) -> None:
        super().__init__(config, max_attempts=1)
        self.error: Exception | None = error

    def _get_session(self) -> aiohttp.ClientSession:
        session = super()._get_session()
        if self.error is None:
            return session
        error, self.error = self.error, None

        class Failing:
            def request(self, *args: object, **kwargs: object) -> object:
                raise error

        return Failing()  # type: ignore[return-value]


async def test_a_post_whose_body_could_not_be_written_moves_but_a_cut_answer_does_not() -> None:
    """The body never left (a pooled connection to a replica that had just died): the server cannot have
    acted on it, so the POST goes to the next replica. A connection cut after the body was sent may
    have been acted on: not sent again."""
    left, right = Replica("a"), Replica("b")
    async with running(left) as a, running(right) as b:
        unwritten = aiohttp.ClientOSError(None, f"Can not write request body for {a}/api/v1/x")
        client = BrokenFirst(ClusterConfig(server=a, servers=(b,)), unwritten)
        try:
            await client.create("/api/v1/namespaces/d/configmaps", {"metadata": {"name": "x"}})
            assert (left.paths, [m for m, _ in right.paths]) == ([], ["POST"]) and client.server == b
        finally:
            await client.close()
        client = BrokenFirst(ClusterConfig(server=a, servers=(b,)), aiohttp.ServerDisconnectedError())
        try:
            with pytest.raises(ApiError) as err:
                await client.create("/api/v1/namespaces/d/configmaps", {"metadata": {"name": "y"}})
            assert err.value.status == 0 and len(right.paths) == 1
            assert client.server == b  # the next call goes to the other replica
        finally:
            await client.close()


async def test_one_server_keeps_the_old_behaviour() -> None:
    sick = Replica("a", status=503)
    async with running(sick) as a:
        client = KubeClient(ClusterConfig(server=a), max_attempts=3)
        try:
            with pytest.raises(ApiError):
                await client.get("/api/v1/configmaps")
            assert len(sick.paths) == 3 and client.server == a
        finally:
            await client.close()


def cm(name: str, rv: int) -> dict:
    return {
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "d", "uid": name, "resourceVersion": str(rv)},
    }


async def test_a_broken_watch_resumes_on_the_next_replica_from_the_last_resource_version() -> None:
    first, second = Replica("a"), Replica("b")
    async with running(first) as a, running(second) as b:
        client = KubeClient(ClusterConfig(server=a, servers=(b,)))
        seen: list[str] = []
        informer = Informer(client, "/api/v1/configmaps")
        informer.add_handler(on_add=lambda o: seen.append(o["metadata"]["name"]))
        task = asyncio.create_task(informer.run())
        try:
            await asyncio.wait_for(informer.synced.wait(), 5)
            await first.events.put({"type": "ADDED", "object": cm("one", 6)})
            await first.events.put(None)  # replica a breaks the stream
            await second.events.put({"type": "ADDED", "object": cm("two", 7)})
            while len(seen) < 2:
                await asyncio.sleep(0.05)
            assert seen == ["one", "two"]
            watches = [q for _, q in second.paths if "watch=true" in q]
            assert watches and "resourceVersion=6" in watches[0]
            assert informer.lists == 1  # resumed, not relisted
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await client.close()


def test_replicas_from_the_kubernetes_endpoints() -> None:
    endpoints = {
        "subsets": [
            {
                "addresses": [{"ip": "10.0.0.1"}, {"ip": "fd00::2"}],
                "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
            }
        ]
    }
    assert replicas_from_endpoints(endpoints) == ("https://10.0.0.1:6443", "https://[fd00::2]:6443")
    assert replicas_from_endpoints({}) == ()


async def test_an_in_cluster_client_adds_the_endpoints_replicas() -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        assert request.path == "/api/v1/namespaces/default/endpoints/kubernetes"
        subsets = [
            {"addresses": [{"ip": "127.0.0.2"}, {"ip": "127.0.0.3"}], "ports": [{"name": "https", "port": 7}]}
        ]
        return web.json_response({"kind": "Endpoints", "subsets": subsets})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    client = KubeClient(ClusterConfig(server=url))
    try:
        assert await client.discover_replicas() == (url, "https://127.0.0.2:7", "https://127.0.0.3:7")
        assert client.server == url  # the configured one stays first
    finally:
        await client.close()
        await runner.cleanup()
