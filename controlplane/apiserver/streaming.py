"""pods/exec, pods/attach and pods/portforward: their options decoded from the query and admitted (operation
CONNECT: the admission webhooks and ValidatingAdmissionPolicies registered for it see the options, before
the pod is looked up, as upstream's ConnectResource), checked here, then streamed to the pod's kubelet with the
API server's kubelet-client identity, as upstream's ExecREST, AttachREST and PortForwardREST
(pkg/registry/core/pod/rest/subresources.go, strategy.go's streamLocation).

How the client's upgrade travels, as in 1.32:
- WebSocket asking for v5.channel.k8s.io (kubectl exec/attach/cp, the official clients): ended here and
  translated to SPDY to the kubelet (streamtranslator.py).
- WebSocket asking for SPDY/3.1+portforward.k8s.io (kubectl port-forward): a tunnel; the SPDY inside
  the WebSocket messages is spliced to a SPDY upgrade of the kubelet's /portForward (tunnel()); the
  kubelet's bytes are framed into WebSocket messages in the transport's callback as they arrive
  (kubeclient/httpstream/relay.py), the bulk direction of a port-forward.
- Any other upgrade (SPDY/3.1, kubectl's fallback; older WebSocket subprotocols, the official client's
  port-forward): proxied byte for byte to the kubelet, who proxies it to the runtime.
- No upgrade at all: 400 "Upgrade request required".
Errors before any upgrade are upstream's: no such pod 404, `container c is not valid for pod p`, `pod p
does not have a host assigned` (400).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import aiohttp
from aiohttp import web

from controlplane.apiserver import errors
from controlplane.apiserver.admission import AdmissionRequest
from controlplane.apiserver.kinds.node import KIND as NODE
from controlplane.apiserver.kubeletproxy import kubelet_address, log_container
from controlplane.apiserver.streamtranslator import Streams, translate
from kubeclient.httpstream import protocols as P
from kubeclient.httpstream.relay import HIGH_WATER, websocket_sink
from kubeclient.httpstream.upgrade import UpgradeError, dial, proxy_upgrade

if TYPE_CHECKING:
    from controlplane.apiserver.handlers import RestHandler
    from controlplane.apiserver.request import RequestInfo

Obj = dict[str, Any]
_TRUE = ("1", "t", "T", "TRUE", "true", "True")  # Go's strconv.ParseBool
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def _bool(query: Any, name: str) -> bool:
    value = query.get(name, "")
    if value in _TRUE:
        return True
    if value in ("", *_FALSE):
        return False
    raise errors.bad_request(
        f'{name}: invalid value "{value}": strconv.ParseBool: parsing "{value}": invalid syntax'
    )


@dataclass(frozen=True)
class StreamRequest:
    """PodExecOptions / PodAttachOptions as the query carries them."""

    container: str
    command: tuple[str, ...]
    streams: Streams

    @classmethod
    def from_options(cls, pod: Obj, opts: Obj, needs_command: bool) -> StreamRequest:
        """From the PodExecOptions / PodAttachOptions admission passed (a webhook may have changed them)."""
        streams = Streams(*(bool(opts.get(name)) for name in ("stdin", "stdout", "stderr", "tty")))
        command = tuple(str(c) for c in opts.get("command") or ())
        if needs_command and not command:
            raise errors.bad_request("you must specify at least 1 command")
        if not (streams.stdin or streams.stdout or streams.stderr):
            raise errors.bad_request("you must specify at least 1 of stdin, stdout, stderr")
        return cls(log_container(pod, str(opts.get("container") or "")), command, streams)

    def kubelet_query(self) -> list[tuple[str, str]]:
        """upstream's streamParams: the kubelet's names for the streams."""
        out = [("command", c) for c in self.command]
        for flag, name in (
            (self.streams.stdin, "input"),
            (self.streams.stdout, "output"),
            (self.streams.stderr, "error"),
            (self.streams.tty, "tty"),
        ):
            if flag:
                out.append((name, "1"))
        return out


async def _pod_and_node(rest: RestHandler, info: RequestInfo) -> tuple[Obj, Obj]:
    pod = (await rest.registry.get(info.resource, info.namespace, info.name)).obj
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name:
        raise errors.bad_request(f"pod {pod['metadata']['name']} does not have a host assigned")
    if rest.kubelet is None:
        raise errors.internal("this server has no client certificate for node agents (serving plain HTTP)")
    node = await rest.registry.get(NODE, "", node_name)
    return pod, node.obj


def _kubelet_url(rest: RestHandler, node: Obj, path: str, query: list[tuple[str, str]]) -> str:
    assert rest.kubelet is not None
    host, port = kubelet_address(node, rest.kubelet.address_types)
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"https://{netloc}{path}" + (f"?{urlencode(query, quote_via=quote)}" if query else "")


def stream_options(query: Any, verb: str) -> Obj:
    """The query as upstream decodes it into PodExecOptions / PodAttachOptions (Go's JSON form: the
    booleans and container omitted when empty, exec's command always there)."""
    kind = "PodExecOptions" if verb == "exec" else "PodAttachOptions"
    opts: Obj = {"kind": kind, "apiVersion": "v1"}
    for name in ("stdin", "stdout", "stderr", "tty"):
        if _bool(query, name):
            opts[name] = True
    if query.get("container"):
        opts["container"] = query["container"]
    if verb == "exec":
        opts["command"] = list(query.getall("command", [])) or None
    return opts


def port_forward_options(query: Any) -> Obj:
    """The query as upstream decodes it into PodPortForwardOptions (400 for a port out of range)."""
    ports: list[int] = []
    for value in query.getall("ports", []):
        for port in value.split(","):
            if not port.strip().isdigit() or not 0 < int(port) < 65536:
                raise errors.bad_request(f'ports: invalid value "{port}": port must be between 1 and 65535')
            ports.append(int(port))
    return {"kind": "PodPortForwardOptions", "apiVersion": "v1", **({"ports": ports} if ports else {})}


async def admit_connect(rest: RestHandler, request: web.Request, info: RequestInfo, opts: Obj) -> Obj:
    """Admission for CONNECT, as upstream's ConnectResource runs it before connecting: the webhooks and
    policies registered for CONNECT on the subresource see the options (and may change or refuse them)."""
    await rest.registry.admission.connect(
        AdmissionRequest(
            "CONNECT",
            info.resource,
            info.subresource,
            info.namespace,
            info.name,
            opts,
            None,
            rest.user(request),
            rest.registry,
        )
    )
    return opts


async def connect_stream(
    rest: RestHandler, request: web.Request, info: RequestInfo, verb: str
) -> web.StreamResponse:
    """pods/exec and pods/attach."""
    admitted = await admit_connect(rest, request, info, stream_options(request.query, verb))
    pod, node = await _pod_and_node(rest, info)
    opts = StreamRequest.from_options(pod, admitted, needs_command=verb == "exec")
    meta = pod["metadata"]
    path = f"/{verb}/{quote(meta['namespace'])}/{quote(meta['name'])}/{quote(opts.container)}"
    url = _kubelet_url(rest, node, path, opts.kubelet_query())
    assert rest.kubelet is not None
    if P.is_websocket_request(request.headers) and P.STREAM_V5 in P.websocket_protocols(request.headers):
        return await translate(request, url, rest.kubelet.ssl_context, opts.streams)
    return await _upgrade(request, url, rest)


async def connect_port_forward(
    rest: RestHandler, request: web.Request, info: RequestInfo
) -> web.StreamResponse:
    admitted = await admit_connect(rest, request, info, port_forward_options(request.query))
    pod, node = await _pod_and_node(rest, info)
    ports = [("port", str(int(p))) for p in admitted.get("ports") or ()]
    meta = pod["metadata"]
    url = _kubelet_url(rest, node, f"/portForward/{quote(meta['namespace'])}/{quote(meta['name'])}", ports)
    assert rest.kubelet is not None
    tunneled = P.tunneled_spdy_protocols(request.headers) if P.is_websocket_request(request.headers) else []
    if tunneled:
        return await tunnel(request, url, rest, tunneled)
    return await _upgrade(request, url, rest)


async def _upgrade(request: web.Request, url: str, rest: RestHandler) -> web.StreamResponse:
    if not P.is_upgrade_request(request.headers):
        raise errors.bad_request("Upgrade request required")
    assert rest.kubelet is not None
    try:
        return await proxy_upgrade(request, url, rest.kubelet.ssl_context)
    except UpgradeError as err:
        raise errors.internal(str(err)) from None


async def tunnel(
    request: web.Request, url: str, rest: RestHandler, spdy_protocols: list[str]
) -> web.StreamResponse:
    """upstream's TunnelingHandler: a SPDY upgrade of the kubelet, whose bytes ride WebSocket messages."""
    assert rest.kubelet is not None
    headers = [("Connection", "Upgrade"), ("Upgrade", P.SPDY_31)]
    headers += [(P.PROTOCOL_VERSION_HEADER, p) for p in spdy_protocols]
    try:
        backend = await dial(url, "POST", headers, rest.kubelet.ssl_context)
    except UpgradeError as err:
        raise errors.internal(str(err)) from None
    if backend.status != 101:
        body = await backend.body()
        backend.close()
        return web.Response(
            status=backend.status,
            body=body,
            headers={"Content-Type": backend.headers.get("Content-Type", "text/plain; charset=utf-8")},
        )
    chosen = backend.headers.get(P.PROTOCOL_VERSION_HEADER, "").strip()
    ws = web.WebSocketResponse(protocols=(P.TUNNELING_PREFIX + chosen,) if chosen else (), max_msg_size=0)
    try:
        writer = await ws.prepare(request)
        transport = request.transport
        if transport is None:
            raise ConnectionResetError("client connection closed")
    except (ConnectionError, OSError):
        backend.close()
        raise

    async def up() -> None:
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                backend.writer.write(msg.data)
                if backend.writer.transport.get_write_buffer_size() > HIGH_WATER:
                    await backend.writer.drain()

    ends: list[asyncio.Future[None]] = [asyncio.ensure_future(up())]
    try:
        ends.append(backend.reader.divert(backend.writer.transport, websocket_sink(transport, writer.drain)))
        await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
    finally:
        backend.reader.stop()
        for end in ends:
            end.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                await end
        backend.close()
        if not ws.closed:
            with contextlib.suppress(ConnectionError, OSError):
                await ws.close()
    return ws
