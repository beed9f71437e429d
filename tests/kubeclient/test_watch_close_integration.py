"""A client that stops watching mid-stream leaves no connection behind on either side, as with
kube-apiserver: kopf's way (cancel the task reading the stream, then close the session), a session
closed under a live watch, and our own client's watch left by `break`. The kernel's socket table (`ss`)
is the witness: once the client lets go, the server's end of the watch is closed at once (no
ESTABLISHED or CLOSE-WAIT socket of the server's, nor a FIN-WAIT/CLOSE-WAIT of the client's), and the
server's registered watchers fall back."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator

import aiohttp
import pytest

from e2e.waiting import wait_for_async
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from pykubelet.rig.apiserver import ApiServer

pytestmark = pytest.mark.integration
WATCH = "/api/v1/namespaces/default/configmaps"
LINGERING = ("ESTAB", "CLOSE-WAIT", "FIN-WAIT-1", "FIN-WAIT-2", "LAST-ACK", "CLOSING")


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("watch-close")) as server:
        yield server


def sockets(client_port: int) -> list[str]:
    """The states of both ends of the connection from `client_port` (the client's and the server's)."""
    out = subprocess.run(["ss", "-tanH"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if f":{client_port} " in line + " "]


async def registered_watchers(admin: KubeClient) -> float:
    session = admin._get_session()
    async with session.get(
        admin.server + "/metrics", headers=await admin._headers(None, "GET /metrics")
    ) as resp:
        text = await resp.text()
    return next(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("apiserver_registered_watchers")
    )


async def _let_go(client_port: int) -> bool:
    return not any(state in LINGERING for state in sockets(client_port))


def client_ports(server_port: int) -> set[int]:
    """The local ports of this host's established connections to the server."""
    out = subprocess.run(["ss", "-tanH", "state", "established"], capture_output=True, text=True, check=True)
    ports = set()
    for line in out.stdout.splitlines():
        local, peer = line.split()[2:4]
        if peer.endswith(f":{server_port}"):
            ports.add(int(local.rsplit(":", 1)[1]))
    return ports


async def watched_until(admin: KubeClient, baseline: float) -> None:
    await wait_for_async(
        lambda: _true_if(registered_watchers(admin), lambda n: n <= baseline), timeout=10.0, interval=0.2
    )


async def _true_if(value, check) -> bool | None:
    return True if check(await value) else None


@pytest.mark.parametrize("how", ["cancel the reader", "close the session"])
async def test_an_aiohttp_client_stopping_a_watch_leaves_no_connection(
    apiserver: ApiServer, how: str
) -> None:
    async with KubeClient(load_kubeconfig(apiserver.kubeconfig)) as admin:
        baseline = await registered_watchers(admin)
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=admin.config.ssl_context()))
        opened: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def watch() -> None:
            url = f"{admin.server}{WATCH}?watch=true&allowWatchBookmarks=true&timeoutSeconds=600"
            headers = await admin._headers(None, "WATCH")
            async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=None)) as resp:
                opened.set_result(resp.connection.transport.get_extra_info("sockname")[1])
                async for _line in resp.content:
                    pass

        reader = asyncio.create_task(watch())
        port = await asyncio.wait_for(opened, 10)
        await wait_for_async(
            lambda: _true_if(registered_watchers(admin), lambda n: n > baseline), timeout=10.0
        )
        assert sockets(port).count("ESTAB") == 2  # both ends, while it runs
        if how == "cancel the reader":  # kopf's order: cancel its watcher tasks, then close the session
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await session.close()
        else:
            await session.close()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        await wait_for_async(lambda: _let_go(port), timeout=3.0, interval=0.05)
        assert set(sockets(port)) <= {"TIME-WAIT"}
        await watched_until(admin, baseline)


async def test_our_client_leaving_a_watch_by_break_closes_it(apiserver: ApiServer) -> None:
    async with KubeClient(load_kubeconfig(apiserver.kubeconfig)) as admin:
        baseline = await registered_watchers(admin)
        await admin.create(WATCH, {"metadata": {"name": "watched"}})
        server_port = int(admin.server.rsplit(":", 1)[1])
        before = client_ports(server_port)
        async with KubeClient(
            load_kubeconfig(apiserver.kubeconfig)
        ) as client:  # its own pool: one connection
            async for event in client.watch(WATCH, {"resourceVersion": "0"}):
                assert event["type"] == "ADDED"
                (port,) = client_ports(server_port) - before
                break
            await wait_for_async(lambda: _let_go(port), timeout=3.0, interval=0.05)
            assert set(sockets(port)) <= {"TIME-WAIT"}
        await watched_until(admin, baseline)
        await admin.delete(f"{WATCH}/watched")
