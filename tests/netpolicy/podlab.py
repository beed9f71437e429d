"""A host of pods for the network-policy agent's real tests: a network namespace standing for the host,
one bridge per node in it (10.77.<node>.0/24 and fd77:<node>::/64, routed between them), dual-stack pods
as network namespaces on veths, as pykubelet-cni wires them, and the small programs the pods run (TCP and
UDP servers, probes). The machine's own rules are never touched; `close()` removes everything made."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client

from e2e.waiting import wait_for
from netpolicy import rbac
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.leaks import Scope

TABLE = "pykubelet-netpol"
SERVER_PORTS = (8080, 8081, 9001)
SERVER = """
import socket, sys, threading
def serve(port):
    s = socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # both families
    s.bind(("::", port)); s.listen(64)
    while True:
        conn, _ = s.accept()
        conn.sendall(b"ok\\n"); conn.close()
ports = [int(p) for p in sys.argv[1:]]
for p in ports[1:]:
    threading.Thread(target=serve, args=(p,), daemon=True).start()
print("up", flush=True)
serve(ports[0])
"""
CONNECT = """
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.0)
    print(s.recv(8).decode().strip() or "closed")
except OSError as err:
    print("refused" if isinstance(err, ConnectionRefusedError) else "blocked")
"""
HOLD = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2.0)
print("connected", flush=True)
for line in sys.stdin:
    s.sendall(line.encode()); print(s.recv(64).decode().strip() or "closed", flush=True)
"""
UDP_ECHO = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 5353))
print("up", flush=True)
while True:
    data, peer = s.recvfrom(64)
    s.sendto(b"ok", peer)
"""
UDP_ASK = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1.0)
s.sendto(b"?", (sys.argv[1], int(sys.argv[2])))
try:
    print(s.recv(8).decode())
except OSError:
    print("blocked")
"""
ECHO = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7000)); s.listen(4)
print("up", flush=True)
while True:
    conn, _ = s.accept()
    while data := conn.recv(64):
        conn.sendall(data)
"""


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=30)


def v6(ip: str) -> str:
    """A lab pod's IPv6 address beside its IPv4 one: 10.77.<node>.<n> -> fd77:<node>::<n>."""
    _, _, node, host = ip.split(".")
    return f"fd77:{node}::{host}"


def no_dad(ns: str) -> None:
    """Addresses usable at once in `ns` (duplicate address detection would hold them for a while)."""
    for conf in ("all", "default"):
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{conf}.accept_dad=0")


@dataclass
class PodLab:
    """A host namespace with one bridge per node (10.77.<node>.0/24 and fd77:<node>::/64, routed between
    them) and dual-stack pods as network namespaces on veths, as pykubelet-cni wires them."""

    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:5])
    netns: list[str] = field(default_factory=list)
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def host(self) -> str:
        return f"npl-{self.tag}-host"

    def ns(self, pod: str) -> str:
        return f"npl-{self.tag}-{pod}"

    def open(self, bridges: int) -> PodLab:
        sh("ip", "netns", "add", self.host)
        self.netns.append(self.host)
        sh("ip", "-n", self.host, "link", "set", "lo", "up")
        sh("ip", "netns", "exec", self.host, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        sh("ip", "netns", "exec", self.host, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        no_dad(self.host)
        for i in range(bridges):
            sh("ip", "-n", self.host, "link", "add", f"br{i}", "type", "bridge")
            sh("ip", "-n", self.host, "addr", "add", f"10.77.{i}.1/24", "dev", f"br{i}")
            sh("ip", "-n", self.host, "addr", "add", f"fd77:{i}::1/64", "dev", f"br{i}", "nodad")
            sh("ip", "-n", self.host, "link", "set", f"br{i}", "up")
        return self

    def add_pod(self, pod: str, bridge: int, ip: str) -> None:
        ns, index = self.ns(pod), len(self.netns)
        sh("ip", "netns", "add", ns)
        self.netns.append(ns)
        no_dad(ns)
        outer = f"v{self.tag}{index}"
        sh("ip", "-n", self.host, "link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "-n", self.host, "link", "set", outer, "master", f"br{bridge}", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        sh("ip", "-n", ns, "addr", "add", f"{v6(ip)}/64", "dev", "eth0", "nodad")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", f"10.77.{bridge}.1")
        sh("ip", "-n", ns, "-6", "route", "add", "default", "via", f"fd77:{bridge}::1")

    def start(self, pod: str, code: str, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns(pod), sys.executable, "-c", code, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() in ("up", "connected")
        return proc

    def connect(self, pod: str, ip: str, port: int) -> str:
        """'ok' when the server answered, 'blocked' when the connection timed out, 'refused'."""
        out = sh(
            "ip", "netns", "exec", self.ns(pod), sys.executable, "-c", CONNECT, ip, str(port), check=False
        )
        return out.stdout.strip() or out.stderr.strip()

    def ask_udp(self, pod: str, ip: str, port: int) -> str:
        out = sh(
            "ip", "netns", "exec", self.ns(pod), sys.executable, "-c", UDP_ASK, ip, str(port), check=False
        )
        return out.stdout.strip() or out.stderr.strip()

    def table(self) -> subprocess.CompletedProcess[str]:
        """`nft list table` of the agent's table in the host namespace."""
        return sh("ip", "netns", "exec", self.host, "nft", "list", "table", "inet", TABLE, check=False)

    def close(self) -> None:
        for proc in self.procs:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            proc.kill()
            proc.wait()
        for ns in reversed(self.netns):
            sh("ip", "netns", "del", ns, check=False)


def agent_argv(kubeconfig: Path, host: str, *extra: str) -> list[str]:
    """`pykubelet netpolicy` inside the lab's host namespace."""
    return [
        sys.executable,
        "-m",
        "pykubelet",
        "netpolicy",
        "--kubeconfig",
        str(kubeconfig),
        "--netns",
        host,
        *extra,
    ]


# A pod of the probe matrix, as agnhost serves in upstream's netpol e2e: TCP and UDP servers on the given
# ports (both families), and a prober reading one JSON list of [protocol, address, port] a line from
# stdin and answering a JSON list of booleans (connected or not), the probes run at once.
PROBE_POD = """
import concurrent.futures, json, socket, sys, threading
TIMEOUT = float(sys.argv[1])
def tcp_server(port):
    s = socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port)); s.listen(256)
    while True:
        conn, _ = s.accept()
        try:
            conn.sendall(b"ok")
        finally:
            conn.close()
def udp_server(port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port))
    while True:
        data, peer = s.recvfrom(64)
        s.sendto(b"ok", peer)
def probe(protocol, address, port):
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    kind = socket.SOCK_STREAM if protocol == "TCP" else socket.SOCK_DGRAM
    with socket.socket(family, kind) as s:
        s.settimeout(TIMEOUT)
        try:
            if protocol == "TCP":
                s.connect((address, port))
            else:
                s.sendto(b"?", (address, port))
            return s.recv(8) == b"ok"
        except OSError:
            return False
for spec in sys.argv[2:]:
    protocol, port = spec.split("/")
    server = tcp_server if protocol == "TCP" else udp_server
    threading.Thread(target=server, args=(int(port),), daemon=True).start()
print("up", flush=True)
with concurrent.futures.ThreadPoolExecutor(max_workers=128) as pool:
    for line in sys.stdin:
        probes = json.loads(line)
        print(json.dumps(list(pool.map(lambda p: probe(*p), probes))), flush=True)
"""


@contextlib.contextmanager
def lab_beside_api(root: Path, bridges: int = 2) -> Iterator[tuple[PodLab, ApiServer, client.ApiClient]]:
    """A pod lab and the real API server holding the agent's ClusterRole and binding; the lab removed
    after, and nothing of it left on the machine (checked)."""
    lab = PodLab().open(bridges)
    try:
        with ApiServer(root / "api") as server, server.api_client() as api:
            rbac_api = client.RbacAuthorizationV1Api(api)
            rbac_api.create_cluster_role(rbac.cluster_role())
            rbac_api.create_cluster_role_binding(rbac.cluster_role_binding())
            yield lab, server, api
    finally:
        lab.close()
        leaked = Scope.of(root, named_netns=lab.netns).leaked(settle=2.0)
        assert not leaked, f"left on the host: {leaked}"


def report_pod(core: client.CoreV1Api, namespace: str, name: str, node: str, ip: str, **spec: object) -> None:
    """A pod in the API as the kubelet reports a dual-stack one: bound to `node`, Running at `ip` and
    its IPv6 twin; `spec` adds labels and container ports (`labels=`, `ports=`)."""
    container = {"name": "c", "image": "busybox", "ports": spec.get("ports") or []}
    body = {
        "metadata": {"name": name, "labels": spec.get("labels") or {}},
        "spec": {"nodeName": node, "containers": [container]},
    }
    core.create_namespaced_pod(namespace, body)
    status = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}, {"ip": v6(ip)}]}
    core.patch_namespaced_pod_status(name, namespace, {"status": status})


@contextlib.contextmanager
def running_agent(
    server: ApiServer, lab: PodLab, root: Path, *nodes: str
) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """The agent as its own process on its own identity, for `nodes`, in the lab's host namespace,
    once its table exists; stopped after (when a test has not stopped it). Yields it and its kubeconfig."""
    kubeconfig = server.client_kubeconfig(rbac.USER, (), root / "netpol.kubeconfig")
    names = [arg for node in nodes for arg in ("--node-name", node)]
    with (root / "agent.log").open("w") as log:
        agent = subprocess.Popen(
            agent_argv(kubeconfig, lab.host, *names, "--min-sync-period", "50ms"),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        wait_for(lambda: lab.table().returncode == 0, timeout=60, what="the agent's table")
        yield agent, kubeconfig
    finally:
        if agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
            agent.wait(20)
