"""The gRPC probe: one grpc.health.v1.Health/Check over a fresh insecure channel, judged and worded as
upstream's prober (pkg/probe/grpc/grpc.go) does, so events and `kubectl describe` read the same.

Upstream dials with WithBlock under a context of `timeout`, then calls Check under the same context:
connecting and the call share one deadline, a port nobody listens on is retried until that deadline
and reported as a connect timeout, and every failure is probe.Failure (never Unknown). Here the call
waits for the connection (wait_for_ready) under the deadline, and the channel's state after a
DEADLINE_EXCEEDED tells "never connected" from "connected, but the call was too slow".

Cost per check: one channel, one TCP connection, one HTTP/2 stream, closed at the end (about 3 ms of
wall and CPU time against a local server, most of it grpc's channel set-up); nothing is shared between
checks, so one pod's slow or dead server never holds up another pod's probe.
"""

from __future__ import annotations

import ipaddress

import grpc
import grpc.aio

from agent.probes.pb import health_pb2, health_pb2_grpc
from agent.probes.result import Outcome, Result
from agent.probes.tcp import go_code, go_duration, go_quote, join_host_port
from kubeclient.version import KUBERNETES_VERSION


def _user_agent() -> str:
    """kube-probe/<major>.<minor>, as upstream's WithUserAgent (grpc adds its own name after it)."""
    major, minor = (KUBERNETES_VERSION.lstrip("v").split(".") + ["0", "0"])[:2]
    return f"kube-probe/{major}.{minor}"


USER_AGENT = _user_agent()


def _channel_options(timeout: float) -> list[tuple[str, str | int]]:
    timeout_ms = max(1, int(timeout * 1000))
    return [
        ("grpc.primary_user_agent", USER_AGENT),
        # A channel of its own: no connection or reconnect backoff shared with another pod's probe.
        ("grpc.use_local_subchannel_pool", 1),
        # A refused connection is tried again after 0.1 s (doubling up to 1 s) until the deadline, as
        # upstream's blocking dial keeps trying; grpc's default would wait 1 s before the second try.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
        # One attempt may take the whole budget (grpc's default would be 20 s, past any deadline).
        ("grpc.min_reconnect_backoff_ms", timeout_ms),
        ("grpc.enable_retries", 0),
        # Probes go straight to the pod, never through a proxy named in the agent's environment.
        ("grpc.enable_http_proxy", 0),
    ]


def _target(host: str, port: int) -> str:
    """The grpc target: an IP literal goes straight to the address (no resolver), a name through DNS."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return f"dns:///{join_host_port(host, port)}"
    return f"ipv{ip.version}:{join_host_port(host, port)}"


def _status_name(status: int) -> str:
    try:
        return health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    except ValueError:  # a number newer than the protocol we know: Go prints the number
        return str(status)


async def grpc_check(host: str, port: int, service: str, timeout: float) -> Outcome:
    """Ask host:port's grpc.health.v1.Health whether `service` is SERVING, within timeout seconds."""
    addr = join_host_port(host, port)
    budget = go_duration(timeout)
    try:
        channel = grpc.aio.insecure_channel(
            _target(host, port), options=[*_channel_options(timeout), ("grpc.default_authority", addr)]
        )
    except Exception as err:  # a target grpc cannot parse: upstream's dial error, never a timeout
        return Outcome(Result.FAILURE, f"error: failed to connect service at {go_quote(addr)}: {err}")
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = await stub.Check(
                health_pb2.HealthCheckRequest(service=service),
                timeout=max(0.0, timeout),
                wait_for_ready=True,
            )
        except grpc.aio.AioRpcError as err:
            return _rpc_failure(err, channel, addr, budget)
    finally:
        await channel.close()
    if response.status != health_pb2.HealthCheckResponse.SERVING:
        return Outcome(
            Result.FAILURE, f"service unhealthy (responded with {go_quote(_status_name(response.status))})"
        )
    return Outcome(Result.SUCCESS, "service healthy")


def _rpc_failure(err: grpc.aio.AioRpcError, channel: grpc.aio.Channel, addr: str, budget: str) -> Outcome:
    code, message = err.code(), err.details() or ""
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        if channel.get_state() != grpc.ChannelConnectivity.READY:
            return Outcome(
                Result.FAILURE,
                f"timeout: failed to connect service {go_quote(addr)} within {budget}: context deadline exceeded",
            )
        return Outcome(Result.FAILURE, f"timeout: health rpc did not complete within {budget}")
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return Outcome(
            Result.FAILURE,
            f"error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {message}",
        )
    return Outcome(
        Result.FAILURE,
        f"error: health rpc probe failed: rpc error: code = {go_code(code.name)} desc = {message}",
    )
