"""tcpSocket handler, and the dialing it shares with httpGet.

Upstream (pkg/probe/tcp/tcp.go) dials with a timeout and closes at once; any dial error is a Failure
whose output is Go's error text (`dial tcp 10.0.0.5:8080: connect: connection refused`, `dial tcp
10.0.0.5:8080: i/o timeout`). Its probe dialer (pkg/probe/dialer_others.go) also sets SO_LINGER to 1 s
to keep probe sockets out of TIME-WAIT; we do not: with lingering on, Linux's close() waits (up to the
linger time) for the peer to acknowledge our FIN even on a non-blocking socket, which would stall the
event loop every probe shares, and a node's probe rate (110 pods every 10 s) leaves only a few hundred
sockets in TIME-WAIT at any time.

The helpers that render errors and values the way Go prints them live here too, so every handler
words its output alike.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import socket

from agent.probes.result import Outcome, Result


class DialError(Exception):
    """A connection could not be made; str() is Go's net.OpError text."""

    def __init__(self, message: str, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


def join_host_port(host: str, port: int) -> str:
    """net.JoinHostPort: IPv6 literals go in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def errno_text(err: OSError) -> str:
    """An OS error as Go's syscall.Errno prints it ("connection refused")."""
    if err.errno is None:
        return str(err)
    text = os.strerror(err.errno)
    return text[:1].lower() + text[1:]


def go_quote(text: str) -> str:
    """strconv.Quote, as Go's %q renders a string in error messages."""
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def go_duration(seconds: float) -> str:
    """time.Duration.String: "1s", "1.5s", "500ms", "2m0s", "1h0m0s"."""
    ms = round(seconds * 1000)
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    text = f"{ms // 1000}.{ms % 1000:03d}".rstrip("0").rstrip(".") + "s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    return f"{hours}h{text}" if hours else text


def go_code(name: str) -> str:
    """A gRPC status code's name (Python's NOT_FOUND) as Go's codes.Code prints it (NotFound)."""
    if name in ("OK", "CANCELLED"):
        return {"OK": "OK", "CANCELLED": "Canceled"}[name]
    return "".join(word.capitalize() for word in name.split("_"))


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


async def _resolve(host: str, port: int) -> list[tuple[socket.AddressFamily, tuple]]:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        if ip.version == 6:
            return [(socket.AF_INET6, (host, port, 0, 0))]
        return [(socket.AF_INET, (host, port))]
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        reason = "no such host" if err.errno in (socket.EAI_NONAME, socket.EAI_NODATA) else err.strerror
        raise DialError(f"dial tcp: lookup {host}: {reason}") from None
    return [(family, sockaddr) for family, _, _, _, sockaddr in infos]


async def dial(host: str, port: int, timeout: float) -> socket.socket:
    """A connected non-blocking TCP socket to host:port, within `timeout` seconds, trying each address
    of a name in turn as Go's dialer does; failures raise DialError worded as Go's."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        async with asyncio.timeout_at(deadline):
            addresses = await _resolve(host, port)
    except TimeoutError:
        raise DialError(f"dial tcp: lookup {host}: i/o timeout", timeout=True) from None
    first: DialError | None = None
    for family, sockaddr in addresses:
        where = join_host_port(sockaddr[0], port)
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            async with asyncio.timeout_at(deadline):
                await loop.sock_connect(sock, sockaddr)
            return sock
        except TimeoutError:
            sock.close()
            raise DialError(f"dial tcp {where}: i/o timeout", timeout=True) from None
        except OSError as err:
            sock.close()
            if err.errno == errno.ETIMEDOUT:
                raise DialError(f"dial tcp {where}: i/o timeout", timeout=True) from None
            first = first or DialError(f"dial tcp {where}: connect: {errno_text(err)}")
        except BaseException:
            sock.close()
            raise
    raise first or DialError(f"dial tcp: lookup {host}: no such host")


async def tcp_probe(host: str, port: int, timeout: float) -> Outcome:
    """SUCCESS when a TCP connection to host:port opens within `timeout` seconds (closed at once);
    FAILURE with Go's dial error otherwise."""
    try:
        sock = await dial(host, port, timeout)
    except DialError as err:
        return Outcome(Result.FAILURE, str(err))
    sock.close()
    return Outcome(Result.SUCCESS)
