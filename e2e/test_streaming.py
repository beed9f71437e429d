"""kubectl exec, attach, cp and port-forward, and the official client's stream(), through the API server to
the node's kubelet API and the runtime's streaming server: exit codes, stdin (and its end), a terminal
under a real pseudo-terminal (size and resize), live output, tar both ways, real HTTP over forwarded
ports with parallel connections, upstream's refusals, and, on the project's own stack, that aborted
sessions leave no descriptor behind in the API server, the agent or containerd.

kubectl 1.32 speaks WebSocket (v5.channel.k8s.io for exec/attach/cp, SPDY tunnelled in WebSocket for
port-forward) and falls back to SPDY/3.1; both are driven (KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false and
KUBECTL_PORT_FORWARD_WEBSOCKETS=false force SPDY).
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import hashlib
import os
import pty
import re
import select
import signal
import socket
import ssl
import struct
import subprocess
import termios
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.stream import portforward, stream

from e2e.waiting import wait_for

pytestmark = pytest.mark.integration

SPDY = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false", "KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"}
BIG = 256 * 1024  # bytes of the served file: several SPDY frames and WebSocket messages each way
WEB_SCRIPT = (
    "mkdir -p /www && echo hello-web > /www/index.html && "
    f"yes 0123456789abcdef | head -c {BIG} > /www/big && exec httpd -f -p 8080 -h /www"
)


def kubectl(
    kubeconfig: Path,
    namespace: str,
    *args: str,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace, *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def make_pod(kube, namespace: str, name: str, node: str, image: str, script: str, wait: bool = True) -> None:
    kube.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name=name, labels={"app": name}),
            spec=client.V1PodSpec(
                node_name=node,
                termination_grace_period_seconds=1,
                containers=[client.V1Container(name="main", image=image, command=["sh", "-c", script])],
            ),
        ),
    )
    if wait:
        wait_for(
            lambda: kube.read_namespaced_pod(name, namespace).status.phase == "Running",
            what=f"{name} Running",
        )


@pytest.fixture
def shell(kube, namespace, node_name, image) -> str:
    make_pod(kube, namespace, "sh", node_name, image, "exec sleep 3600")
    return "sh"


@pytest.fixture
def web(kube, namespace, node_name, image) -> str:
    make_pod(kube, namespace, "web", node_name, image, WEB_SCRIPT)
    return "web"


@pytest.mark.parametrize("protocol", ["websocket", "spdy"])
def test_exec_exit_code_output_and_stdin(kubeconfig, namespace, shell, protocol):
    env = SPDY if protocol == "spdy" else None
    done = kubectl(
        kubeconfig, namespace, "exec", shell, "--", "sh", "-c", "echo out; echo err >&2; exit 3", env=env
    )
    assert (done.returncode, done.stdout) == (3, b"out\n"), done
    assert b"err\n" in done.stderr and b"command terminated with exit code 3" in done.stderr
    # stdin piped, and its end reaches the command (cat and wc finish only on EOF).
    done = kubectl(
        kubeconfig, namespace, "exec", "-i", shell, "--", "tr", "a-z", "A-Z", stdin=b"piped\n", env=env
    )
    assert (done.returncode, done.stdout) == (0, b"PIPED\n"), done
    payload = os.urandom(300 * 1024)
    done = kubectl(kubeconfig, namespace, "exec", "-i", shell, "--", "sha256sum", stdin=payload, env=env)
    assert done.returncode == 0 and done.stdout.split()[0].decode() == hashlib.sha256(payload).hexdigest(), (
        done
    )


def _read_until(fd: int, pattern: str, timeout: float = 20.0) -> str:
    seen, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
            if re.search(pattern, seen.decode(errors="replace")):
                return seen.decode(errors="replace")
    raise AssertionError(f"{pattern!r} never appeared; the terminal showed {seen!r}")


def test_exec_tty_gives_a_working_shell_with_its_size(kubeconfig, namespace, shell):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    proc = subprocess.Popen(
        ["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace, "exec", "-it", shell, "--", "sh"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    try:
        os.write(master, b"stty size\r")
        _read_until(master, r"\b40 100\b")
        os.write(master, b"echo $((6*7))\r")
        _read_until(master, r"(?m)^42\r?$")
        # A resize reaches the remote terminal (kubectl reads the size again on SIGWINCH).
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 120, 0, 0))
        proc.send_signal(signal.SIGWINCH)
        time.sleep(0.2)  # give kubectl its signal before the next line; the assertion below polls anyway
        os.write(master, b"stty size\r")
        _read_until(master, r"\b50 120\b")
        os.write(master, b"exit 5\r")
        assert proc.wait(timeout=20) == 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_attach_follows_a_running_containers_output(kube, kubeconfig, namespace, node_name, image):
    make_pod(
        kube,
        namespace,
        "ticker",
        node_name,
        image,
        "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.3; done",
    )
    proc = subprocess.Popen(
        ["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace, "attach", "ticker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        ticks: list[int] = []
        deadline = time.monotonic() + 20
        while len(ticks) < 3 and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                line = proc.stdout.readline().decode()
                if line.startswith("tick "):
                    ticks.append(int(line.split()[1]))
        assert len(ticks) == 3, ticks
        assert ticks == list(range(ticks[0], ticks[0] + 3))  # live and in order
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_cp_a_directory_both_ways(kubeconfig, namespace, shell, tmp_path):
    src = tmp_path / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    files = {"a.txt": b"alpha\n", "sub/b.txt": b"beta\n", "sub/deeper/c.bin": os.urandom(100 * 1024)}
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    done = kubectl(kubeconfig, namespace, "cp", str(src), f"{shell}:/tmp/copied")
    assert done.returncode == 0, done
    done = kubectl(kubeconfig, namespace, "exec", shell, "--", "sha256sum", "/tmp/copied/sub/deeper/c.bin")
    assert done.stdout.split()[0].decode() == hashlib.sha256(files["sub/deeper/c.bin"]).hexdigest(), done
    back = tmp_path / "back"
    done = kubectl(kubeconfig, namespace, "cp", f"{shell}:/tmp/copied", str(back))
    assert done.returncode == 0, done
    assert {str(p.relative_to(back)): p.read_bytes() for p in back.rglob("*") if p.is_file()} == files


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def forwarded(request, kube, kubeconfig, namespace, web) -> Iterator[int]:
    """`kubectl port-forward pod/web LOCAL:8080` (or `svc/web LOCAL:80`, kubectl picking a pod of the
    Service) running; yields LOCAL."""
    local = _free_port()
    mode = getattr(request, "param", "")
    env = {**os.environ, **(SPDY if mode == "spdy" else {})}
    what, port = f"pod/{web}", 8080
    if mode == "service":
        kube.create_namespaced_service(
            namespace,
            client.V1Service(
                metadata=client.V1ObjectMeta(name=web),
                spec=client.V1ServiceSpec(
                    selector={"app": web}, ports=[client.V1ServicePort(port=80, target_port=8080)]
                ),
            ),
        )
        what, port = f"svc/{web}", 80
    proc = subprocess.Popen(
        [
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "-n",
            namespace,
            "port-forward",
            what,
            f"{local}:{port}",
            "--address",
            "127.0.0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().decode()
        assert first.startswith(f"Forwarding from 127.0.0.1:{local}"), (
            first,
            proc.stderr.read() if proc.poll() is not None else "",
        )
        yield local
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=20) as resp:
        return resp.read()


@pytest.mark.parametrize("forwarded", ["websocket", "spdy", "service"], indirect=True)
def test_port_forward_carries_http_and_parallel_connections(forwarded):
    assert _get(forwarded, "/index.html") == b"hello-web\n"
    big = (b"0123456789abcdef\n" * (BIG // 17 + 1))[:BIG]
    with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
        bodies = list(pool.map(lambda i: _get(forwarded, "/big" if i % 2 else "/index.html"), range(30)))
    assert bodies == [big if i % 2 else b"hello-web\n" for i in range(30)]


def test_official_client_stream_exec_and_port_forward(kube, namespace, shell, web):
    out = stream(
        kube.connect_get_namespaced_pod_exec,
        shell,
        namespace,
        command=["sh", "-c", "echo hi"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    assert out == "hi\n"
    resp = stream(
        kube.connect_get_namespaced_pod_exec,
        shell,
        namespace,
        command=["sh", "-c", "cat; exit 3"],
        stderr=True,
        stdin=True,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    resp.write_stdin("through stdin\n")
    resp.close_channel(0)  # v5's CLOSE: cat sees the end of its input
    resp.run_forever(timeout=30)
    assert resp.read_stdout() == "through stdin\n"
    assert resp.returncode == 3
    resp.close()

    pf = portforward(kube.connect_get_namespaced_pod_portforward, web, namespace, ports="8080")
    sock = pf.socket(8080)
    sock.setblocking(True)
    sock.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
    answer = b""
    while chunk := sock.recv(4096):
        answer += chunk
    sock.close()
    assert answer.startswith(b"HTTP/1.") and answer.endswith(b"\r\n\r\nhello-web\n"), answer
    assert pf.error(8080) is None


def test_stream_errors_are_upstreams(kube, kubeconfig, namespace, node_name, image, shell):
    done = kubectl(kubeconfig, namespace, "exec", shell, "-c", "nope", "--", "true")
    assert done.returncode == 1 and b"container nope is not valid for pod sh" in done.stderr, done
    done = kubectl(kubeconfig, namespace, "exec", "nosuchpod", "--", "true")
    assert done.returncode == 1 and b'pods "nosuchpod" not found' in done.stderr, done
    # A container that never started: the kubelet has no container to exec in.
    make_pod(kube, namespace, "waiting", node_name, f"{image}-no-such-tag", "true", wait=False)
    wait_for(
        lambda: (kube.read_namespaced_pod("waiting", namespace).status.container_statuses or [None])[0],
        what="a container status",
    )
    done = kubectl(kubeconfig, namespace, "exec", "waiting", "--", "true")
    assert done.returncode == 1 and b'container not found ("main")' in done.stderr, done
    # A pod no scheduler placed.
    kube.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="unplaced"),
            spec=client.V1PodSpec(
                scheduler_name="nobody", containers=[client.V1Container(name="main", image=image)]
            ),
        ),
    )
    with pytest.raises(ApiException) as err:
        kube.connect_post_namespaced_pod_exec("unplaced", namespace, command=["true"], stdout=True)
    assert err.value.status == 400 and "pod unplaced does not have a host assigned" in err.value.body


def test_bad_upgrade_requests_are_refused_at_once(api_client, kube, namespace, shell):
    # No upgrade at all.
    started = time.monotonic()
    with pytest.raises(ApiException) as err:
        kube.connect_post_namespaced_pod_exec(shell, namespace, command=["true"], stdout=True)
    assert err.value.status == 400 and "Upgrade request required" in err.value.body
    # A WebSocket asking for a subprotocol nobody speaks.
    from kubernetes.stream.ws_client import create_websocket, get_websocket_url
    from websocket import WebSocketBadStatusException

    host = api_client.configuration.host
    url = get_websocket_url(
        f"{host}/api/v1/namespaces/{namespace}/pods/{shell}/exec", [("command", "true"), ("stdout", "true")]
    )
    with pytest.raises(WebSocketBadStatusException) as bad:
        create_websocket(api_client.configuration, url, headers={"sec-websocket-protocol": "bogus.k8s.io"})
    assert bad.value.status_code in (400, 403)
    assert time.monotonic() - started < 10


# The 200 aborted sessions, of the three kinds a client can walk away from.
ABORTED_WEBSOCKETS, ABORTED_EXECS, ABORTED_PORT_FORWARDS = 120, 50, 30


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_aborted_sessions_leave_nothing_behind(stack, api_client, kube, kubeconfig, namespace, shell, web):
    from kubernetes.stream.ws_client import create_websocket, get_websocket_url

    pids = {
        name: pid for name, pid in stack.record().pids.items() if name in ("apiserver", "agent", "containerd")
    }
    # One session of each kind first, so lazily opened files and pools count in the baseline.
    assert kubectl(kubeconfig, namespace, "exec", shell, "--", "true").returncode == 0
    baseline = {name: _fds(pid) for name, pid in pids.items()}
    url = get_websocket_url(
        f"{api_client.configuration.host}/api/v1/namespaces/{namespace}/pods/{shell}/exec",
        [("command", "cat"), ("stdin", "true"), ("stdout", "true")],
    )
    for _ in range(ABORTED_WEBSOCKETS):  # the client vanishes mid-stream, without a WebSocket close
        ws = create_websocket(api_client.configuration, url)
        ws.send_binary(b"\x00hello\n")
        assert ws.recv()[1:] == b"hello\n"
        ws.sock.shutdown(socket.SHUT_RDWR)
        ws.sock.close()
    for _ in range(ABORTED_EXECS):  # kubectl killed while its command runs
        proc = subprocess.Popen(
            ["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace, "exec", "-i", shell, "--", "cat"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"x\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == b"x\n"
        proc.kill()
        proc.wait()
    for _ in range(ABORTED_PORT_FORWARDS):  # port-forward killed with a connection open
        local = _free_port()
        proc = subprocess.Popen(
            [
                "kubectl",
                "--kubeconfig",
                str(kubeconfig),
                "-n",
                namespace,
                "port-forward",
                f"pod/{web}",
                f"{local}:8080",
                "--address",
                "127.0.0.1",
            ],
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stdout.readline().startswith(b"Forwarding from")
        conn = socket.create_connection(("127.0.0.1", local), timeout=10)
        conn.sendall(b"GET /big HTTP/1.0\r\n\r\n")
        assert conn.recv(100).startswith(b"HTTP/1.")
        proc.kill()
        proc.wait()
        conn.close()

    def settled() -> bool:
        return all(_fds(pid) <= baseline[name] + 2 for name, pid in pids.items())

    wait_for(settled, timeout=30, what=f"descriptors back to {baseline}")
    left = kubectl(kubeconfig, namespace, "exec", shell, "--", "ps", "-o", "comm").stdout.split()
    assert b"cat" not in left, left


def test_an_anonymous_stream_is_refused(api_client, namespace, shell):
    """The streaming subresources sit behind the same authentication and authorization as everything
    else: without credentials a SPDY upgrade is refused (401, or 403 for system:anonymous where anonymous
    authentication is on, upstream's default), never switched."""
    host = api_client.configuration.host.removeprefix("https://")
    name, _, port = host.rpartition(":")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection((name.strip("[]"), int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=name) as tls,
    ):
        tls.sendall(
            f"POST /api/v1/namespaces/{namespace}/pods/{shell}/exec?command=true&stdout=true HTTP/1.1\r\n"
            f"Host: {host}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n".encode()
        )
        answer = tls.recv(100)
        assert answer.startswith((b"HTTP/1.1 401 ", b"HTTP/1.1 403 ")), answer


def test_a_closed_port_is_reported_on_the_error_stream(kubeconfig, namespace, web):
    local = _free_port()
    proc = subprocess.Popen(
        [
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "-n",
            namespace,
            "port-forward",
            f"pod/{web}",
            f"{local}:9999",
            "--address",
            "127.0.0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith(b"Forwarding from")
        with socket.create_connection(("127.0.0.1", local), timeout=20) as conn:
            conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert conn.recv(100) == b""  # nothing listens there: the forwarded connection just ends
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert b"connection refused" in err, err


def test_pod_and_node_proxy_reach_their_targets(kube, kubeconfig, namespace, node_name, web):
    done = kubectl(
        kubeconfig,
        namespace,
        "get",
        "--raw",
        f"/api/v1/namespaces/{namespace}/pods/{web}:8080/proxy/index.html",
    )
    assert (done.returncode, done.stdout) == (0, b"hello-web\n"), done
    done = kubectl(kubeconfig, namespace, "get", "--raw", f"/api/v1/nodes/{node_name}/proxy/healthz")
    assert (done.returncode, done.stdout) == (0, b"ok"), done
