"""POSTing a review to a webhook over HTTPS (upstream's webhook ClientManager and rest client): to its
`url`, or to a Service `namespace/name:port/path` resolved through the Service's Endpoints to a pod
address (as kube-apiserver with --enable-aggregator-routing) while TLS verifies the name
`<service>.<namespace>.svc`; the server is checked against `caBundle` (else the system roots). Failures
are reported in Go's words (`Post "https://...": dial tcp ...: connect: connection refused`), which is
what upstream's error texts carry. One aiohttp session per event loop, TLS contexts cached by bundle."""

from __future__ import annotations

import asyncio
import errno
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

from controlplane.apiserver.webhooks.source import Webhook
from controlplane.storage.cache import WatchCache


class CallError(Exception):
    """The call failed before a review came back; str() is Go's `Post "url": reason`."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes


class WebhookClient:
    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._contexts: dict[bytes, ssl.SSLContext] = {}

    def _ssl(self, bundle: bytes) -> ssl.SSLContext:
        ctx = self._contexts.get(bundle)
        if ctx is None:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
            if bundle:
                ctx.load_verify_locations(cadata=bundle.decode("ascii", errors="replace"))
            self._contexts[bundle] = ctx
        return ctx

    def _client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=30, enable_cleanup_closed=True),
                skip_auto_headers=("User-Agent",),
            )
            self._loop = loop
        return self._session

    def endpoint(self, hook: Webhook, cache: WatchCache) -> tuple[str, str, str | None]:
        """(the URL as reported, the URL dialled, the TLS server name)."""
        if hook.service is None:
            return hook.url, hook.url, None
        # Imported here: the resolver reads the Service and Endpoints kinds, whose table lists ours.
        from controlplane.apiserver.aggregator.resolve import ResolveError, resolve

        svc = hook.service
        server_name = f"{svc.name}.{svc.namespace}.svc"
        shown = f"https://{server_name}:{svc.port}{svc.path}"
        try:
            found = resolve(cache, svc.namespace, svc.name, svc.port)
        except ResolveError as err:
            raise CallError(f'Post "{shown}?timeout={hook.timeout}s": {_resolve_text(err, svc.name, svc.port)}') from None
        return shown, f"https://{found[0].netloc}{svc.path}", server_name

    async def post(self, hook: Webhook, cache: WatchCache, body: bytes) -> Reply:
        shown, dialled, server_name = self.endpoint(hook, cache)
        query = f"?timeout={hook.timeout}s"
        where = f'Post "{shown}{query}"'
        try:
            ctx = self._ssl(hook.ca_bundle)
        except ssl.SSLError as err:
            raise CallError(f"{where}: tls: failed to load caBundle: {err.reason or err}") from None
        try:
            async with self._client().post(
                dialled + query,
                data=body,
                headers={"Content-Type": "application/json", "Accept": "application/json, */*"},
                ssl=ctx,
                server_hostname=server_name,
                timeout=aiohttp.ClientTimeout(total=hook.timeout),
                allow_redirects=False,
            ) as resp:
                return Reply(resp.status, await resp.read())
        except TimeoutError:
            raise CallError(f"{where}: context deadline exceeded") from None
        except aiohttp.ClientConnectorCertificateError as err:
            raise CallError(f"{where}: {_cert_text(err.certificate_error)}") from None
        except aiohttp.ClientSSLError as err:
            raise CallError(f"{where}: remote error: tls: {err}") from None
        except aiohttp.ClientConnectorError as err:
            raise CallError(f"{where}: {_dial_text(dialled, err)}") from None
        except (aiohttp.ClientError, OSError) as err:
            raise CallError(f"{where}: {err or type(err).__name__}") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _resolve_text(err: Exception, name: str, port: int) -> str:
    """proxy.ResolveEndpoint's errors."""
    return {
        "ServiceNotFound": f'services "{name}" not found',
        "ServicePortError": f'no service port {port} found for service "{name}"',
        "EndpointsNotFound": f'endpoints "{name}" not found',
    }.get(getattr(err, "reason", ""), f'no endpoints available for service "{name}"')


def _cert_text(err: Exception) -> str:
    text = str(getattr(err, "verify_message", "") or err)
    if "unable to get local issuer" in text or "self-signed" in text or "self signed" in text:
        return "tls: failed to verify certificate: x509: certificate signed by unknown authority"
    if "Hostname mismatch" in text or "IP address mismatch" in text:
        return f"tls: failed to verify certificate: x509: certificate is not valid for the requested name ({text})"
    if "expired" in text:
        return "tls: failed to verify certificate: x509: certificate has expired or is not yet valid"
    return f"tls: failed to verify certificate: {text}"


def _dial_text(url: str, err: aiohttp.ClientConnectorError) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or 443
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    cause = err.os_error
    if isinstance(cause, ConnectionRefusedError) or getattr(cause, "errno", None) == errno.ECONNREFUSED:
        return f"dial tcp {address}: connect: connection refused"
    if getattr(cause, "errno", None) in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return f"dial tcp {address}: connect: no route to host"
    if isinstance(cause, OSError) and "Name or service not known" in str(cause):
        return f"dial tcp: lookup {host}: no such host"
    return f"dial tcp {address}: {cause or err}"
