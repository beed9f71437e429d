"""Proxying a request for an aggregated group/version to its backend, as kube-aggregator's proxy handler
(k8s.io/kube-aggregator/pkg/apiserver/handler_proxy.go): dial an endpoint of the APIService's Service
over TLS (its serving certificate verified with caBundle for the name `<service>.<namespace>.svc`,
unless insecureSkipTLSVerify), present the front-proxy client certificate, and carry the authenticated
user in the requestheader headers (X-Remote-User, X-Remote-Group, X-Remote-Extra-<key>). The caller's
own credentials and any X-Remote-* it sent never travel on."""

from __future__ import annotations

import ssl
from pathlib import Path
from urllib.parse import quote

import aiohttp
from aiohttp import web

from controlplane.apiserver import errors
from controlplane.apiserver.aggregator.apis import APIServiceInfo
from controlplane.apiserver.aggregator.resolve import Endpoint
from controlplane.apiserver.authn import UserInfo
from kubeclient.httpstream.headers import CHUNK_SIZE, HOP_BY_HOP

USER_HEADER = "X-Remote-User"
GROUP_HEADER = "X-Remote-Group"
EXTRA_PREFIX = "X-Remote-Extra-"


def _dropped(header: str) -> bool:
    lower = header.lower()
    return lower in HOP_BY_HOP or lower.startswith(("impersonate-", "x-remote-"))


def escape_extra_key(key: str) -> str:
    """upstream's headerKeyEscape: a key is percent-encoded so any extra survives as a header name."""
    return quote(key, safe="-!#$&'*+.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def user_headers(user: UserInfo) -> list[tuple[str, str]]:
    out = [(USER_HEADER, user.name)]
    out += [(GROUP_HEADER, g) for g in user.groups]
    for key, values in user.extra:
        out += [(EXTRA_PREFIX + escape_extra_key(key), v) for v in values]
    return out


class BackendTLS:
    """TLS contexts towards backends, one per (caBundle, insecure) pair, each with the client certificate."""

    def __init__(self, client_cert: Path | None, client_key: Path | None) -> None:
        self.client_cert, self.client_key = client_cert, client_key
        self._contexts: dict[tuple[bytes, bool], ssl.SSLContext] = {}

    def context(self, info: APIServiceInfo) -> ssl.SSLContext:
        key = (info.ca_bundle, info.insecure)
        ctx = self._contexts.get(key)
        if ctx is None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            if info.insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            elif info.ca_bundle:
                ctx.load_verify_locations(cadata=info.ca_bundle.decode(errors="replace"))
            if self.client_cert and self.client_key:
                ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
            self._contexts[key] = ctx
        return ctx


def server_name(info: APIServiceInfo) -> str:
    return f"{info.service_name}.{info.service_namespace}.svc"


async def relay(
    session: aiohttp.ClientSession,
    tls: BackendTLS,
    request: web.Request,
    info: APIServiceInfo,
    endpoint: Endpoint,
    user: UserInfo,
) -> web.StreamResponse:
    headers: list[tuple[str, str]] = [(k, v) for k, v in request.headers.items() if not _dropped(k)]
    headers += user_headers(user)
    url = f"https://{endpoint.netloc}{request.rel_url.raw_path}"
    if request.rel_url.raw_query_string:
        url += f"?{request.rel_url.raw_query_string}"
    body = await request.read() if request.can_read_body else None
    try:
        upstream = await session.request(
            request.method,
            url,
            headers=headers,
            data=body,
            ssl=tls.context(info),
            server_hostname=None if info.insecure else server_name(info),
            allow_redirects=False,
        )
    except (aiohttp.ClientError, OSError, ssl.SSLError) as err:
        raise errors.ApiError(
            503, "ServiceUnavailable", f"error trying to reach service: {err}", {}
        ) from None
    try:
        out = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for k, v in upstream.headers.items():
            if k.lower() not in HOP_BY_HOP:
                out.headers.add(k, v)
        await out.prepare(request)
        async for chunk in upstream.content.iter_chunked(CHUNK_SIZE):
            await out.write(chunk)
        await out.write_eof()
        return out
    finally:
        upstream.release()
