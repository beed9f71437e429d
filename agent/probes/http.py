"""httpGet handler: one HTTP/1.1 GET per probe, as upstream's prober sends it.

Upstream (pkg/probe/http/http.go, request.go) builds the request with default `User-Agent:
kube-probe/<major>.<minor>` and `Accept: */*` unless the probe's httpHeaders set them (an empty Accept
removes it), takes the Host from a "Host" header, disables keep-alives and compression, skips
certificate checks, follows redirects only to the same host (at most 10), and reads at most 10 KiB of
body. 200..399 is Success with the body as output, except a redirect it did not follow (Warning,
"Probe terminated redirects, Response body: ..."); other codes are Failure with "HTTP probe failed
with statuscode: N"; transport errors are Failure with Go's url.Error text.

A raw asyncio request per probe is all that needs: nothing is pooled (every probe gets a fresh
connection, as upstream's), so there is nothing to share and no session to set up. Plain http reads
and writes the socket directly; https goes through an asyncio TLS stream over the same socket.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from urllib.parse import quote, urljoin, urlsplit

from agent.probes.result import Outcome, Result
from agent.probes.tcp import DialError, dial, errno_text, go_quote, join_host_port

# Upstream reads at most this much of a response body (maxRespBodyLength).
MAX_BODY = 10 * 1024
MAX_REDIRECTS = 10
# Go's Transport limits response headers to 1 MB by default; a probe has no use for more than this.
_MAX_HEADER_BYTES = 64 * 1024
_REDIRECT_CODES = frozenset((301, 302, 303, 307, 308))
_AWAITING_HEADERS = "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
_READING_BODY = "context deadline exceeded (Client.Timeout or context cancellation while reading body)"
# Characters a header name may hold (RFC 7230 token), as Go's transport checks before sending.
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

_tls: ssl.SSLContext | None = None


def _tls_context() -> ssl.SSLContext:
    """One client context for every https probe: no certificate or hostname checks
    (InsecureSkipVerify), made once because building one costs milliseconds."""
    global _tls
    if _tls is None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        _tls = ctx
    return _tls


def probe_url(scheme: str, host: str, port: int, path: str) -> str:
    """The URL upstream's formatURL builds: the path (with any query) after scheme://host:port, a
    leading "/" added when the path lacks one; IPv6 hosts bracketed. An empty path stays empty, as in
    Go's url.String()."""
    if path and not path.startswith("/"):
        path = "/" + path
    return f"{scheme.lower()}://{join_host_port(host, port)}{path}"


def canonical_header(name: str) -> str:
    """textproto.CanonicalMIMEHeaderKey: "x-custom-header" -> "X-Custom-Header"."""
    if not name or any(ch not in _TOKEN for ch in name):
        return name
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


class HttpFailure(Exception):
    """No usable HTTP answer: the exchange ended with this outcome (Go's error text as output)."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


class _Request:
    __slots__ = ("headers", "host_header", "url")

    def __init__(self, url: str, headers: dict[str, list[str]], host_header: str) -> None:
        self.url = url
        self.headers = headers
        self.host_header = host_header


def _probe_headers(headers: list[tuple[str, str]], user_agent: str) -> dict[str, list[str]]:
    """The request's header map as upstream's newProbeRequest leaves it."""
    merged: dict[str, list[str]] = {}
    for name, value in headers:
        merged.setdefault(canonical_header(name), []).append(value)
    merged.setdefault("User-Agent", [user_agent])
    if "Accept" not in merged:
        merged["Accept"] = ["*/*"]
    elif merged["Accept"][0] == "":
        del merged["Accept"]
    return merged


def _clean(value: str) -> str:
    # Go's Header.Write turns CR and LF into spaces and trims, so values cannot split the request.
    return value.replace("\r", " ").replace("\n", " ").strip(" \t")


def _encode(request: _Request, target: str, authority: str) -> bytes:
    """The request as Go's Request.write puts it on the wire: Host, User-Agent, the other headers in
    sorted order, then Connection: close (keep-alives are off)."""
    lines = [f"GET {target} HTTP/1.1", f"Host: {_clean(request.host_header or authority)}"]
    agent = request.headers.get("User-Agent", [""])[0]
    if agent:
        lines.append(f"User-Agent: {_clean(agent)}")
    for name in sorted(request.headers):
        if name in ("Host", "User-Agent", "Connection", "Content-Length", "Transfer-Encoding", "Trailer"):
            continue
        lines.extend(f"{name}: {_clean(value)}" for value in request.headers[name])
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")


def _request_target(path: str, query: str) -> str:
    # Go sends the path escaped (spaces and the like as %XX, existing escapes kept) and the raw query.
    target = quote(path, safe="/:@!$&'()*+,;=-._~%") or "/"
    return f"{target}?{query}" if query else target


class _SocketReader:
    """The three StreamReader reads a response needs, done straight on a plain-http socket: no
    transport, protocol or stream objects to build per probe (about a sixth of its CPU time)."""

    __slots__ = ("_buffer", "_eof", "_loop", "_sock")

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self._sock = sock
        self._loop = loop
        self._buffer = bytearray()
        self._eof = False

    async def _fill(self) -> None:
        data = await self._loop.sock_recv(self._sock, 65536)
        self._eof = not data
        self._buffer += data

    def _take(self, n: int) -> bytes:
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    async def readuntil(self, separator: bytes) -> bytes:
        start = 0
        while (found := self._buffer.find(separator, start)) < 0:
            if len(self._buffer) > _MAX_HEADER_BYTES:
                raise asyncio.LimitOverrunError("response head too long", len(self._buffer))
            if self._eof:
                raise asyncio.IncompleteReadError(self._take(len(self._buffer)), None)
            start = max(0, len(self._buffer) - len(separator) + 1)
            await self._fill()
        return self._take(found + len(separator))

    async def readexactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            if self._eof:
                raise asyncio.IncompleteReadError(self._take(len(self._buffer)), n)
            await self._fill()
        return self._take(n)

    async def read(self, n: int) -> bytes:
        if not self._buffer and not self._eof:
            await self._fill()
        return self._take(n)


class _Response:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers
        self.body = b""


def _parse_head(raw: bytes, url: str) -> _Response:
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
        raise HttpFailure(
            Outcome(
                Result.FAILURE,
                f"Get {go_quote(url)}: net/http: HTTP/1.x transport connection broken: "
                f"malformed HTTP response {go_quote(lines[0])}",
            )
        )
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            # The first value of a repeated header is the one Go's Header.Get returns.
            headers.setdefault(name.strip().lower(), value.strip())
    return _Response(int(parts[1]), headers)


async def _read_body(reader: asyncio.StreamReader | _SocketReader, response: _Response) -> bytes:
    """At most MAX_BODY bytes of the body, framed by chunked encoding, Content-Length or EOF."""
    if response.status in (204, 304):
        return b""
    if "chunked" in response.headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while len(body) < MAX_BODY:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                break
            body += await reader.readexactly(min(size, MAX_BODY - len(body)))
            if len(body) >= MAX_BODY:
                break
            await reader.readexactly(2)
        return bytes(body)
    length = response.headers.get("content-length")
    if length is not None and length.isdigit():
        return await reader.readexactly(min(int(length), MAX_BODY))
    body = bytearray()
    while len(body) < MAX_BODY:
        chunk = await reader.read(MAX_BODY - len(body))
        if not chunk:
            break
        body += chunk
    return bytes(body)


def _transport_error(url: str, err: BaseException, local: str, remote: str) -> Outcome:
    if isinstance(err, asyncio.IncompleteReadError | EOFError):
        return Outcome(Result.FAILURE, f"Get {go_quote(url)}: EOF")
    if isinstance(err, ssl.SSLError):
        return Outcome(Result.FAILURE, f"Get {go_quote(url)}: remote error: tls: {err.reason or err}")
    if isinstance(err, OSError):
        return Outcome(
            Result.FAILURE, f"Get {go_quote(url)}: read tcp {local}->{remote}: read: {errno_text(err)}"
        )
    return Outcome(Result.FAILURE, f"Get {go_quote(url)}: {err}")


async def _round_trip(request: _Request, deadline: float, first_host: str | None) -> tuple[_Response, str]:
    """One GET on a fresh connection. Returns the response and, for a redirect upstream would follow
    (to the first request's host), the URL to go to next; otherwise the body is read (at most
    MAX_BODY) and the URL is ""."""
    parts = urlsplit(request.url)
    if parts.scheme not in ("http", "https"):
        reason = f"unsupported protocol scheme {go_quote(parts.scheme)}"
        raise HttpFailure(Outcome(Result.FAILURE, f"Get {go_quote(request.url)}: {reason}"))
    for name in request.headers:
        if not name or any(ch not in _TOKEN for ch in name):
            reason = f"net/http: invalid header field name {go_quote(name)}"
            raise HttpFailure(Outcome(Result.FAILURE, f"Get {go_quote(request.url)}: {reason}"))
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    loop = asyncio.get_running_loop()
    try:
        sock = await dial(host, port, max(deadline - loop.time(), 0))
    except DialError as err:
        text = _AWAITING_HEADERS if err.timeout else str(err)
        raise HttpFailure(Outcome(Result.FAILURE, f"Get {go_quote(request.url)}: {text}")) from None
    local = join_host_port(*sock.getsockname()[:2])
    remote = join_host_port(*sock.getpeername()[:2])
    writer: asyncio.StreamWriter | None = None
    reader: asyncio.StreamReader | _SocketReader
    phase = _AWAITING_HEADERS
    try:
        async with asyncio.timeout_at(deadline):
            wire = _encode(request, _request_target(parts.path, parts.query), parts.netloc)
            if parts.scheme == "https":
                reader, writer = await asyncio.open_connection(
                    sock=sock, ssl=_tls_context(), server_hostname=host, limit=_MAX_HEADER_BYTES
                )
                writer.write(wire)
            else:
                reader = _SocketReader(sock, loop)
                await loop.sock_sendall(sock, wire)
            while True:
                response = _parse_head(await reader.readuntil(b"\r\n\r\n"), request.url)
                # Interim 1xx answers are skipped as Go's transport skips them.
                if not 100 <= response.status < 200 or response.status == 101:
                    break
            location = response.headers.get("location", "")
            if response.status in _REDIRECT_CODES and location:
                next_url = urljoin(request.url, location)
                if urlsplit(next_url).hostname == first_host:
                    return response, next_url
            phase = _READING_BODY
            try:
                response.body = await _read_body(reader, response)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, OSError) as err:
                # Upstream's body read fails the probe with an error (Unknown here), in Go's words.
                if isinstance(err, asyncio.IncompleteReadError):
                    reason = "unexpected EOF"
                elif isinstance(err, OSError) and err.errno is not None:
                    reason = f"read tcp {local}->{remote}: read: {errno_text(err)}"
                else:
                    reason = str(err)
                raise HttpFailure(Outcome(Result.UNKNOWN, reason)) from None
            return response, ""
    except TimeoutError:
        if phase == _READING_BODY:
            raise HttpFailure(Outcome(Result.UNKNOWN, phase)) from None
        raise HttpFailure(Outcome(Result.FAILURE, f"Get {go_quote(request.url)}: {phase}")) from None
    except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as err:
        raise HttpFailure(_transport_error(request.url, err, local, remote)) from None
    finally:
        if writer is not None:
            writer.close()
        else:
            sock.close()


async def http_get(url: str, headers: list[tuple[str, str]], timeout: float, user_agent: str) -> _Response:
    """GET `url` within `timeout` seconds (the whole exchange, redirects included), with the probe's
    httpHeaders and upstream's defaults (`user_agent` as User-Agent, `Accept: */*`); the final answer,
    or HttpFailure when none came back."""
    merged = _probe_headers(headers, user_agent)
    request = _Request(url, merged, merged.get("Host", [""])[0])
    first_host = urlsplit(url).hostname
    deadline = asyncio.get_running_loop().time() + timeout
    for followed in range(MAX_REDIRECTS + 1):
        response, next_url = await _round_trip(request, deadline, first_host)
        if not next_url:
            break
        location = response.headers["location"]
        if followed == MAX_REDIRECTS:
            raise HttpFailure(
                Outcome(Result.FAILURE, f"Get {go_quote(location)}: stopped after {MAX_REDIRECTS} redirects")
            )
        redirected = dict(request.headers)
        # Go names the page that redirected, unless that would leak an https URL to plain http.
        if not (request.url.startswith("https:") and next_url.startswith("http:")):
            redirected["Referer"] = [request.url]
        # Go keeps a custom Host through a redirect only when the Location is relative.
        keep_host = request.host_header if not urlsplit(location).netloc else ""
        request = _Request(next_url, redirected, keep_host)
    return response


async def http_probe(url: str, headers: list[tuple[str, str]], timeout: float, user_agent: str) -> Outcome:
    """http_get judged as upstream's prober: 2xx success, an unfollowed 3xx a warning, else failure."""
    try:
        response = await http_get(url, headers, timeout, user_agent)
    except HttpFailure as failed:
        return failed.outcome
    body = response.body.decode("utf-8", "replace")
    if 200 <= response.status < 300:
        return Outcome(Result.SUCCESS, body)
    if 300 <= response.status < 400:
        return Outcome(Result.WARNING, f"Probe terminated redirects, Response body: {body}")
    return Outcome(Result.FAILURE, f"HTTP probe failed with statuscode: {response.status}")
