"""`pykubelet simulate` against a server that refuses its writes: it backs off instead of hammering it,
says so, and carries on once the server takes writes again.

The server is a fake (one module's test): it answers 429 with Retry-After: 1 to everything, counting the
requests, then turns into just enough of an API server for the simulation to register its nodes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

from aiohttp import web

NODES = 40
CONCURRENCY = 4


class Refuser:
    def __init__(self) -> None:
        self.refusing = True
        self.requests: list[float] = []
        self.created: set[str] = set()
        self.deleted: set[str] = set()
        self.closing = asyncio.Event()  # ends the open watches, so the server stops at once

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(time.monotonic())
        if self.refusing:
            return web.json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "TooManyRequests",
                    "code": 429,
                },
                status=429,
                headers={"Retry-After": "1"},
            )
        path = request.path
        if request.method == "POST" and path == "/api/v1/nodes":
            body = await request.json()
            name = body["metadata"]["name"]
            self.created.add(name)
            body["metadata"]["uid"] = f"uid-{name}"
            return web.json_response(body, status=201)
        if request.method == "DELETE":
            self.deleted.add(path)
            return web.json_response({"kind": "Status", "status": "Success"})
        if request.method == "GET" and path == "/api/v1/pods":
            if request.query.get("watch") in ("1", "true"):
                resp = web.StreamResponse()
                await resp.prepare(request)
                await self.closing.wait()
                return resp
            return web.json_response({"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": []})
        if request.method == "POST" and "/leases" in path:
            return web.json_response(await request.json(), status=201)
        return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound"}, status=404)


async def test_a_refusing_server_is_not_hammered_and_the_simulation_resumes(tmp_path: Path) -> None:
    fake = Refuser()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    log = tmp_path / "simulate.log"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pykubelet",
        "simulate",
        f"--kubeconfig={kubeconfig}",
        f"--nodes={NODES}",
        f"--concurrency={CONCURRENCY}",
        stdout=log.open("w"),
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        # Measure the request rate over a window once the first refusal is in.
        deadline = time.monotonic() + 30
        while not fake.requests and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert fake.requests, f"simulate sent nothing: {log.read_text()}"
        window_start = fake.requests[0]
        await asyncio.sleep(4)  # the measuring window itself, not a wait for a condition
        window = [t for t in fake.requests if window_start <= t < window_start + 4]
        rate = len(window) / 4
        # Each of at most CONCURRENCY requests in flight waits the Retry-After second between attempts.
        assert rate <= CONCURRENCY * 1.5, f"{rate:.1f} requests/s against a server answering 429"
        assert rate >= CONCURRENCY * 0.5, f"only {rate:.1f} requests/s: the simulation stopped trying"
        # The client's own retries (each waiting the Retry-After) come first; then the simulation says so.
        deadline = time.monotonic() + 30
        while "registration failed, retrying" not in log.read_text() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert "registration failed, retrying" in log.read_text()

        fake.refusing = False
        deadline = time.monotonic() + 60
        while len(fake.created) < NODES and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert len(fake.created) == NODES, f"{len(fake.created)} nodes registered: {log.read_text()[-2000:]}"
        assert proc.returncode is None
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 60)
        fake.closing.set()
        await runner.cleanup()
    assert code == 0, log.read_text()[-2000:]
    assert len([p for p in fake.deleted if p.startswith("/api/v1/nodes/")]) == NODES
