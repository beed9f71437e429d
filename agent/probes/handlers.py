"""The dispatcher: run one probe or lifecycle handler as the API gives it (camelCase JSON), the way
upstream's prober picks its handler (pkg/kubelet/prober/prober.go runProbe): exec, then httpGet, then
tcpSocket, then grpc. Ports resolve by number or by the container's port name; a bad port is Unknown
with the resolver's error, as upstream returns probe.Unknown with it.
"""

from __future__ import annotations

import re
from typing import Any

from agent.probes.exec import exec_probe
from agent.probes.http import http_probe, probe_url
from agent.probes.result import Outcome, Result, Target
from agent.probes.tcp import tcp_probe

_VERSION = re.compile(r"v?(\d+)\.(\d+)")


def user_agent(version: str, purpose: str = "probe") -> str:
    """`kube-<purpose>/<major>.<minor>` from "v1.32.0" or "1.32.0-pykubelet", as upstream's userAgent;
    lifecycle httpGet hooks use purpose "lifecycle"."""
    match = _VERSION.match(version.strip())
    return f"kube-{purpose}/{match.group(1)}.{match.group(2)}" if match else f"kube-{purpose}/{version}"


def http_request(action: dict, host: str, port: int) -> tuple[str, list[tuple[str, str]]]:
    """The URL and headers an httpGet action (probe or hook) asks for, at `host` and the resolved `port`."""
    scheme = (action.get("scheme") or "http").lower()
    headers = [(h.get("name", ""), h.get("value", "")) for h in action.get("httpHeaders") or []]
    return probe_url(scheme, host, port, action.get("path") or ""), headers


def resolve_port(target: Target, value: Any) -> int:
    # An unset IntOrString is the integer 0, which upstream rejects as "invalid port number: 0".
    if value is None:
        value = 0
    if not isinstance(value, int | str):
        raise ValueError(f"invalid port number: {value}")
    return target.port(value)


async def run_handler(action: dict, target: Target, timeout: float, cri: Any, user_agent: str) -> Outcome:
    """Run the handler `action` names (a probe or a lifecycle handler) against `target`, bounded by
    `timeout` seconds. `cri` is the agent's CRIClient (used by exec only); `user_agent` is sent by
    httpGet unless the handler's own headers set one."""
    spec = action.get("exec")
    if spec is not None:
        return await exec_probe(cri, target.container_id, list(spec.get("command") or []), timeout)

    for kind in ("httpGet", "tcpSocket", "grpc"):
        spec = action.get(kind)
        if spec is None:
            continue
        try:
            port = resolve_port(target, spec.get("port"))
        except ValueError as err:
            return Outcome(Result.UNKNOWN, str(err))
        # httpGet and tcpSocket may name a host; the grpc action has none and always probes the pod.
        host = spec.get("host") or target.pod_ip
        if kind == "httpGet":
            return await http_probe(*http_request(spec, host, port), timeout, user_agent)
        if kind == "tcpSocket":
            return await tcp_probe(host, port, timeout)
        # Imported here: the gRPC health client (grpcio channels, generated stubs) loads only when a pod
        # asks for it.
        from agent.probes.grpc import grpc_check

        return await grpc_check(target.pod_ip, port, spec.get("service") or "", timeout)

    return Outcome(Result.UNKNOWN, "missing probe handler")
