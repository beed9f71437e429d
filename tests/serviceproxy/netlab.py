"""Two network namespaces joined by a veth pair, so the proxy's rules are tested for real without
touching the host's: `client` holds the proxy's table (its output hook DNATs the client's own
connections), `backend` plays the pods behind the Services (servers on its address). Everything made
here is removed by `close()`, checked by the caller's leak scope."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

CLIENT_IP, BACKEND_IP, EXTRA_BACKEND_IP = "10.250.0.1", "10.250.0.2", "10.250.0.3"
SERVICE_CIDR = "10.96.0.0/16"


def sh(*argv: str, check: bool = True, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=timeout)


SERVER = """
import http.server, socketserver, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = sys.argv[2].encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
socketserver.TCPServer.allow_reuse_address = True
host, port = sys.argv[1].rsplit(":", 1)
with socketserver.TCPServer((host, int(port)), H) as s:
    s.serve_forever()
"""


UDP_SERVER = """
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((host, int(port)))
while True:
    data, peer = s.recvfrom(2048)
    s.sendto(sys.argv[2].encode(), peer)
"""


ECHO_SERVER = """
import socketserver, sys
class H(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(line)
            self.wfile.flush()
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer.daemon_threads = True
host, port = sys.argv[1].rsplit(":", 1)
with socketserver.ThreadingTCPServer((host, int(port)), H) as s:
    s.serve_forever()
"""

# One TCP connection held open: each stdin line is sent, and its echo (or the failure) printed.
LONG_CLIENT = """
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
conn = socket.create_connection((host, int(port)), timeout=5)
reader = conn.makefile("r")
print("connected", conn.getsockname()[1], flush=True)
for line in sys.stdin:
    try:
        conn.sendall(line.encode())
        print("echo", reader.readline().strip() or "<closed>", flush=True)
    except OSError as err:
        print("failed", type(err).__name__, flush=True)
"""


@dataclass
class LongConnection:
    """A connection from the client namespace that stays open across whatever the test does."""

    proc: subprocess.Popen[str]

    def say(self, text: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class NetLab:
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    servers: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def client(self) -> str:
        return f"pkp-{self.tag}-c"

    @property
    def backend(self) -> str:
        return f"pkp-{self.tag}-b"

    @property
    def names(self) -> list[str]:
        return [self.client, self.backend]

    def open(self) -> NetLab:
        c, b = self.client, self.backend
        sh("ip", "netns", "add", c)
        sh("ip", "netns", "add", b)
        sh(
            "ip",
            "link",
            "add",
            f"pkc{self.tag}",
            "netns",
            c,
            "type",
            "veth",
            "peer",
            "name",
            f"pkb{self.tag}",
            "netns",
            b,
        )
        for ns, dev, ips in (
            (c, f"pkc{self.tag}", [CLIENT_IP]),
            (b, f"pkb{self.tag}", [BACKEND_IP, EXTRA_BACKEND_IP]),
        ):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            for ip in ips:
                sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
        # The client reaches Service IPs through the backend side, as a pod through its gateway.
        sh("ip", "-n", c, "route", "add", SERVICE_CIDR, "via", BACKEND_IP)
        return self

    def serve(self, address: str, reply: str) -> None:
        """An HTTP server in the backend namespace answering `reply`, up before this returns."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.backend, sys.executable, "-c", SERVER, address, reply],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.servers.append(proc)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.get(f"http://{address}/", ns=self.backend, timeout=1.0)[0] == "ok":
                return
            time.sleep(0.05)
        raise AssertionError(
            f"server on {address} did not start: {proc.stderr.read() if proc.poll() is not None else ''}"
        )

    def serve_echo(self, address: str) -> None:
        """A TCP line-echo server in the backend namespace (threads: many connections at once)."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.backend, sys.executable, "-c", ECHO_SERVER, address],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.servers.append(proc)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            conn = self.connect(address, ns=self.backend)
            if conn is not None:
                conn.close()
                return
            time.sleep(0.05)
        raise AssertionError(f"echo server on {address} did not start")

    def connect(self, address: str, ns: str | None = None) -> LongConnection | None:
        """A long-lived connection from `ns` (the client's by default); None when it cannot connect."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns or self.client, sys.executable, "-c", LONG_CLIENT, address],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()
        if not first.startswith("connected"):
            proc.wait(5)
            return None
        return LongConnection(proc)

    def serve_udp(self, address: str, reply: str) -> None:
        """A UDP server in the backend namespace answering every datagram with `reply`."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.backend, sys.executable, "-c", UDP_SERVER, address, reply],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.servers.append(proc)
        deadline = time.monotonic() + 10
        host, port = address.rsplit(":", 1)
        while time.monotonic() < deadline:
            if self.ask_udp(host, int(port), 0, ns=self.backend) == reply:
                return
            time.sleep(0.05)
        raise AssertionError(f"UDP server on {address} did not start")

    def ask_udp(self, ip: str, port: int, source_port: int, ns: str | None = None) -> str:
        """One datagram from the client's address and `source_port` (0: any); the answer or "" on timeout."""
        code = (
            "import socket, sys\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(('', {source_port}))\n"
            "s.settimeout(1.5)\n"
            f"s.sendto(b'?', ({ip!r}, {port}))\n"
            "try:\n"
            "    print(s.recv(2048).decode())\n"
            "except OSError as e:\n"
            "    print('')\n"
        )
        return sh(
            "ip", "netns", "exec", ns or self.client, sys.executable, "-c", code, check=False
        ).stdout.strip()

    def get(self, url: str, ns: str | None = None, timeout: float = 3.0) -> tuple[str, str, float]:
        """("ok", body) or ("refused" | "timeout" | other error, message), and the seconds it took."""
        code = (
            "import sys, time, urllib.request, urllib.error\n"
            "t = time.monotonic()\n"
            "try:\n"
            f"    body = urllib.request.urlopen({url!r}, timeout={timeout}).read().decode()\n"
            "    print('ok', body, time.monotonic() - t)\n"
            "except urllib.error.URLError as e:\n"
            "    r = e.reason\n"
            "    kind = 'refused' if isinstance(r, ConnectionRefusedError) else 'timeout' if 'timed out' in str(r) else 'error'\n"
            "    print(kind, str(r).replace(' ', '_'), time.monotonic() - t)\n"
            "except Exception as e:\n"
            "    print('error', type(e).__name__, time.monotonic() - t)\n"
        )
        out = sh(
            "ip",
            "netns",
            "exec",
            ns or self.client,
            sys.executable,
            "-c",
            code,
            check=False,
            timeout=timeout + 10,
        ).stdout.split()
        return (out[0], out[1], float(out[2])) if len(out) == 3 else ("error", " ".join(out), 0.0)

    def close(self) -> None:
        for proc in self.servers:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for ns in self.names:
            sh("ip", "netns", "del", ns, check=False)
