"""Admission webhook benchmark (issue 20): what one mutating and one validating webhook add to a write.
Figures are reported, never asserted.

  python bench/apiserver/webhooks.py [--seconds 4 --rounds 4 --connections 1] [--out DIR]
  python bench/apiserver/webhooks.py --smoke --out DIR      # 1 round of 1 s

One API server (the rig: HTTPS, SQLite) and one webhook server (aiohttp over TLS with its own CA, a
subprocess of this script) answering /mutate (a JSONPatch adding a label) and /validate (allowed). Both
webhooks select ConfigMap creates in the namespace `hooked` only, so the baseline is the same server
creating ConfigMaps in `plain` (the webhooks are matched there and skipped, as any request outside a
webhook's selectors is). Closed loop over keep-alive TLS connections; the windows alternate between the
two namespaces after a warm-up. The webhook's own response time is measured the same way: the same
client POSTing a ConfigMap's AdmissionReview straight to the webhook. The figure of merit is the added
p50 (hooked - plain) minus the two webhook round trips it contains (goal: within 2 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.apiserver.run import RawConnection, cpu_seconds, pct, ssl_context
from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from pykubelet.rig.apiserver import ApiServer

HOOKED, PLAIN = "hooked", "plain"
ADM = "/apis/admissionregistration.k8s.io/v1"
SERVER_CPU, CLIENT_CPU = 0, 1


# --- the webhook server (run as `webhooks.py --serve-webhook DIR`) --------------------------------------


def serve_webhook(directory: Path) -> None:
    from aiohttp import web

    from tests.controlplane.webhookserver import make_tls

    ca_pem, cert, key = make_tls(directory, ["127.0.0.1", "localhost"])
    (directory / "ca.pem").write_bytes(ca_pem)
    patch = base64.b64encode(
        json.dumps([{"op": "add", "path": "/metadata/labels", "value": {"webhook": "seen"}}]).encode()
    ).decode()

    async def mutate(request: web.Request) -> web.Response:
        review = await request.json()
        answer = {"uid": review["request"]["uid"], "allowed": True, "patchType": "JSONPatch", "patch": patch}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}
        )

    async def validate(request: web.Request) -> web.Response:
        review = await request.json()
        answer = {"uid": review["request"]["uid"], "allowed": True}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}
        )

    async def main() -> None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        app = web.Application()
        app.router.add_post("/mutate", mutate)
        app.router.add_post("/validate", validate)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        assert site._server is not None
        print(site._server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def _pin(pid: int | None, cpu: int) -> None:
    if pid is not None and (os.cpu_count() or 1) > 1:
        try:
            os.sched_setaffinity(pid, {cpu})
        except OSError:
            pass


# --- the load --------------------------------------------------------------------------------------------


def configmap(namespace: str) -> bytes:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"cm-{uuid.uuid4().hex[:12]}", "namespace": namespace},
        "data": {"key": "x" * 200},
    }
    return json.dumps(body).encode()


def review_body(namespace: str) -> bytes:
    request = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "namespace": namespace,
        "operation": "CREATE",
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
        "object": json.loads(configmap(namespace)),
        "dryRun": False,
    }
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


async def window(
    conns: list[RawConnection],
    method_path: tuple[str, str],
    body: callable,
    seconds: float,
    pid: int | None,  # type: ignore[valid-type]
) -> dict:
    method, path = method_path
    latencies: list[float] = []
    errors = 0
    cpu0 = cpu_seconds(pid) if pid else 0.0
    deadline = time.monotonic() + seconds

    async def worker(conn: RawConnection) -> None:
        nonlocal errors
        while time.monotonic() < deadline:
            payload = body()
            start = time.perf_counter()
            status, _ = await conn.request(method, path, payload)
            latencies.append((time.perf_counter() - start) * 1000)
            if status >= 300:
                errors += 1

    await asyncio.gather(*(worker(c) for c in conns))
    cpu = (cpu_seconds(pid) - cpu0) if pid else 0.0
    return {
        "requests": len(latencies),
        "errors": errors,
        "p50_ms": round(pct(latencies, 50), 3) if latencies else float("nan"),
        "p99_ms": round(pct(latencies, 99), 3) if latencies else float("nan"),
        "server_cpu_ms_per_request": round(cpu * 1000 / max(len(latencies), 1), 3),
        "load_average_1m": os.getloadavg()[0],
        "latencies": latencies,
    }


def combine(windows: list[dict]) -> dict:
    every = [x for w in windows for x in w["latencies"]]
    n = len(every)
    return {
        "requests": n,
        "errors": sum(w["errors"] for w in windows),
        "p50_ms": round(pct(every, 50), 3) if every else float("nan"),
        "p99_ms": round(pct(every, 99), 3) if every else float("nan"),
        "server_cpu_ms_per_request": round(
            sum(w["server_cpu_ms_per_request"] * w["requests"] for w in windows) / max(n, 1), 3
        ),
        "load_average_1m": max(w["load_average_1m"] for w in windows),
    }


def webhook(name: str, url: str, ca: str) -> dict:
    return {
        "name": name,
        "clientConfig": {"url": url, "caBundle": ca},
        "rules": [
            {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}
        ],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": HOOKED}},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }


async def run(args: argparse.Namespace, tmp: Path) -> dict:
    hook_dir = tmp / "webhook"
    hook_dir.mkdir()
    hook_proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-webhook", str(hook_dir)], stdout=subprocess.PIPE, text=True
    )
    server = ApiServer(tmp / "apiserver")
    try:
        assert hook_proc.stdout is not None
        port = int(hook_proc.stdout.readline())
        _pin(hook_proc.pid, CLIENT_CPU)
        server.start()
        _pin(server.pid, SERVER_CPU)
        ctx = ssl_context(server)
        admin = await RawConnection.open("127.0.0.1", server.port, ctx)
        for ns in (HOOKED, PLAIN):
            status, text = await admin.request(
                "POST",
                "/api/v1/namespaces",
                json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}).encode(),
            )
            assert status == 201, text
        ca = base64.b64encode((hook_dir / "ca.pem").read_bytes()).decode()
        for plural, kind, hook in (
            (
                "mutatingwebhookconfigurations",
                "MutatingWebhookConfiguration",
                webhook("mutate.bench.example.com", f"https://127.0.0.1:{port}/mutate", ca),
            ),
            (
                "validatingwebhookconfigurations",
                "ValidatingWebhookConfiguration",
                webhook("validate.bench.example.com", f"https://127.0.0.1:{port}/validate", ca),
            ),
        ):
            body = {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": "bench"},
                "webhooks": [hook],
            }
            status, text = await admin.request("POST", f"{ADM}/{plural}", json.dumps(body).encode())
            assert status == 201, text
        # The mutation shows: a hooked create comes back labelled.
        status, text = await admin.request(
            "POST", f"/api/v1/namespaces/{HOOKED}/configmaps", configmap(HOOKED)
        )
        assert status == 201 and json.loads(text)["metadata"]["labels"] == {"webhook": "seen"}, text
        admin.close()

        api_conns = [await RawConnection.open("127.0.0.1", server.port, ctx) for _ in range(args.connections)]
        hook_ctx = ssl.create_default_context(cafile=str(hook_dir / "ca.pem"))
        hook_conns = [await RawConnection.open("127.0.0.1", port, hook_ctx) for _ in range(args.connections)]
        cases = {
            "plain": (
                api_conns,
                ("POST", f"/api/v1/namespaces/{PLAIN}/configmaps"),
                lambda: configmap(PLAIN),
                server.pid,
            ),
            "hooked": (
                api_conns,
                ("POST", f"/api/v1/namespaces/{HOOKED}/configmaps"),
                lambda: configmap(HOOKED),
                server.pid,
            ),
            "webhook alone": (hook_conns, ("POST", "/mutate"), lambda: review_body(HOOKED), hook_proc.pid),
        }
        for conns, path, body, pid in cases.values():  # warm-up
            await window(conns, path, body, min(1.0, args.seconds), pid)
        windows: dict[str, list[dict]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, (conns, path, body, pid) in cases.items():
                windows[name].append(await window(conns, path, body, args.seconds, pid))
        for conn in api_conns + hook_conns:
            conn.close()
    finally:
        server.stop()
        hook_proc.kill()
        hook_proc.wait()
    results = {name: combine(ws) for name, ws in windows.items()}
    added = results["hooked"]["p50_ms"] - results["plain"]["p50_ms"]
    own = results["webhook alone"]["p50_ms"]
    return {
        "connections": args.connections,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "results": results,
        "added_p50_ms": round(added, 3),
        "webhook_p50_ms": own,
        "added_beyond_two_webhook_calls_ms": round(added - 2 * own, 3),
        "goal_ms": 2.0,
    }


def markdown(report: dict) -> str:
    r = report["results"]
    lines = [
        "# Admission webhooks: request latency",
        "",
        f"ConfigMap creates, {report['connections']} keep-alive TLS connections, closed loop, "
        f"{report['rounds']} interleaved windows of {report['seconds']:g} s per case:",
        "",
        "| case | requests | p50 ms | p99 ms | server CPU ms/request | errors | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, x in r.items():
        lines.append(
            f"| {name} | {x['requests']} | {x['p50_ms']} | {x['p99_ms']} | {x['server_cpu_ms_per_request']} | "
            f"{x['errors']} | {x['load_average_1m']:.1f} |"
        )
    lines += [
        "",
        f"Added p50 (one mutating + one validating webhook): **{report['added_p50_ms']} ms**; the webhook's own "
        f"p50 (straight to it): {report['webhook_p50_ms']} ms; added beyond the two calls: "
        f"**{report['added_beyond_two_webhook_calls_ms']} ms** (goal <= {report['goal_ms']:g} ms).",
        "",
        "(`webhook alone`: server CPU is the webhook process's.)",
    ]
    return "\n".join(lines)


def svg_plot(report: dict) -> str:
    bars = [(f"{name} p50", x["p50_ms"]) for name, x in report["results"].items()]
    bars += [(f"{name} p99", x["p99_ms"]) for name, x in report["results"].items()]
    return bar_svg("Admission webhooks: ConfigMap create latency", bars, "ms")


SMOKE = {"seconds": 1.0, "rounds": 1, "connections": 1}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-webhook":
        serve_webhook(Path(sys.argv[2]))
        sys.exit(0)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=4, help="interleaved windows per case")
    parser.add_argument(
        "--connections", type=int, default=1, help="1: latency without queueing behind other requests"
    )
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    if args.smoke:
        vars(args).update(SMOKE)
    _pin(os.getpid(), CLIENT_CPU)
    with tempfile.TemporaryDirectory(prefix="bench-webhooks-") as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    text = markdown(result)
    write_report(out, "apiserver-webhooks", result, text, svg_plot(result))
    print(text)
