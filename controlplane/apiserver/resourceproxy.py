"""pods/proxy, services/proxy and nodes/proxy: plain HTTP (and upgrades) relayed to a pod, to one of a
service's endpoints, or to a node's kubelet API, as upstream's ProxyREST and each kind's
ResourceLocation (pkg/registry/core/{pod,service,node}/strategy.go, rest/proxy.go).

The name may carry a scheme and a port: `[https:]web:8080`; the rest of the path after /proxy/ and the
query go to the target. Pods and services are reached at their IPs (loopback and link-local addresses
refused as upstream's IsProxyableIP: `address not allowed`); a node at its kubelet endpoint with the
API server's kubelet-client certificate. The caller's credentials never travel on (Authorization,
Impersonate-* and hop-by-hop headers are dropped). Unlike upstream, HTML links are not rewritten.
"""

from __future__ import annotations

import ipaddress
import ssl
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from controlplane.apiserver import errors
from controlplane.apiserver.kinds.base import Subresource
from controlplane.apiserver.kubeletproxy import kubelet_address
from kubeclient.httpstream.protocols import is_upgrade_request
from kubeclient.httpstream.upgrade import UpgradeError, proxy_upgrade

if TYPE_CHECKING:
    from controlplane.apiserver.handlers import RestHandler
    from controlplane.apiserver.request import RequestInfo

Obj = dict[str, Any]
_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authenticate",
    "proxy-authorization",
    "authorization",
    "host",
    "content-length",
}
_CHUNK = 64 * 1024


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
    host = _proxyable((pod.get("status") or {}).get("podIP") or "")
    return f"{scheme or 'http'}://{host}{':' + port if port else ''}", None


async def service_location(rest: RestHandler, info: RequestInfo) -> tuple[str, ssl.SSLContext | None]:
    """The first ready address of the Endpoints whose port matches the asked service port (by name or
    number; the only port when none is asked)."""
    from controlplane.apiserver import kinds

    scheme, name, port = split_name(info.name)
    svc = (await rest.registry.get(info.resource, info.namespace, name)).obj
    ports = (svc.get("spec") or {}).get("ports") or []
    wanted = [p for p in ports if not port or p.get("name") == port or str(p.get("port")) == port]
    if not wanted:
        raise errors.ApiError(503, "ServiceUnavailable", f'no endpoints available for service "{name}"', {})
    endpoints_kind = kinds.by_path("", "v1", "endpoints")
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
    raise errors.ApiError(503, "ServiceUnavailable", f'no endpoints available for service "{name}"', {})


async def node_location(rest: RestHandler, info: RequestInfo) -> tuple[str, ssl.SSLContext | None]:
    scheme, name, port = split_name(info.name)
    node = (await rest.registry.get(info.resource, "", name)).obj
    host, kubelet_port = kubelet_address(node)
    if rest.kubelet is None:
        raise errors.internal("this server has no client certificate for node agents (serving plain HTTP)")
    netloc = f"[{host}]" if ":" in host else host
    return f"{scheme or 'https'}://{netloc}:{port or kubelet_port}", rest.kubelet.ssl_context


class Proxy(Subresource):
    """`<kind>/proxy`: a Connecter for every method, authorized by method (get, create, update, patch,
    delete) on the subresource."""

    name = "proxy"
    verbs = ("create", "delete", "get", "patch", "update")
    connects = True

    def __init__(self, kind: str, locate: Any) -> None:
        self.kind, self._locate = kind, locate

    async def connect(self, rest: RestHandler, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        base, context = await self._locate(rest, info)
        url = f"{base}/{info.subpath}"
        query = request.rel_url.raw_query_string
        if query:
            url += f"?{query}"
        if is_upgrade_request(request.headers):
            try:
                return await proxy_upgrade(request, url, context)
            except UpgradeError as err:
                raise errors.ApiError(503, "ServiceUnavailable", str(err), {}) from None
        return await _relay(rest, request, url, context)


async def _relay(
    rest: RestHandler, request: web.Request, url: str, context: ssl.SSLContext | None
) -> web.StreamResponse:
    headers = {
        k: v
        for k, v in request.headers.items()
        if k.lower() not in _HOP and not k.lower().startswith("impersonate-")
    }
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
            out = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for k, v in upstream.headers.items():
                if k.lower() not in _HOP:
                    out.headers.add(k, v)
            await out.prepare(request)
            async for chunk in upstream.content.iter_chunked(_CHUNK):
                await out.write(chunk)
            await out.write_eof()
            return out
        finally:
            upstream.release()
