"""POSTing a review to a webhook over HTTPS (upstream's webhook ClientManager and rest client): to its
`url`, or to a Service `namespace/name:port/path` resolved through the Service's Endpoints to a pod
address (as kube-apiserver with --enable-aggregator-routing) while TLS verifies the name
`<service>.<namespace>.svc`; the server is checked against `caBundle` (else the system roots).

A webhook sits on the path of every write it selects, so the client is lean: HTTP/1.1 over asyncio
streams with kept-alive connections per (address, TLS name, bundle), a request retried once on a fresh
connection when a kept one turns out closed by the server, and the whole exchange bounded by
timeoutSeconds. Failures are reported in Go's words (`Post "https://...": dial tcp ...: connect:
connection refused`), which is what upstream's error texts carry."""

from __future__ import annotations

import asyncio
import errno
import ssl
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from controlplane.apiserver.webhooks.source import Service
from controlplane.storage.cache import WatchCache
from kubeclient.tlsverify import go_compatible

MAX_RESPONSE = 3 * 1024 * 1024  # upstream reads at most this much of a webhook's answer
_IDLE_PER_KEY = 32


class Target(Protocol):
    """What a call needs of a webhook (an admission Webhook, a CRD's conversion webhook)."""

    @property
    def url(self) -> str: ...
    @property
    def service(self) -> Service | None: ...
    @property
    def ca_bundle(self) -> bytes: ...
    @property
    def timeout(self) -> float: ...


class CallError(Exception):
    """The call failed before a review came back; str() is Go's `Post "url": reason`."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes


@dataclass(frozen=True)
class _Key:
    host: str
    port: int
    server_name: str
    bundle: bytes


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    reused: bool = False

    def close(self) -> None:
        self.writer.close()


class _Closed(Exception):
    """A kept-alive connection the server had closed: nothing of the answer arrived."""


@dataclass
class _Pool:
    idle: dict[_Key, list[_Conn]] = field(default_factory=dict)

    def take(self, key: _Key) -> _Conn | None:
        conns = self.idle.get(key)
        while conns:
            conn = conns.pop()
            if not conn.writer.is_closing() and not conn.reader.at_eof():
                conn.reused = True
                return conn
            conn.close()
        return None

    def give(self, key: _Key, conn: _Conn) -> None:
        conns = self.idle.setdefault(key, [])
        if len(conns) < _IDLE_PER_KEY:
            conns.append(conn)
        else:
            conn.close()


class WebhookClient:
    def __init__(self) -> None:
        self._contexts: dict[bytes, ssl.SSLContext] = {}
        self._pools: dict[asyncio.AbstractEventLoop, _Pool] = {}

    def _ssl(self, bundle: bytes) -> ssl.SSLContext:
        ctx = self._contexts.get(bundle)
        if ctx is None:
            ctx = go_compatible(ssl.create_default_context(ssl.Purpose.SERVER_AUTH))
            if bundle:
                ctx.load_verify_locations(cadata=bundle.decode("ascii", errors="replace"))
            self._contexts[bundle] = ctx
        return ctx

    def _pool(self) -> _Pool:
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            self._pools = {lp: p for lp, p in self._pools.items() if not lp.is_closed()}
            pool = self._pools[loop] = _Pool()
        return pool

    def endpoint(self, hook: Target, cache: WatchCache) -> tuple[str, str, int, str, str]:
        """(the URL as reported, host and port dialled, request path, TLS server name)."""
        if hook.service is None:
            parts = urlsplit(hook.url)
            host = parts.hostname or ""
            return hook.url, host, parts.port or 443, parts.path or "/", host
        # Imported here: the resolver reads the Service and Endpoints kinds, whose table lists ours.
        from controlplane.apiserver.aggregator.resolve import resolve

        svc = hook.service
        server_name = f"{svc.name}.{svc.namespace}.svc"
        shown = f"https://{server_name}:{svc.port}{svc.path or '/'}"
        try:
            found = resolve(cache, svc.namespace, svc.name, svc.port)
        except Exception as err:  # ResolveError
            raise CallError(
                f'Post "{shown}?timeout={hook.timeout:g}s": {_resolve_text(err, svc.name, svc.port)}'
            ) from None
        return shown, found[0].host, found[0].port, svc.path or "/", server_name

    async def post(self, hook: Target, cache: WatchCache, body: bytes) -> Reply:
        shown, host, port, path, server_name = self.endpoint(hook, cache)
        query = f"?timeout={hook.timeout:g}s"
        where = f'Post "{shown}{query}"'
        try:
            ctx = self._ssl(hook.ca_bundle)
        except ssl.SSLError as err:
            raise CallError(f"{where}: tls: failed to load caBundle: {err.reason or err}") from None
        key = _Key(host, port, server_name, hook.ca_bundle)
        head = (
            f"POST {path}{query} HTTP/1.1\r\nHost: {_netloc(server_name, port)}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, */*\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        try:
            async with asyncio.timeout(hook.timeout):
                return await self._exchange(key, ctx, head + body)
        except TimeoutError:
            raise CallError(f"{where}: context deadline exceeded") from None
        except ssl.SSLCertVerificationError as err:
            raise CallError(f"{where}: {_cert_text(err)}") from None
        except ssl.SSLError as err:
            raise CallError(f"{where}: remote error: tls: {err.reason or err}") from None
        except CallError as err:
            raise CallError(f"{where}: {err}") from None
        except EOFError:  # the answer ended early (asyncio.IncompleteReadError)
            raise CallError(f"{where}: unexpected EOF") from None
        except ValueError as err:  # a line beyond the reader's limit, a malformed length
            raise CallError(f"{where}: malformed HTTP response: {err}") from None
        except OSError as err:
            raise CallError(f"{where}: {_dial_text(host, port, err)}") from None

    async def _exchange(self, key: _Key, ctx: ssl.SSLContext, request: bytes) -> Reply:
        pool = self._pool()
        for _ in range(2):
            conn = pool.take(key)
            if conn is None:
                reader, writer = await asyncio.open_connection(
                    key.host, key.port, ssl=ctx, server_hostname=key.server_name, limit=MAX_RESPONSE
                )
                conn = _Conn(reader, writer)
            try:
                reply, keep = await _roundtrip(conn, request)
            except _Closed:
                conn.close()
                continue  # the server closed a kept connection: once more, on a new one
            except BaseException:
                conn.close()
                raise
            if keep:
                pool.give(key, conn)
            else:
                conn.close()
            return reply
        raise CallError("EOF")

    async def close(self) -> None:
        for pool in self._pools.values():
            for conns in pool.idle.values():
                for conn in conns:
                    conn.close()
        self._pools.clear()


async def _roundtrip(conn: _Conn, request: bytes) -> tuple[Reply, bool]:
    try:
        conn.writer.write(request)
        await conn.writer.drain()
        status_line = await conn.reader.readline()
    except (ConnectionResetError, BrokenPipeError):
        if conn.reused:
            raise _Closed() from None
        raise
    if not status_line:
        if conn.reused:
            raise _Closed()
        raise CallError("EOF")
    try:
        status = int(status_line.split(b" ", 2)[1])
    except (IndexError, ValueError):
        raise CallError(f"malformed HTTP response {status_line[:64]!r}") from None
    length: int | None = None
    chunked = False
    keep = not status_line.startswith(b"HTTP/1.0")
    while True:
        line = await conn.reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        value = value.strip()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
        elif name == b"connection":
            keep = value.lower() == b"keep-alive" or (keep and value.lower() != b"close")
    if chunked:
        body = await _chunks(conn.reader)
    elif length is not None:
        if length > MAX_RESPONSE:
            raise CallError("response body too large")
        body = await conn.reader.readexactly(length)
    else:
        body = await conn.reader.read(MAX_RESPONSE)
        keep = False
    return Reply(status, body), keep


async def _chunks(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readexactly(2)
        if len(out) > MAX_RESPONSE:
            raise CallError("response body too large")


def _netloc(host: str, port: int) -> str:
    host = f"[{host}]" if ":" in host else host
    return host if port == 443 else f"{host}:{port}"


def _resolve_text(err: Exception, name: str, port: int) -> str:
    """proxy.ResolveEndpoint's errors."""
    return {
        "ServiceNotFound": f'services "{name}" not found',
        "ServicePortError": f'no service port {port} found for service "{name}"',
        "EndpointsNotFound": f'endpoints "{name}" not found',
    }.get(getattr(err, "reason", ""), f'no endpoints available for service "{name}"')


def _cert_text(err: ssl.SSLCertVerificationError) -> str:
    text = str(err.verify_message or err)
    if "unable to get local issuer" in text or "self-signed" in text or "self signed" in text:
        return "tls: failed to verify certificate: x509: certificate signed by unknown authority"
    if "Hostname mismatch" in text or "IP address mismatch" in text:
        return f"tls: failed to verify certificate: x509: certificate is not valid for the requested name ({text})"
    if "expired" in text:
        return "tls: failed to verify certificate: x509: certificate has expired or is not yet valid"
    return f"tls: failed to verify certificate: {text}"


def _dial_text(host: str, port: int, err: OSError) -> str:
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    code = getattr(err, "errno", None)
    if isinstance(err, ConnectionRefusedError) or code == errno.ECONNREFUSED:
        return f"dial tcp {address}: connect: connection refused"
    if code in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return f"dial tcp {address}: connect: no route to host"
    if "Name or service not known" in str(err) or "not known" in str(err):
        return f"dial tcp: lookup {host}: no such host"
    if isinstance(err, ConnectionResetError):
        return "read: connection reset by peer"
    return f"dial tcp {address}: {err}"
