"""The controller's nginx as a real process: a configuration the master refuses on reload leaves the
running one serving (and in place on disk), a reload takes a new one without restarting the master, SIGQUIT stops it, a port
another process holds is named (PortsTaken) when a reload or a start cannot listen there, and an nginx
left running under a stack's state dir (its controller killed) is found and stopped by `pykubelet
down`'s sweep, workers included."""

from __future__ import annotations

import asyncio
import http.client
import shutil
import socket
import ssl
import urllib.request
from pathlib import Path

import psutil
import pytest
from cryptography import x509

from ingresscontroller.model import Certificate, Config, Location, Server, Upstream
from ingresscontroller.nginx import Nginx, NginxError, PortsTaken, listen_failure
from ingresscontroller.nginxconf import Files, Listen, render
from kubeclient.serving import ensure_self_signed
from pykubelet.rig.process import free_port
from pykubelet.rig.sweep import sweep

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed"),
]


def _setup(root: Path) -> tuple[Files, Listen]:
    for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (root / "tmp" / sub).mkdir(parents=True, exist_ok=True)
    cert, key = ensure_self_signed(root / "certs", "ingress.local", [], "default-fake")
    return Files(root, cert, key), Listen("127.0.0.1", free_port(), free_port())


def _status(port: int, host: str) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/", headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code


def _config(host: str) -> Config:
    """A host whose one Service has no ready endpoint: nginx answers 503 for it, 404 elsewhere."""
    server = Server(host, {(False, "/"): Location("/", False, "ns_web_80")})
    return Config(servers={host: server}, upstreams={"ns_web_80": Upstream("ns_web_80", ())})


async def test_apply_reload_refusal_and_stop(tmp_path: Path) -> None:
    files, listen = _setup(tmp_path)
    nginx = Nginx(tmp_path)
    await nginx.apply(render(_config("a.example"), listen, files))
    master = nginx.proc.pid if nginx.proc else 0
    try:
        assert await asyncio.to_thread(_status, listen.http_port, "a.example") == 503
        assert await asyncio.to_thread(_status, listen.http_port, "b.example") == 404
        with pytest.raises(NginxError, match="unknown directive"):
            await nginx.apply(
                render(_config("a.example"), listen, files).replace("worker_connections", "bogus")
            )
        assert await asyncio.to_thread(_status, listen.http_port, "a.example") == 503  # still the old one
        assert "bogus" not in nginx.conf.read_text()  # a restart starts on what the workers run
        await nginx.apply(render(_config("b.example"), listen, files))
        assert nginx.reloads == 1 and nginx.proc is not None and nginx.proc.pid == master
        deadline = asyncio.get_running_loop().time() + 10
        while await asyncio.to_thread(_status, listen.http_port, "b.example") != 503:  # new workers take over
            assert asyncio.get_running_loop().time() < deadline, "the reload never took effect"
            await asyncio.sleep(0.1)
    finally:
        await nginx.stop()
    assert not psutil.pid_exists(master) or psutil.Process(master).status() == psutil.STATUS_ZOMBIE


async def test_a_port_another_process_holds_is_named_by_the_reload_and_the_start(tmp_path: Path) -> None:
    """nginx -t passes (it ignores a port in use), the master's bind() then fails: the reload is refused
    with the port named, the old workers serve on, and the next reload's outcome is its own (the refused
    one was read to its end, the master's 2.5 s of retries). A start on that port is refused the same way."""
    files, listen = _setup(tmp_path)
    nginx = Nginx(tmp_path)
    await nginx.apply(render(_config("a.example"), listen, files))
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        held = holder.getsockname()[1]
        config = _config("a.example")
        config.ports[(held, False)] = {"b.example": Server("b.example")}
        with pytest.raises(PortsTaken) as refused:
            await nginx.apply(render(config, listen, files))
        assert list(refused.value.ports) == [held]
        assert refused.value.ports[held].startswith(f"bind() to 127.0.0.1:{held} failed (98: ")
        assert await asyncio.to_thread(_status, listen.http_port, "a.example") == 503  # the old workers
        await nginx.apply(render(_config("c.example"), listen, files))  # taken at once: its own outcome
        assert nginx.reloads == 1
        second = Nginx(tmp_path / "second")
        second_files, second_listen = _setup(second.root)
        with pytest.raises(PortsTaken) as at_start:
            await second.apply(render(config, second_listen, second_files))
        assert list(at_start.value.ports) == [held] and not second.running
    finally:
        holder.close()
        await nginx.stop()
    # nginx's other wording (listen() rather than bind()), and complaints that name no port.
    assert listen_failure("listen() to 0.0.0.0:8080, backlog 511 failed (98: Address already in use)") == (
        8080,
        True,
    )
    assert listen_failure("bind() to [::]:81 failed (13: Permission denied)") == (81, False)
    assert listen_failure('unknown directive "bogus" in /x/nginx.conf:3') is None


async def test_down_stops_an_nginx_its_controller_left(tmp_path: Path) -> None:
    root = tmp_path / "ingress" / "nginx"
    files, listen = _setup(root)
    nginx = Nginx(root)
    await nginx.apply(render(_config("a.example"), listen, files))
    assert nginx.proc is not None
    family = [nginx.proc.pid, *(c.pid for c in psutil.Process(nginx.proc.pid).children())]
    assert len(family) >= 2  # the master and its worker
    try:
        problems = await asyncio.to_thread(sweep, tmp_path, 1.0)
        await asyncio.wait_for(nginx.proc.wait(), 15)  # reaped: sweep stopped it
    finally:
        await nginx.stop()  # a no-op once sweep did its work
    assert problems == []
    assert not [
        p for p in family if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    ]


async def test_a_restarted_controller_replaces_the_nginx_its_predecessor_left(tmp_path: Path) -> None:
    files, listen = _setup(tmp_path)
    first = Nginx(tmp_path)
    await first.apply(render(_config("a.example"), listen, files))
    assert first.proc is not None
    old = first.proc.pid
    second = Nginx(tmp_path)  # the controller killed alone and started again: its nginx still listens
    try:
        await second.apply(render(_config("b.example"), listen, files))
        await asyncio.wait_for(first.proc.wait(), 15)  # the leftover stopped ...
        assert second.proc is not None and second.proc.pid != old  # ... and a new one serves
        assert await asyncio.to_thread(_status, listen.http_port, "b.example") == 503
    finally:
        await second.stop()
        await first.stop()


def _https(port: int, sni: str) -> tuple[str, int]:
    """The certificate's subject nginx shows for `sni`, and the status of GET / with that Host."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    conn = http.client.HTTPSConnection(sni, port, timeout=5, context=context)
    conn.sock = context.wrap_socket(
        socket.create_connection(("127.0.0.1", port), timeout=5), server_hostname=sni
    )
    try:
        der = conn.sock.getpeercert(binary_form=True)
        conn.request("GET", "/", headers={"Host": sni})
        status = conn.getresponse().status
    finally:
        conn.close()
    assert der is not None
    return x509.load_der_x509_certificate(der).subject.rfc4514_string().split("@")[0], status


async def test_hosts_without_a_certificate_share_the_default_servers_context(tmp_path: Path) -> None:
    """Only the default server and a host with its own certificate name one (one SSL context and key
    load per named certificate, not per server block); a host without one is reached over HTTPS by its
    Host header on the default certificate, a host with one by SNI."""
    files, listen = _setup(tmp_path)
    site_cert, site_key = ensure_self_signed(tmp_path / "site", "tls.example", [], "site")
    config = _config("a.example")
    config.servers["tls.example"] = Server("tls.example", {(False, "/"): Location("/", False, "none")})
    config.servers["tls.example"].certificate = "site"
    config.certificates["site"] = Certificate("site", site_cert.read_bytes(), site_key.read_bytes())
    files.cert("site").write_bytes(site_cert.read_bytes())
    files.key("site").write_bytes(site_key.read_bytes())
    text = render(config, listen, files)
    assert text.count("ssl_certificate ") == 2  # the default server's and tls.example's
    nginx = Nginx(tmp_path)
    await nginx.apply(text)
    try:
        assert await asyncio.to_thread(_https, listen.https_port, "a.example") == ("CN=ingress.local", 503)
        assert await asyncio.to_thread(_https, listen.https_port, "b.example") == ("CN=ingress.local", 404)
        assert await asyncio.to_thread(_https, listen.https_port, "tls.example") == ("CN=tls.example", 503)
    finally:
        await nginx.stop()


class _HeldBackend:
    """A pod that holds every request until `together` are waiting, then answers them all: so that
    many requests are in flight at once through the proxy. Counts the connections it accepted."""

    def __init__(self, together: int) -> None:
        self.together = together
        self.accepted = 0
        self._waiting = 0
        self._release = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                release = self._release
                self._waiting += 1
                if self._waiting == self.together:
                    self._waiting, self._release = 0, asyncio.Event()
                    release.set()
                await asyncio.wait_for(release.wait(), 30)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> bytes:
    writer.write(f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")).split()[1])
    return head.split(b"\r\n", 1)[0] + b" " + await reader.readexactly(length)


async def test_connections_to_the_pods_are_kept_for_the_next_requests(tmp_path: Path) -> None:
    """As ingress-nginx (upstream keepalive 320 per worker, HTTP/1.1, no Connection: close): clients on
    kept connections, more requests in flight at once than 32 per worker, ten rounds of them: the pod
    sees one connection per request in flight and no more, none opened again for the next rounds (with
    32 idle connections kept per worker, those above were closed after each answer and opened anew)."""
    files, listen = _setup(tmp_path)
    nginx = Nginx(tmp_path)
    backend_port = free_port()
    config = _config("a.example")
    config.upstreams["ns_web_80"] = Upstream("ns_web_80", (f"127.0.0.1:{backend_port}",))
    await nginx.apply(render(config, listen, files))
    assert nginx.proc is not None
    workers = len(psutil.Process(nginx.proc.pid).children())
    clients = 40 * workers + 40  # above the 32 idle connections per worker kept before
    held = _HeldBackend(clients)
    server = await asyncio.start_server(held.serve, "127.0.0.1", backend_port)
    streams: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        streams = [await asyncio.open_connection("127.0.0.1", listen.http_port) for _ in range(clients)]
        for _ in range(10):
            answers = await asyncio.wait_for(
                asyncio.gather(*(_get(r, w, "a.example") for r, w in streams)), 60
            )
            assert set(answers) == {b"HTTP/1.1 200 OK ok\n"}
        assert held.accepted == clients
    finally:
        for _, writer in streams:
            writer.close()
        server.close()
        await server.wait_closed()
        await nginx.stop()
