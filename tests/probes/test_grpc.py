"""The gRPC probe against real servers: a reference grpc.health.v1 servicer (grpcio, in-process), the
image's C server (pykubelet/rig/grpchealth.c) on the host, and that image running in containerd.

Outputs are compared with upstream's pkg/probe/grpc/grpc.go wording, so events read the same.
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from agent.cri import CRIClient, pb
from agent.probes import grpc as grpc_probe
from agent.probes.grpc import grpc_check
from agent.probes.pb import health_pb2, health_pb2_grpc
from agent.probes.result import Outcome, Result
from pykubelet import KUBERNETES_VERSION
from pykubelet.rig import images
from pykubelet.rig.cripod import pod_sandbox_config
from pykubelet.rig.images import RigImages
from pykubelet.rig.process import Daemon, free_port

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
HEALTHY = Outcome(Result.SUCCESS, "service healthy")
UNHEALTHY = Outcome(Result.FAILURE, 'service unhealthy (responded with "NOT_SERVING")')
UNKNOWN_SERVICE = Outcome(
    Result.FAILURE, "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"
)


def connect_timeout(addr: str, budget: str) -> Outcome:
    return Outcome(
        Result.FAILURE,
        f'timeout: failed to connect service "{addr}" within {budget}: context deadline exceeded',
    )


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_targets_and_user_agent() -> None:
    """IP literals go straight to the address (no resolver); names through grpc's DNS resolver."""
    assert grpc_probe._target("10.0.0.7", 5000) == "ipv4:10.0.0.7:5000"
    assert grpc_probe._target("fd00::1", 5000) == "ipv6:[fd00::1]:5000"
    assert grpc_probe._target("web.local", 5000) == "dns:///web.local:5000"
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    assert grpc_probe.USER_AGENT == f"kube-probe/{major}.{minor}"


# -- (a) a reference grpc.health.v1 server (grpcio) ---------------------------------------------------


class ReferenceHealth(health_pb2_grpc.HealthServicer):
    """Health/Check as the reference servers answer it: a status per service ("" is the server), an
    unknown name is NOT_FOUND "unknown service"."""

    def __init__(self) -> None:
        self.statuses: dict[str, int] = {"": SERVING}
        self.delay = 0.0
        self.error: tuple[grpc.StatusCode, str] | None = None  # answer every call with this status
        self.user_agents: list[str] = []

    async def Check(self, request, context):
        self.user_agents.append(dict(context.invocation_metadata()).get("user-agent", ""))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.error:
            await context.abort(*self.error)
        status = self.statuses.get(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return health_pb2.HealthCheckResponse(status=status)


@pytest.fixture
async def reference() -> AsyncIterator[tuple[ReferenceHealth, int]]:
    servicer = ReferenceHealth()
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("[::]:0")  # both families where the host has IPv6
    await server.start()
    yield servicer, port
    await server.stop(0)


async def test_reference_statuses(reference: tuple[ReferenceHealth, int]) -> None:
    servicer, port = reference
    servicer.statuses.update({"api": SERVING, "batch": NOT_SERVING, "old": 0, "watch-only": 3})
    assert await grpc_check("127.0.0.1", port, "", 1) == HEALTHY
    assert await grpc_check("127.0.0.1", port, "api", 1) == HEALTHY
    assert await grpc_check("127.0.0.1", port, "batch", 1) == UNHEALTHY
    assert await grpc_check("127.0.0.1", port, "old", 1) == Outcome(
        Result.FAILURE, 'service unhealthy (responded with "UNKNOWN")'
    )
    assert await grpc_check("127.0.0.1", port, "watch-only", 1) == Outcome(
        Result.FAILURE, 'service unhealthy (responded with "SERVICE_UNKNOWN")'
    )
    assert await grpc_check("127.0.0.1", port, "nope", 1) == UNKNOWN_SERVICE
    # Upstream's user agent leads (grpc appends its own name).
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    assert servicer.user_agents and all(
        ua.startswith(f"kube-probe/{major}.{minor} ") for ua in servicer.user_agents
    )


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback")
async def test_reference_over_ipv6(reference: tuple[ReferenceHealth, int]) -> None:
    _, port = reference
    assert await grpc_check("::1", port, "", 1) == HEALTHY
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::1", 0))
        dead = s.getsockname()[1]
    assert await grpc_check("::1", dead, "", 0.3) == connect_timeout(f"[::1]:{dead}", "300ms")


async def test_server_too_slow(reference: tuple[ReferenceHealth, int]) -> None:
    servicer, port = reference
    servicer.delay = 3
    started = time.monotonic()
    assert await grpc_check("127.0.0.1", port, "", 0.5) == Outcome(
        Result.FAILURE, "timeout: health rpc did not complete within 500ms"
    )
    assert time.monotonic() - started < 1.0


async def test_nobody_listens() -> None:
    """Upstream's blocking dial retries until the deadline, then reports the connect timeout."""
    port = free_port()
    started = time.monotonic()
    assert await grpc_check("127.0.0.1", port, "", 0.5) == connect_timeout(f"127.0.0.1:{port}", "500ms")
    assert 0.4 < time.monotonic() - started < 1.0


async def test_port_that_opens_within_the_timeout() -> None:
    """The probe keeps trying within its timeout (as upstream's blocking dial): a server that starts
    listening 0.3 s into a 2 s probe is reached."""
    port = free_port()
    servicer = ReferenceHealth()
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)

    async def start_late() -> None:
        await asyncio.sleep(0.3)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()

    late = asyncio.create_task(start_late())
    try:
        assert await grpc_check("127.0.0.1", port, "", 2) == HEALTHY
    finally:
        await late
        await server.stop(0)


async def test_grpc_server_without_health() -> None:
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        outcome = await grpc_check("127.0.0.1", port, "", 1)
    finally:
        await server.stop(0)
    assert outcome.result is Result.FAILURE
    assert outcome.output.startswith(
        "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): "
    )


async def test_other_status_codes(reference: tuple[ReferenceHealth, int]) -> None:
    servicer, port = reference
    servicer.error = (grpc.StatusCode.PERMISSION_DENIED, "go away")
    assert await grpc_check("127.0.0.1", port, "", 1) == Outcome(
        Result.FAILURE, "error: health rpc probe failed: rpc error: code = PermissionDenied desc = go away"
    )


async def _tcp_server(handler) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.mark.parametrize("kind", ["http1", "silent"])
async def test_not_a_grpc_server(kind: str) -> None:
    """An HTTP/1.1 server (it answers the HTTP/2 preface with a 400) or a TCP server that never speaks:
    no HTTP/2 SETTINGS ever arrive, so the connection is never ready. Upstream's client waits for the
    server preface too and reports its dial deadline."""

    async def http1(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    server, port = await _tcp_server(http1 if kind == "http1" else silent)
    try:
        started = time.monotonic()
        assert await grpc_check("127.0.0.1", port, "", 0.5) == connect_timeout(f"127.0.0.1:{port}", "500ms")
        assert time.monotonic() - started < 1.0
    finally:
        server.close()


async def test_each_check_closes_its_connection(reference: tuple[ReferenceHealth, int]) -> None:
    _, port = reference
    await grpc_check("127.0.0.1", port, "", 1)  # grpc's own threads and pipes exist from here on
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(30):
        assert await grpc_check("127.0.0.1", port, "", 1) == HEALTHY
    assert len(os.listdir("/proc/self/fd")) <= before + 2


# -- (b) the image's C server, on the host --------------------------------------------------------------


def _listening(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=0.2):
        return True


@pytest.fixture
def c_server(tmp_path: Path) -> Iterator[Callable[..., int]]:
    """Start grpc-health with the given flags on 127.0.0.1 and a free port; returns the port."""
    binary = images.grpc_health_binary()
    started: list[Daemon] = []

    def start(*flags: str) -> int:
        port = free_port()
        daemon = Daemon(
            "grpc-health",
            [str(binary), "-bind", "127.0.0.1", "-port", str(port), *flags],
            tmp_path / f"gh-{port}.log",
        )
        daemon.start(ready=lambda: _listening(port), timeout=10)
        started.append(daemon)
        return port

    yield start
    for daemon in started:
        daemon.stop(grace=2)


async def official_check(port: int, service: str, timeout: float = 2) -> tuple[grpc.StatusCode, int | str]:
    """The grpcio client itself, without grpc_check: (code, status) or (code, details)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            response = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.aio.AioRpcError as err:
            return err.code(), err.details() or ""
        return grpc.StatusCode.OK, response.status


async def test_c_server_services(c_server: Callable[..., int]) -> None:
    port = c_server("-serving", "api", "-not-serving", "batch")
    assert await grpc_check("127.0.0.1", port, "", 1) == HEALTHY
    assert await grpc_check("127.0.0.1", port, "api", 1) == HEALTHY
    assert await grpc_check("127.0.0.1", port, "batch", 1) == UNHEALTHY
    assert await grpc_check("127.0.0.1", port, "nope", 1) == UNKNOWN_SERVICE
    assert await official_check(port, "") == (grpc.StatusCode.OK, SERVING)
    assert await official_check(port, "batch") == (grpc.StatusCode.OK, NOT_SERVING)
    assert await official_check(port, "nope") == (grpc.StatusCode.NOT_FOUND, "unknown service")
    # The whole server can be named too; the last flag for a name wins.
    port = c_server("-not-serving", "", "-serving", "x", "-not-serving", "x")
    assert await grpc_check("127.0.0.1", port, "", 1) == UNHEALTHY
    assert await official_check(port, "x") == (grpc.StatusCode.OK, NOT_SERVING)


async def test_c_server_status_file(c_server: Callable[..., int], tmp_path: Path) -> None:
    flag = tmp_path / "healthy"
    port = c_server("-status-file", str(flag), "-serving", "api", "-not-serving", "batch")
    assert await grpc_check("127.0.0.1", port, "", 1) == UNHEALTHY
    assert await grpc_check("127.0.0.1", port, "api", 1) == UNHEALTHY
    flag.touch()
    assert await grpc_check("127.0.0.1", port, "", 1) == HEALTHY
    assert await grpc_check("127.0.0.1", port, "api", 1) == HEALTHY
    assert await grpc_check("127.0.0.1", port, "batch", 1) == UNHEALTHY  # named NOT_SERVING stays so
    assert await official_check(port, "api") == (grpc.StatusCode.OK, SERVING)
    flag.unlink()
    assert await grpc_check("127.0.0.1", port, "", 1) == UNHEALTHY
    assert await official_check(port, "nope") == (grpc.StatusCode.NOT_FOUND, "unknown service")


async def test_c_server_concurrency(c_server: Callable[..., int]) -> None:
    long_name = "s" * 300
    port = c_server("-serving", long_name)
    outcomes = await asyncio.gather(*(grpc_check("127.0.0.1", port, "", 1) for _ in range(20)))
    assert outcomes == [HEALTHY] * 20
    # One connection, many streams at once (more than the 100 the server allows at a time), then enough
    # calls that the requests outgrow the 64 KiB initial connection window (the server must replenish it).
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service=long_name)
        responses = await asyncio.gather(*(stub.Check(request, timeout=10) for _ in range(150)))
        assert {r.status for r in responses} == {SERVING}
        for _ in range(300):  # 300 x ~310 bytes of DATA
            assert (await stub.Check(request, timeout=5)).status == SERVING


async def test_c_server_too_slow(c_server: Callable[..., int]) -> None:
    port = c_server("-delay-ms", "2000")
    assert await grpc_check("127.0.0.1", port, "", 0.5) == Outcome(
        Result.FAILURE, "timeout: health rpc did not complete within 500ms"
    )


def _raw(port: int, data: bytes) -> bytes:
    """Send bytes, read what comes back until the server closes (or 2 s)."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            pass
        return out


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def _frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    frames = []
    while len(data) >= 9:
        length = int.from_bytes(data[:3], "big")
        frames.append((data[3], data[4], int.from_bytes(data[5:9], "big"), data[9 : 9 + length]))
        data = data[9 + length :]
    return frames


async def test_c_server_survives_garbage(c_server: Callable[..., int]) -> None:
    port = c_server()
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    settings, goaway = 4, 7
    # Not HTTP/2 at all: the server's SETTINGS, then GOAWAY PROTOCOL_ERROR.
    reply = _frames(await asyncio.to_thread(_raw, port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
    assert [f[0] for f in reply] == [settings, goaway] and reply[1][3][4:8] == b"\x00\x00\x00\x01"
    # A frame longer than the maximum: FRAME_SIZE_ERROR.
    reply = _frames(await asyncio.to_thread(_raw, port, preface + b"\xff\xff\xff\x00\x00\x00\x00\x00\x01"))
    assert reply[-1][0] == goaway and reply[-1][3][4:8] == b"\x00\x00\x00\x06"
    # DATA on stream 0, a SETTINGS of odd length, a PING of the wrong size, CONTINUATION out of the blue.
    for bad in (
        _frame(0, 0, 0, b"x"),
        _frame(4, 0, 0, b"12345"),
        _frame(6, 0, 0, b"1"),
        _frame(9, 4, 1, b""),
    ):
        assert _frames(await asyncio.to_thread(_raw, port, preface + bad))[-1][0] == goaway
    # Malformed gRPC messages on a valid stream: answered with an error status, never a crash.
    headers = _frame(1, 4, 1, b"\x83")  # one byte of HPACK; the server does not decode request headers
    for body in (
        b"",
        b"\x00\x00\x00",
        b"\x00\x00\x00\x00\x05\x0a\x09abc",
        b"\x00\x00\x00\x00\x02\xff\xff",
        b"\x01\x00\x00\x00\x00",
    ):
        reply = _frames(await asyncio.to_thread(_raw, port, preface + headers + _frame(0, 1, 1, body)))
        answer = [f for f in reply if f[0] == 1 and f[2] == 1]
        assert answer and answer[-1][1] & 1 and b"grpc-status" in answer[-1][3], (body, reply)
    # PING is answered with the same payload.
    reply = _frames(await asyncio.to_thread(_raw, port, preface + _frame(6, 0, 0, b"12345678")))
    assert (6, 1, 0, b"12345678") in reply
    # Random bytes after a valid preface, then a connection dropped half-way through a frame.
    await asyncio.to_thread(_raw, port, preface + os.urandom(4096))
    await asyncio.to_thread(_raw, port, preface + _frame(1, 0, 1, b"\x83")[:12])
    assert await grpc_check("127.0.0.1", port, "", 1) == HEALTHY


async def test_c_server_exits_on_sigterm(tmp_path: Path) -> None:
    """It runs as PID 1 in its container, where SIGTERM without a handler would be ignored."""
    port = free_port()
    daemon = Daemon(
        "grpc-health", [str(images.grpc_health_binary()), "-port", str(port)], tmp_path / "gh.log"
    )
    daemon.start(ready=lambda: _listening(port), timeout=10)
    assert daemon.proc is not None
    daemon.proc.terminate()
    assert daemon.proc.wait(timeout=2) == 0
    daemon.stop()


async def test_c_server_check_latency(c_server: Callable[..., int]) -> None:
    """What one probe costs end to end (channel, connection, call, close), printed for the record."""
    port = c_server()
    await grpc_check("127.0.0.1", port, "", 1)
    samples = []
    for _ in range(200):
        started = time.perf_counter()
        assert await grpc_check("127.0.0.1", port, "", 1) == HEALTHY
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    p50, p99 = statistics.median(samples), samples[int(len(samples) * 0.99) - 1]
    print(f"grpc_check against the C server: p50 {p50:.2f} ms, p99 {p99:.2f} ms over {len(samples)} checks")
    assert p50 < 50


# -- (c) the image in containerd, probed at the pod IP ------------------------------------------------


async def _until(check: Callable[[], object], timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while True:
        outcome = await check()
        if outcome or time.monotonic() > deadline:
            return outcome
        await asyncio.sleep(0.1)


@pytest.mark.integration
async def test_image_in_containerd(cri: CRIClient, test_images: RigImages, pod_log_dir: Path) -> None:
    await cri.pull_image(test_images.grpc_health)
    sandbox = pod_sandbox_config("grpc-health", "default", pod_log_dir)
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    try:
        pod_ip = (await cri.pod_sandbox_status(sandbox_id)).status.network.ip
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name="server", attempt=0),
            image=pb.ImageSpec(image=test_images.grpc_health),
            args=["-serving", "api", "-not-serving", "batch", "-status-file", "/tmp/healthy"],
            log_path="server/0.log",
            labels={**sandbox.labels, "io.kubernetes.container.name": "server"},
        )
        container_id = await cri.create_container(sandbox_id, config, sandbox)
        await cri.start_container(container_id)
        port = images.GRPC_HEALTH_PORT

        async def answering():
            outcome = await grpc_check(pod_ip, port, "", 1)
            return outcome if not outcome.output.startswith("timeout: failed to connect") else None

        assert await _until(answering) == UNHEALTHY  # no /tmp/healthy yet
        assert await grpc_check(pod_ip, port, "nope", 1) == UNKNOWN_SERVICE
        result = await cri.exec_sync(container_id, ["touch", "/tmp/healthy"], timeout_seconds=5)
        assert result.exit_code == 0
        assert await grpc_check(pod_ip, port, "", 1) == HEALTHY
        assert await grpc_check(pod_ip, port, "api", 1) == HEALTHY
        assert await grpc_check(pod_ip, port, "batch", 1) == UNHEALTHY
        outcomes = await asyncio.gather(*(grpc_check(pod_ip, port, "api", 1) for _ in range(20)))
        assert outcomes == [HEALTHY] * 20
        await cri.exec_sync(container_id, ["rm", "/tmp/healthy"], timeout_seconds=5)
        assert await grpc_check(pod_ip, port, "api", 1) == UNHEALTHY
        assert await grpc_check(pod_ip, port + 1, "", 0.5) == connect_timeout(f"{pod_ip}:{port + 1}", "500ms")

        # PID 1 ends on SIGTERM at once (no waiting out the grace period for a SIGKILL).
        started = time.monotonic()
        await cri.stop_container(container_id, grace_seconds=10)
        assert time.monotonic() - started < 5
        status = (await cri.container_status(container_id)).status
        assert (status.state, status.exit_code) == (pb.CONTAINER_EXITED, 0)
        await cri.remove_container(container_id)
    finally:
        await cri.stop_pod_sandbox(sandbox_id)
        await cri.remove_pod_sandbox(sandbox_id)
