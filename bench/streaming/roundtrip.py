"""Streaming through the API server vs. the floors beneath it, in the same run (issue 16).

  python bench/streaming/roundtrip.py [--rounds 30] [--mib 64] [--out bench/results]
  python bench/streaming/roundtrip.py --smoke --out DIR        # 3 rounds, 1 MiB: about 30 s

On one stack, against one running busybox pod:
  exec round trip: `kubectl exec POD -- true` (WebSocket v5 -> API server -> SPDY -> agent -> runtime)
  beside `kubectl get pod POD -o name` (kubectl's own start and one API request, the anchor), the
  official client's stream() exec of `true`, and a raw CRI ExecSync of `true` (the floor).
  port-forward throughput: a file of --mib MiB fetched over `kubectl port-forward` (SPDY tunnelled in
  WebSocket through the API server, the agent and containerd's streaming server) against the same
  fetch straight from the pod IP (goal: >= 0.5x), with the CPU seconds per MiB each process on the
  path spent during the tunnelled fetches (kubectl, the API server, the agent, containerd, this
  client), which says where the time goes.
Figures are reported, never asserted. Writes streaming-roundtrip.{json,md,svg}.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.cri import CRIClient
from agent.pods import labels as L
from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from pykubelet.rig.onstack import run_on_stack
from pykubelet.rig.stack import Stack


@dataclass(frozen=True)
class Size:
    rounds: int = 30
    mib: int = 64


SMOKE = Size(rounds=3, mib=1)


def kubectl(stack: Stack, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(stack.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.decode()}")
    return done


def timed(fn, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(values) * 1000, 2),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 2),
        "min": round(ordered[0] * 1000, 2),
    }


def fetch_rate(url: str, size: int) -> float:
    """MiB/s of one GET of `size` bytes."""
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as resp:
        got = len(resp.read())
    if got != size:
        raise RuntimeError(f"{url}: {got} of {size} bytes")
    return size / (1 << 20) / (time.perf_counter() - t0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its reaped children so far (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def bench(stack: Stack, size: Size) -> dict:
    assert stack.images is not None and stack.containerd is not None
    nbytes = size.mib << 20
    script = f"head -c {nbytes} /dev/zero > /srv && mkdir -p /www && mv /srv /www/blob && exec httpd -f -p 8080 -h /www"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "target", "namespace": "default"},
        "spec": {
            "nodeName": stack.node_name,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": stack.images.busybox, "command": ["sh", "-c", script]}],
        },
    }
    kubectl(stack, "apply", "-f", "-", stdin=json.dumps(pod).encode())
    kubectl(stack, "wait", "--for=condition=Ready", "pod/target", "--timeout=120s")
    info = json.loads(kubectl(stack, "get", "pod", "target", "-o", "json").stdout)
    uid, pod_ip = info["metadata"]["uid"], info["status"]["podIP"]

    from kubernetes import client, config
    from kubernetes.stream import stream

    core = client.CoreV1Api(config.new_client_from_config(config_file=str(stack.kubeconfig)))
    cri = await CRIClient.connect(stack.containerd.endpoint)
    try:
        (container,) = await cri.list_containers(labels={L.POD_UID: uid, L.CONTAINER_NAME: "main"})
        floor = []
        for _ in range(size.rounds):
            t0 = time.perf_counter()
            await cri.exec_sync(container.id, ["true"])
            floor.append(time.perf_counter() - t0)
    finally:
        await cri.close()
    anchor = timed(lambda: kubectl(stack, "get", "pod", "target", "-o", "name"), size.rounds)
    kexec = timed(lambda: kubectl(stack, "exec", "target", "--", "true"), size.rounds)
    pyexec = timed(
        lambda: stream(
            core.connect_get_namespaced_pod_exec,
            "target",
            "default",
            command=["true"],
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
        ),
        size.rounds,
    )

    local = free_port()
    forward = subprocess.Popen(
        [
            "kubectl",
            "--kubeconfig",
            str(stack.kubeconfig),
            "port-forward",
            "pod/target",
            f"{local}:8080",
            "--address",
            "127.0.0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert forward.stdout is not None and forward.stdout.readline().startswith(b"Forwarding from")
        rounds = max(3, size.rounds // 10)
        direct = [fetch_rate(f"http://{pod_ip}:8080/blob", nbytes) for _ in range(rounds)]
        path = {
            name: pid
            for name, pid in stack.record().pids.items()
            if name in ("apiserver", "agent", "containerd")
        }
        path |= {"kubectl": forward.pid, "client": os.getpid()}
        before = {name: cpu_seconds(pid) for name, pid in path.items()}
        tunnel = [fetch_rate(f"http://127.0.0.1:{local}/blob", nbytes) for _ in range(rounds)]
        cpu_ms_per_mib = {
            name: round((cpu_seconds(pid) - before[name]) * 1e3 / (rounds * size.mib), 2)
            for name, pid in path.items()
        }
    finally:
        forward.terminate()
        forward.wait(timeout=10)
    direct_rate, tunnel_rate = statistics.median(direct), statistics.median(tunnel)
    return {
        "rounds": size.rounds,
        "mib": size.mib,
        "cpus": os.cpu_count(),
        "exec_ms": {
            "cri_exec_sync": ms(floor),
            "kubectl_get_anchor": ms(anchor),
            "kubectl_exec": ms(kexec),
            "client_stream_exec": ms(pyexec),
        },
        "kubectl_exec_over_get": round(statistics.median(kexec) / statistics.median(anchor), 2),
        "port_forward_mib_s": {
            "direct": round(direct_rate, 1),
            "kubectl_port_forward": round(tunnel_rate, 1),
        },
        "port_forward_ratio": round(tunnel_rate / direct_rate, 3),
        "port_forward_cpu_ms_per_mib": cpu_ms_per_mib,
    }


def markdown(r: dict) -> str:
    e = r["exec_ms"]
    rows = "\n".join(f"| {k} | {v['p50']} | {v['p90']} | {v['min']} |" for k, v in e.items())
    pf = r["port_forward_mib_s"]
    return (
        f"# Streaming round trips ({r['rounds']} rounds, {r['cpus']} CPUs)\n\n"
        "| exec of `true` | p50 ms | p90 ms | min ms |\n| --- | --- | --- | --- |\n" + rows + "\n\n"
        f"kubectl exec / kubectl get (its own start + one request): {r['kubectl_exec_over_get']}x\n\n"
        f"Port-forward, {r['mib']} MiB GET: direct {pf['direct']} MiB/s, through kubectl port-forward "
        f"{pf['kubectl_port_forward']} MiB/s, ratio {r['port_forward_ratio']} (goal >= 0.5)\n\n"
        "CPU ms per MiB tunnelled: "
        + ", ".join(f"{k} {v}" for k, v in r["port_forward_cpu_ms_per_mib"].items())
        + "\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=Size.rounds)
    parser.add_argument("--mib", type=int, default=Size.mib)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    size = SMOKE if args.smoke else Size(args.rounds, args.mib)
    report = run_on_stack(lambda stack: bench(stack, size), tag="r")
    bars = [(f"exec {k} p50", v["p50"]) for k, v in report["exec_ms"].items()]
    write_report(
        out, "streaming-roundtrip", report, markdown(report), bar_svg("Streaming round trips", bars, "ms")
    )
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
