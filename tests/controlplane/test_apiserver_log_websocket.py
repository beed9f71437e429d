"""pods/log over WebSocket, as upstream's conformance test "should support retrieving logs from the
container over websockets" reads it, through the real API server: the upgrade is answered with the
subprotocol asked for, `binary.k8s.io` carries the log's bytes as binary messages and
`base64.binary.k8s.io` as base64 text messages, the socket closes when the log ends, and a plain GET is
the text body it was. The node's kubelet is a stand-in serving /containerLogs over TLS with the cluster
CA, as test_apiserver_client's pods/log test has it."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from kubernetes import client

from controlplane.apiserver.certs import ensure_pki
from pykubelet.rig.apiserver import ApiServer

pytestmark = pytest.mark.integration

LOG = b"container is alive\n" + b"x" * 70000 + b"\nthe end\n"


@pytest.fixture
async def kubelet(apiserver: ApiServer) -> AsyncIterator[int]:
    """A node agent's /containerLogs: the log above, in a few chunks; its port."""

    async def logs(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await out.prepare(request)
        for start in range(0, len(LOG), 30000):
            await out.write(LOG[start : start + 30000])
        await out.write_eof()
        return out

    app = web.Application()
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", logs)
    pki = ensure_pki(apiserver.data_dir)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca_cert))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(pki.serving_cert, pki.serving_key)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


def admin_context(server: ApiServer) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(server.ca_cert))
    pki = server.data_dir / "pki"
    context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    return context


async def receive(server: ApiServer, path: str, protocols: tuple[str, ...]) -> tuple[str | None, list]:
    """(the subprotocol the server chose, every message up to the close)."""
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(server.url + path, protocols=protocols, ssl=admin_context(server)) as ws,
    ):
        messages = [message async for message in ws]
        return ws.protocol, messages


async def test_pod_log_streams_over_websocket(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str, kubelet: int
) -> None:
    node_name = f"wslogs-{namespace}"
    v1.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=node_name)))
    try:
        v1.patch_node_status(
            node_name,
            {
                "status": {
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet}},
                }
            },
        )
        spec = client.V1PodSpec(
            node_name=node_name, containers=[client.V1Container(name="main", image="busybox")]
        )
        v1.create_namespaced_pod(
            namespace, client.V1Pod(metadata=client.V1ObjectMeta(name="logger"), spec=spec)
        )
        path = f"/api/v1/namespaces/{namespace}/pods/logger/log?container=main"

        protocol, messages = await receive(apiserver, path, ("binary.k8s.io",))
        assert protocol == "binary.k8s.io"
        assert {m.type for m in messages} == {aiohttp.WSMsgType.BINARY}
        assert b"".join(m.data for m in messages) == LOG

        protocol, messages = await receive(apiserver, path, ("base64.binary.k8s.io",))
        assert protocol == "base64.binary.k8s.io"
        assert {m.type for m in messages} == {aiohttp.WSMsgType.TEXT}
        assert b"".join(base64.b64decode(m.data) for m in messages) == LOG

        # No subprotocol asked: binary, as upstream's default reader protocol ("").
        protocol, messages = await receive(apiserver, path, ())
        assert protocol is None and b"".join(m.data for m in messages) == LOG

        # A plain GET is unchanged.
        # (in a thread: the stand-in kubelet serves from this test's event loop)
        plain = await asyncio.to_thread(v1.read_namespaced_pod_log, "logger", namespace, container="main")
        assert plain == LOG.decode()
    finally:
        v1.delete_node(node_name)
