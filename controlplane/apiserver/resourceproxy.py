"""pods/proxy, services/proxy and nodes/proxy: plain HTTP (and upgrades) relayed to a pod, to one of a
service's endpoints, or to a node's kubelet API, as upstream's ProxyREST and each kind's
ResourceLocation (pkg/registry/core/{pod,service,node}/strategy.go, rest/proxy.go).

The name may carry a scheme and a port: `[https:]web:8080`; the rest of the path after /proxy/ and the
query go to the target. Pods and services are reached at their IPs (loopback and link-local addresses
refused as upstream's IsProxyableIP: `address not allowed`); a node at its kubelet endpoint with the
API server's kubelet-client certificate. The caller's credentials never travel on (Authorization,
Impersonate-* and hop-by-hop headers are dropped). As upstream's proxy transport, the backend is told the
path the client asked for (X-Forwarded-Uri), its CORS headers are dropped, and HTML pages and redirects
to the backend get their absolute links rewritten to go through the proxy (`proxyrewrite.py`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from controlplane.apiserver import errors
from controlplane.apiserver.kinds.base import Proxy as ProxyDeclaration
from controlplane.apiserver.kubeletproxy import kubelet_address
from controlplane.apiserver.proxyrewrite import (
    CORS_HEADERS,
    Rewriter,
    forwarded_uri,
    is_html,
    rewritable_encoding,
    rewrite_body,
)
from kubeclient.httpstream.headers import CHUNK_SIZE, is_hop_by_hop
from kubeclient.httpstream.protocols import is_upgrade_request
from kubeclient.httpstream.upgrade import UpgradeError, dial, proxy_upgrade

if TYPE_CHECKING:
    from controlplane.apiserver.handlers import RestHandler
    from controlplane.apiserver.request import RequestInfo

Obj = dict[str, Any]


def split_name(name: str) -> tuple[str, str, str]:
    """`[scheme:]name[:port]` as upstream's net.SplitSchemeNamePort."""
    parts = name.split(":")
    if len(parts) == 1:
        return "", parts[0], ""
    if len(parts) == 2:
        return "", parts[0], parts[1]
    if len(parts) == 3 and parts[0] in ("http", "https"):
        return parts[0], parts[1], parts[2]
    raise errors.bad_request(f"invalid request {name!r}")


def _proxyable(ip: str) -> str:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise errors.bad_request("address not allowed") from None
    if addr.is_loopback or addr.is_link_local or addr.is_multicast:
        raise errors.bad_request("address not allowed")
    return f"[{ip}]" if addr.version == 6 else ip


async def pod_location(rest: RestHandler, info: RequestInfo) -> tuple[str, ssl.SSLContext | None]:
    scheme, name, port = split_name(info.name)
    pod = (await rest.registry.get(info.resource, info.namespace, name)).obj
    if not port:
        # Upstream's pod ResourceLocation: the first port any container declares, else none at all.
        declared = [
            p for c in (pod.get("spec") or {}).get("containers") or [] for p in (c.get("ports") or [])[:1]
        ]
        port = str(declared[0].get("containerPort", "")) if declared else ""
    host = _proxyable((pod.get("status") or {}).get("podIP") or "")
    return f"{scheme or 'http'}://{host}{':' + port if port else ''}", None


async def service_location(rest: RestHandler, info: RequestInfo) -> tuple[str, ssl.SSLContext | None]:
    """The first ready address of the Endpoints whose port matches the asked service port (by name or
    number; the only port when none is asked)."""
    scheme, name, port = split_name(info.name)
    svc = (await rest.registry.get(info.resource, info.namespace, name)).obj
    ports = (svc.get("spec") or {}).get("ports") or []
    wanted = [p for p in ports if not port or p.get("name") == port or str(p.get("port")) == port]
    if not wanted:
        raise errors.ApiError(503, "ServiceUnavailable", f'no endpoints available for service "{name}"')
    endpoints_kind = rest.registry.kinds.by_path("", "v1", "endpoints")
    assert endpoints_kind is not None
    try:
        endpoints = (await rest.registry.get(endpoints_kind, info.namespace, name)).obj
    except errors.ApiError:
        endpoints = {}
    port_name = wanted[0].get("name", "")
    for subset in endpoints.get("subsets") or []:
        for ep_port in subset.get("ports") or []:
            if (ep_port.get("name") or "") == (port_name or ""):
                for address in subset.get("addresses") or []:
                    host = _proxyable(address.get("ip", ""))
                    return f"{scheme or 'http'}://{host}:{ep_port['port']}", None
    raise errors.ApiError(503, "ServiceUnavailable", f'no endpoints available for service "{name}"')


async def node_location(rest: RestHandler, info: RequestInfo) -> tuple[str, ssl.SSLContext | None]:
    scheme, name, port = split_name(info.name)
    node = (await rest.registry.get(info.resource, "", name)).obj
    if rest.kubelet is None:
        raise errors.internal("this server has no client certificate for node agents (serving plain HTTP)")
    host, kubelet_port = kubelet_address(node, rest.kubelet.address_types)
    netloc = f"[{host}]" if ":" in host else host
    return f"{scheme or 'https'}://{netloc}:{port or kubelet_port}", rest.kubelet.ssl_context


class Proxy(ProxyDeclaration):
    """`<kind>/proxy`: a Connecter for upstream's proxyMethods (GET, POST, PUT, PATCH, DELETE, HEAD,
    OPTIONS), authorized by method as upstream's RequestInfo names it (HEAD as get, OPTIONS as the
    empty verb, which only a `*` rule allows)."""

    def __init__(self, kind: str, locate: Any) -> None:
        super().__init__(kind)
        self._locate = locate

    async def connect(self, rest: RestHandler, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        base, context = await self._locate(rest, info)
        backend_path = "/" + info.subpath
        if is_upgrade_request(request.headers):
            url = _with_query(base + backend_path, request)
            try:
                return await proxy_upgrade(request, url, context)
            except UpgradeError as err:
                raise errors.ApiError(503, "ServiceUnavailable", str(err)) from None
        if not info.subpath and not request.path.endswith("/") and request.method in ("GET", "HEAD"):
            # upstream's proxyRedirectsforRootPath (issue 4958): the proxy root always ends in '/'.
            query = request.rel_url.raw_query_string
            location = request.rel_url.raw_path + "/" + (f"?{query}" if query else "")
            raise web.HTTPMovedPermanently(location)
        suffix = backend_path
        prepend = request.path[: -len(suffix)] if request.path.endswith(suffix) else request.path
        host = urlsplit(base).netloc
        rewriter = Rewriter(prepend.rstrip("/"), host, request.host)
        return await _relay(
            request, _with_query(base + backend_path, request), context, rewriter, backend_path
        )


def _with_query(url: str, request: web.Request) -> str:
    query = request.rel_url.raw_query_string
    return f"{url}?{query}" if query else url


async def _relay(
    request: web.Request,
    url: str,
    context: ssl.SSLContext | None,
    rewriter: Rewriter,
    backend_path: str,
) -> web.StreamResponse:
    headers = [
        (k, v)
        for k, v in request.headers.items()
        if not is_hop_by_hop(k)
        and not k.lower().startswith("impersonate-")
        and k.lower() != "x-forwarded-uri"
    ]
    headers.append(("X-Forwarded-Uri", forwarded_uri(rewriter.prepend, backend_path)))
    if request.method == "HEAD":
        return await _head(request, url, context, headers, rewriter)
    body = await request.read() if request.can_read_body else None
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as http:
        try:
            upstream = await http.request(
                request.method,
                url,
                headers=headers,
                data=body,
                ssl=context if context else False,
                allow_redirects=False,
            )
        except (aiohttp.ClientError, OSError) as err:
            # upstream's proxy answers 503 when the backend cannot be dialled.
            raise errors.ApiError(
                503, "ServiceUnavailable", f"error trying to reach service: {err}", {}
            ) from None
        try:
            return await _answer(request, upstream, rewriter, urlsplit(url).scheme)
        finally:
            upstream.release()


async def _head(
    request: web.Request,
    url: str,
    context: ssl.SSLContext | None,
    headers: list[tuple[str, str]],
    rewriter: Rewriter,
) -> web.StreamResponse:
    """HEAD by hand: servers that write a body after a HEAD's headers anyway (busybox httpd does) are
    answered as Go's client answers them, by reading the head and closing, where aiohttp's strict
    parser refuses the whole response."""
    if context is None and url.startswith("https:"):
        context = _UNVERIFIED
    try:
        backend = await dial(url, "HEAD", [*headers, ("Connection", "close")], context)
    except UpgradeError as err:
        raise errors.ApiError(
            503, "ServiceUnavailable", f"error trying to reach service: {err}", {}
        ) from None
    backend.close()
    out = web.StreamResponse(status=backend.status, reason=backend.reason)
    scheme = urlsplit(url).scheme
    for k, v in backend.headers.items():
        lower = k.lower()
        if lower in CORS_HEADERS or (is_hop_by_hop(k) and lower != "content-length"):
            continue
        out.headers.add(k, rewriter.location(v, scheme) if lower == "location" else v)
    await out.prepare(request)
    await out.write_eof()
    return out


def _unverified() -> ssl.SSLContext:
    # pods/proxy and services/proxy over https do not verify the pod's certificate (upstream neither).
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


_UNVERIFIED = _unverified()


async def _answer(
    request: web.Request, upstream: aiohttp.ClientResponse, rewriter: Rewriter, scheme: str
) -> web.StreamResponse:
    out = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    for k, v in upstream.headers.items():
        lower = k.lower()
        if lower in CORS_HEADERS or (is_hop_by_hop(k) and lower != "content-length"):
            continue
        if lower == "location":
            v = rewriter.location(v, scheme)
        out.headers.add(k, v)
    encoding = upstream.headers.get("Content-Encoding", "")
    rewrite = (
        "Location" not in upstream.headers
        and request.method != "HEAD"
        and is_html(upstream.headers.get("Content-Type", ""))
        and rewritable_encoding(encoding)
    )
    if rewrite:
        page = await upstream.read()
        try:
            page = await asyncio.to_thread(rewrite_body, page, encoding, rewriter)
        except ValueError as err:
            raise errors.internal(f"proxy could not rewrite the page: {err}") from None
        out.headers.popall("Content-Length", None)
        out.content_length = len(page)
        await out.prepare(request)
        await out.write(page)
        await out.write_eof()
        return out
    await out.prepare(request)
    async for chunk in upstream.content.iter_chunked(CHUNK_SIZE):
        await out.write(chunk)
    await out.write_eof()
    return out
