"""Port-forward throughput hop by hop, rounds interleaved (issue 36): where a tunnelled byte's time goes.

  python bench/streaming/portforward.py [--rounds 5] [--mib 64] [--out bench/results]
  python bench/streaming/portforward.py --smoke --out DIR        # 2 rounds, 1 MiB

roundtrip.py's port-forward figure (kubectl port-forward against the pod IP, 0.16-0.19x) keeps its
definition; this benchmark adds the anchors beside it, on one stack and one busybox httpd pod serving a
file of --mib MiB, every round fetching it once over each path in turn (so a load swing on this shared
machine hits all paths alike; each round carries the load average when it started):
  direct             urllib GET of the pod IP (roundtrip.py's denominator)
  containerd         the same GET inside a SPDY port-forward stream opened on containerd's streaming
                     server itself (the URL of a CRI PortForward call): the anchor the issue asked for
  apiserver_spdy     the same SPDY client through the API server's pods/portforward (SPDY upgrade proxied
                     byte for byte to the agent, which proxies it to containerd)
  kubectl            urllib GET through `kubectl port-forward` (WebSocket-tunnelled SPDY; roundtrip.py's
                     numerator)
The SPDY client is ours (kubeclient/httpstream/spdy.py, Python), the same for both SPDY paths, so the
difference between them is the agent's and the API server's hops. With --profile, `perf` samples the API
server and the agent (bench/perfprofile.py's categories) during extra kubectl fetches. CPU ms per MiB of
each process is taken over the kubectl fetches (clock ticks, as before). Beside it, for every path, each
process's time on a CPU and time runnable but waiting for one (the scheduler's per-thread schedstat, in
nanoseconds; busybox httpd serves each connection from a forked child, so its figure is its container's
CPU as CRI's stats give it, with no wait): their sum over a path's processes is the CPU a tunnelled MiB
costs the machine, which bounds a path's rate once the cores are busy, and the waits say how busy they
were. Figures are reported, never asserted. Writes streaming-portforward.{json,md,svg}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.cri import CRIClient
from bench.perfprofile import Profile
from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from bench.streaming.roundtrip import cpu_seconds, fetch_rate, free_port, kubectl
from kubeclient.config import load_kubeconfig
from kubeclient.httpstream import protocols as P
from kubeclient.httpstream.spdy import SpdyClient
from kubeclient.httpstream.upgrade import dial
from pykubelet.rig.onstack import run_on_stack
from pykubelet.rig.stack import Stack

PORT = 8080
PATHS = ("direct", "containerd", "apiserver_spdy", "kubectl")
PROCESSES = ("httpd", "containerd", "agent", "apiserver", "kubectl", "client")


def scheduled_seconds(pid: int) -> dict[int, tuple[float, float]]:
    """{thread id: (seconds on a CPU, seconds runnable waiting for one)} of a process's live threads
    (/proc/PID/task/TID/schedstat)."""
    out: dict[int, tuple[float, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run, wait, _ = f.read().split()
        except (OSError, ValueError):
            continue
        out[int(tid)] = (int(run) / 1e9, int(wait) / 1e9)
    return out


def scheduled_delta(
    before: dict[int, tuple[float, float]], after: dict[int, tuple[float, float]]
) -> tuple[float, float]:
    """Run and wait seconds between two samples (a thread born in between counts from zero)."""
    run = sum(r - before.get(tid, (0.0, 0.0))[0] for tid, (r, _) in after.items())
    wait = sum(w - before.get(tid, (0.0, 0.0))[1] for tid, (_, w) in after.items())
    return run, wait


@dataclass(frozen=True)
class Size:
    rounds: int = 5
    mib: int = 64
    profile: bool = False


SMOKE = Size(rounds=2, mib=1)


async def spdy_fetch(
    url: str, nbytes: int, ssl_context=None, headers: tuple[tuple[str, str], ...] = ()
) -> float:
    """MiB/s of one GET of /blob (nbytes) carried in a SPDY port-forward data stream opened on `url`."""
    t0 = time.perf_counter()
    upgrade = [
        ("Connection", "Upgrade"),
        ("Upgrade", P.SPDY_31),
        (P.PROTOCOL_VERSION_HEADER, "portforward.k8s.io"),
    ]
    backend = await dial(url, "POST", [*upgrade, *headers], ssl_context)
    if backend.status != 101:
        body = await backend.body()
        backend.close()
        raise RuntimeError(f"{url}: {backend.status} {body[:200]!r}")
    spdy = SpdyClient(backend.reader, backend.writer)
    done = asyncio.get_running_loop().create_future()
    state = {"head": b"", "want": -1, "got": 0}

    async def on_data(stream: int, data: bytes, fin: bool) -> None:
        if stream != 3:  # 1 is the error stream, 3 the data stream
            if data and not done.done():
                done.set_exception(RuntimeError(f"port-forward error: {data[:200]!r}"))
            return
        if state["want"] < 0:
            state["head"] += data
            end = state["head"].find(b"\r\n\r\n")
            if end < 0:
                return
            state["want"] = end + 4 + nbytes
            state["got"] = len(state["head"])
        else:
            state["got"] += len(data)
        if (state["got"] >= state["want"] or fin) and not done.done():
            done.set_result(state["got"] - (state["want"] - nbytes))

    reading = asyncio.ensure_future(spdy.run(on_data))
    try:
        common = [("port", str(PORT)), ("requestid", "0")]
        await spdy.open_stream([("streamtype", "error"), *common])
        data = await spdy.open_stream([("streamtype", "data"), *common])
        await spdy.write(data, b"GET /blob HTTP/1.0\r\nHost: pod\r\n\r\n")
        got = await asyncio.wait_for(done, 300)
    finally:
        await spdy.close()
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
    if got != nbytes:
        raise RuntimeError(f"{url}: {got} of {nbytes} bytes")
    return nbytes / (1 << 20) / (time.perf_counter() - t0)


async def listening(host: str, port: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
            continue
        writer.close()
        return


async def bench(stack: Stack, size: Size) -> dict:
    assert stack.images is not None and stack.containerd is not None
    nbytes = size.mib << 20
    script = (
        f"head -c {nbytes} /dev/zero > /srv && mkdir -p /www && mv /srv /www/blob && "
        f"exec httpd -f -p {PORT} -h /www"
    )
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
    await listening(pod_ip, PORT)  # httpd starts once the blob is written
    config = load_kubeconfig(stack.kubeconfig)
    token = config.bearer_token()
    auth = (("Authorization", f"Bearer {token}"),) if token else ()
    api_url = f"{config.server}/api/v1/namespaces/default/pods/target/portforward?ports={PORT}"
    api_ssl = config.ssl_context()
    cri = await CRIClient.connect(stack.containerd.endpoint)
    local = free_port()
    forward = subprocess.Popen(
        ["kubectl", "--kubeconfig", str(stack.kubeconfig), "port-forward", "pod/target", f"{local}:{PORT}"]
        + ["--address", "127.0.0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    loop = asyncio.get_running_loop()
    try:
        (sandbox,) = [s for s in await cri.list_pod_sandbox() if s.metadata.uid == uid]
        (container,) = [c for c in await cri.list_containers() if c.pod_sandbox_id == sandbox.id]

        async def httpd_seconds() -> float:
            return (await cri.container_stats(container.id)).cpu.usage_core_nano_seconds.value / 1e9

        async def via_containerd() -> float:
            return await spdy_fetch(await cri.port_forward(sandbox.id, [PORT]), nbytes)

        async def off_loop(fn: Callable[[], float]) -> float:
            return await loop.run_in_executor(None, fn)

        fetchers: dict[str, Callable[[], Awaitable[float]]] = {
            "direct": lambda: off_loop(lambda: fetch_rate(f"http://{pod_ip}:{PORT}/blob", nbytes)),
            "containerd": via_containerd,
            "apiserver_spdy": lambda: spdy_fetch(api_url, nbytes, api_ssl, auth),
            "kubectl": lambda: off_loop(lambda: fetch_rate(f"http://127.0.0.1:{local}/blob", nbytes)),
        }
        assert forward.stdout is not None and forward.stdout.readline().startswith(b"Forwarding from")
        pids = {n: p for n, p in stack.record().pids.items() if n in ("apiserver", "agent", "containerd")}
        pids |= {"kubectl": forward.pid, "client": os.getpid()}
        rounds: list[dict] = []
        cpu = dict.fromkeys(pids, 0.0)
        scheduled: dict[str, list[dict[str, tuple[float, float | None]]]] = {name: [] for name in PATHS}
        for _ in range(size.rounds):
            row: dict = {"loadavg_1m": os.getloadavg()[0]}
            for name in PATHS:
                if name == "kubectl":
                    before = {n: cpu_seconds(p) for n, p in pids.items()}
                sched_before = {n: scheduled_seconds(p) for n, p in pids.items()}
                httpd_before = await httpd_seconds()
                row[name] = round(await fetchers[name](), 1)
                scheduled[name].append(
                    {n: scheduled_delta(sched_before[n], scheduled_seconds(p)) for n, p in pids.items()}
                    | {"httpd": (await httpd_seconds() - httpd_before, None)}
                )
                if name == "kubectl":
                    cpu = {n: cpu[n] + cpu_seconds(p) - before[n] for n, p in pids.items()}
            rounds.append(row)
        profiles = {}
        if size.profile:
            for target in ("apiserver", "agent"):
                with Profile(pids[target]) as prof:
                    for _ in range(3):
                        await fetchers["kubectl"]()
                profiles[target] = prof.summary()
    finally:
        forward.terminate()
        forward.wait(timeout=10)
        await cri.close()
    median = {name: round(statistics.median(r[name] for r in rounds), 1) for name in PATHS}
    ratios = [{name: round(r[name] / r["direct"], 3) for name in PATHS[1:]} for r in rounds]
    return {
        "rounds": size.rounds,
        "mib": size.mib,
        "cpus": os.cpu_count(),
        "per_round_mib_s": rounds,
        "median_mib_s": median,
        "median_ratio_to_direct": {n: round(statistics.median(r[n] for r in ratios), 3) for n in PATHS[1:]},
        "median_ratio_to_containerd": {
            n: round(statistics.median(r[n] / r["containerd"] for r in rounds), 3)
            for n in ("apiserver_spdy", "kubectl")
        },
        "kubectl_cpu_ms_per_mib": {n: round(v * 1e3 / (size.rounds * size.mib), 2) for n, v in cpu.items()},
        "scheduled_ms_per_mib": {
            path: {n: per_mib([r[n] for r in per_round], size.mib) for n in PROCESSES}
            for path, per_round in scheduled.items()
        },
        "profiles": profiles,
    }


def per_mib(samples: list[tuple[float, float | None]], mib: int) -> dict[str, float | None]:
    """{run, wait}: the rounds' median seconds as ms per MiB (wait None where it was not measured)."""
    waits = [w for _, w in samples if w is not None]
    return {
        "run": round(statistics.median(r for r, _ in samples) * 1e3 / mib, 2),
        "wait": round(statistics.median(waits) * 1e3 / mib, 2) if len(waits) == len(samples) else None,
    }


def scheduled_table(scheduled: dict[str, dict[str, dict[str, float | None]]]) -> str:
    """ms per MiB on a CPU / waiting for one, each process on each path (median of the rounds)."""
    head = "| path | " + " | ".join(PROCESSES) + " | all: on a CPU | all: waiting (measured) |\n"
    head += "| --- " * (len(PROCESSES) + 3) + "|\n"
    rows = ""
    for path, procs in scheduled.items():
        cells = [
            f"{procs[n]['run']} / {'-' if procs[n]['wait'] is None else procs[n]['wait']}" for n in PROCESSES
        ]
        run = round(sum(procs[n]["run"] or 0.0 for n in PROCESSES), 2)
        wait = round(sum(procs[n]["wait"] or 0.0 for n in PROCESSES), 2)
        rows += f"| {path} | " + " | ".join(cells) + f" | {run} | {wait} |\n"
    return (
        "\nms per MiB each process spent on a CPU / runnable waiting for one (schedstat, every thread; httpd: "
        "its container's CPU from CRI, no wait; median of the rounds):\n\n" + head + rows
    )


def markdown(r: dict) -> str:
    head = "| round | load 1m | " + " | ".join(f"{p} MiB/s" for p in PATHS) + " |\n"
    head += "| --- " * (len(PATHS) + 2) + "|\n"
    rows = "".join(
        f"| {i} | {row['loadavg_1m']:.2f} | " + " | ".join(str(row[p]) for p in PATHS) + " |\n"
        for i, row in enumerate(r["per_round_mib_s"], 1)
    )
    text = (
        f"# Port-forward hop by hop ({r['rounds']} interleaved rounds, {r['mib']} MiB GET, {r['cpus']} CPUs)\n\n"
        + head
        + rows
        + "\nMedian of the per-round ratios to the direct path: "
        + ", ".join(f"{k} {v}" for k, v in r["median_ratio_to_direct"].items())
        + "\n\nMedian ratio to containerd's streaming server alone (same SPDY client for apiserver_spdy): "
        + ", ".join(f"{k} {v}" for k, v in r["median_ratio_to_containerd"].items())
        + "\n\nCPU ms per MiB over the kubectl fetches: "
        + ", ".join(f"{k} {v}" for k, v in r["kubectl_cpu_ms_per_mib"].items())
        + "\n"
        + scheduled_table(r["scheduled_ms_per_mib"])
    )
    for target, summary in r["profiles"].items():
        text += f"\n`perf` of the {target} during kubectl fetches: {json.dumps(summary)}\n"
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=Size.rounds)
    parser.add_argument("--mib", type=int, default=Size.mib)
    parser.add_argument("--profile", action="store_true", help="perf samples of the API server and agent")
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    size = SMOKE if args.smoke else Size(args.rounds, args.mib, args.profile)
    report = run_on_stack(lambda stack: bench(stack, size), tag="f")
    bars = [(f"{k} (median MiB/s)", v) for k, v in report["median_mib_s"].items()]
    write_report(
        out,
        "streaming-portforward",
        report,
        markdown(report),
        bar_svg("Port-forward throughput", bars, "MiB/s"),
    )
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
