"""The long-lived network service the thin plugin talks to.

Importing pyroute2 and warming its netlink machinery costs ~0.3 s; paying it once per node instead of
once per CNI call is what makes ADD as fast as the reference Go plugin. The agent hosts the service in
its own event loop (`NetworkService(...).start()`); without an agent, `pykubelet-cni serve` (or
`python -m agent.cni.service`) runs it as a daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agent.cni import protocol
from agent.cni.plugin import Response, handle
from kubeclient import logsetup
from kubeclient.eventloop import termination_event

log = logging.getLogger("agent.cni.service")


class NetworkService:
    """Serves CNI invocations on a unix socket; blocking netlink work runs in a small thread pool."""

    def __init__(self, socket_path: str = protocol.DEFAULT_SOCKET, max_workers: int = 8) -> None:
        self.socket_path = socket_path
        self.max_workers = max_workers
        self._server: asyncio.AbstractServer | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.requests = 0

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        """Bind the socket (replacing a stale one) and start accepting; idempotent."""
        if self._server is not None:
            return
        _prepare_socket_path(self.socket_path)
        self._pool = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="cni")
        # warm up pyroute2 (lazy imports of its message classes, first netlink socket) first
        await asyncio.get_running_loop().run_in_executor(self._pool, _warm_up)
        self._server = await asyncio.start_unix_server(self._serve, path=self.socket_path)
        # root only: connecting needs write permission on the socket (no umask games, which would
        # be process-wide in the agent)
        os.chmod(self.socket_path, 0o600)
        log.info("cni service listening socket=%s", self.socket_path)

    async def stop(self) -> None:
        """Stop accepting, finish requests in flight, remove the socket."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.get_running_loop().run_in_executor(None, pool.shutdown)

    async def __aenter__(self) -> NetworkService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            data = bytearray()
            while len(data) <= protocol.MAX_REQUEST and (more := await reader.read(65536)):
                data += more
            if len(data) > protocol.MAX_REQUEST:
                raise protocol.ProtocolError("request too large")
            req = protocol.decode_request(bytes(data))
            pool = self._pool
            if pool is None:
                raise protocol.ProtocolError("service stopping")
            resp: Response = await asyncio.get_running_loop().run_in_executor(
                pool, handle, req.env, req.stdin
            )
            self.requests += 1
            if resp.code:
                log.warning(
                    "cni %s container=%s failed: %s",
                    req.env.get("CNI_COMMAND"),
                    req.env.get("CNI_CONTAINERID"),
                    resp.stderr.strip().splitlines()[-1:] if resp.stderr else resp.stdout,
                )
            writer.write(protocol.encode_response(resp.code, resp.stdout, resp.stderr))
            await writer.drain()
        except (protocol.ProtocolError, ConnectionError) as exc:
            log.warning("cni service: bad request: %s", exc)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


def _prepare_socket_path(path: str) -> None:
    """Create the socket's directory and drop a stale socket left by a killed service."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _warm_up() -> None:
    from agent.cni.rtnl import Rtnl

    with Rtnl() as rtnl:
        rtnl.get_link("lo")


class BackgroundService:
    """A NetworkService on its own event loop thread, for callers without a loop of their own
    (benchmarks, tests, tools); the agent instead awaits NetworkService.start() in its loop."""

    def __init__(self, socket_path: str = protocol.DEFAULT_SOCKET, max_workers: int = 8) -> None:
        self.service = NetworkService(socket_path, max_workers)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cni-service", daemon=True)

    def start(self, timeout: float = 30.0) -> BackgroundService:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.service.start(), self._loop).result(timeout)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        if not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self.service.stop(), self._loop).result(timeout)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
            self._loop.close()

    def __enter__(self) -> BackgroundService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _run(socket_path: str, workers: int) -> None:
    service = NetworkService(socket_path, workers)
    await service.start()
    stop = termination_event()
    try:
        await stop.wait()
    finally:
        await service.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pykubelet-cni serve", description=__doc__)
    parser.add_argument("--socket", default=protocol.default_socket_path())
    parser.add_argument("--workers", type=int, default=8)
    ns = parser.parse_args(argv)
    logsetup.configure()
    asyncio.run(_run(ns.socket, ns.workers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
