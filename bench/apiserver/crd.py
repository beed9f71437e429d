"""Custom resources against ConfigMaps (issue 20): create and list throughput of objects of the same size,
same server, same run. Figures are reported, never asserted.

  python bench/apiserver/crd.py [--seconds 10 --writers 16 --listers 4 --objects 1000 --keys 4] [--out DIR]
  python bench/apiserver/crd.py --smoke --out DIR      # 1 s windows, a few clients

One API server (the rig's: HTTPS, client certificates, SQLite). A CRD `widgets.bench.example.com`
(namespaced, a structural schema: `spec.data` a map of strings with a maxLength, `spec.size` an integer
with bounds and a default), `gadgets` (the same schema and one CEL rule on spec) and ConfigMaps carrying the same `--keys` entries of 64
bytes in `data`: the two bodies differ by a few bytes of apiVersion/kind. Writes: closed-loop creates
by `--writers` connections; lists: closed-loop LISTs of a namespace of `--objects` objects (served from
the watch cache) by `--listers` connections. The windows alternate (ConfigMap, custom resource, ...) so
the machine's other load falls on both; the report gives each rate, p50/p99, the server's CPU per
1 000 requests and the ratios custom resource / ConfigMap (goal >= 0.8x): of the rates, and of the CPU
per request (ConfigMap / custom), which the machine's other tenants disturb least.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.apiserver.replicas import summary, window
from bench.apiserver.run import RawConnection, ssl_context
from bench.reporting import bar_svg, run_and_report
from pykubelet.rig.apiserver import ApiServer

GROUP = "bench.example.com"
PATHS = {
    "configmap": "/api/v1/namespaces/{ns}/configmaps",
    "custom": f"/apis/{GROUP}/v1/namespaces/{{ns}}/widgets",
    "custom+cel": f"/apis/{GROUP}/v1/namespaces/{{ns}}/gadgets",
}
KINDS = {"custom": ("widgets", "Widget"), "custom+cel": ("gadgets", "Gadget")}
RULE = {"rule": "self.size <= 100", "message": "too big"}
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "data": {
                                        "type": "object",
                                        "additionalProperties": {"type": "string", "maxLength": 1024},
                                    },
                                    "size": {"type": "integer", "minimum": 0, "maximum": 100, "default": 1},
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


def crd(kind: str) -> dict:
    """The benchmark's CRD for `kind`: the schema alone, or the schema and one CEL rule on spec."""
    plural, name = KINDS[kind]
    out = json.loads(json.dumps(CRD))
    out["metadata"]["name"] = f"{plural}.{GROUP}"
    out["spec"]["names"] = {"plural": plural, "singular": name.lower(), "kind": name}
    if kind == "custom+cel":
        spec = out["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        spec["x-kubernetes-validations"] = [RULE]
    return out


def body(kind: str, name: str, keys: int) -> bytes:
    data = {f"key{k}": "v" * 64 for k in range(keys)}
    if kind == "configmap":
        return json.dumps(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}
        ).encode()
    return json.dumps(
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": KINDS[kind][1],
            "metadata": {"name": name},
            "spec": {"data": data},
        }
    ).encode()


async def request_ok(
    conn: RawConnection, method: str, path: str, payload: bytes, want: tuple[int, ...]
) -> None:
    status, text = await conn.request(method, path, payload)
    if status not in want:
        raise RuntimeError(f"{method} {path}: {status} {text[:300]!r}")


async def prepare(server: ApiServer, objects: int, keys: int) -> None:
    conn = await RawConnection.open(server.host, server.port, ssl_context(server))
    for kind in KINDS:
        await request_ok(
            conn,
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            json.dumps(crd(kind)).encode(),
            (201, 409),
        )
    deadline = time.monotonic() + 30
    while True:  # served once Established
        status, listed = await conn.request("GET", f"/apis/{GROUP}/v1", b"")
        if status == 200 and all(plural.encode() in listed for plural, _ in KINDS.values()):
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the CRD was not served within 30 s")
        await asyncio.sleep(0.05)
    for ns in ("bench-write", "bench-list"):
        await request_ok(
            conn, "POST", "/api/v1/namespaces", json.dumps({"metadata": {"name": ns}}).encode(), (201, 409)
        )
    for kind, path in PATHS.items():
        for i in range(objects):
            await request_ok(
                conn, "POST", path.format(ns="bench-list"), body(kind, f"o-{i}", keys), (201, 409)
            )
    conn.close()


async def main(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="crd-bench-") as tmp:
        server = ApiServer(Path(tmp) / "api")
        try:
            server.start()
            await prepare(server, args.objects, args.keys)
            pids = {"apiserver": server.pid or 0}
            run_id = os.getpid()
            results: dict[str, list[dict]] = {
                f"{op}_{kind}": [] for op in ("create", "list") for kind in PATHS
            }
            share = args.seconds / args.rounds
            for _ in range(args.rounds):
                for kind, path in PATHS.items():

                    async def create(
                        conn: RawConnection, worker: int, i: int, path: str = path, kind: str = kind
                    ) -> bool:
                        name = f"w-{run_id}-{worker}-{i}-{time.monotonic_ns()}"
                        status, _ = await conn.request(
                            "POST", path.format(ns="bench-write"), body(kind, name, args.keys)
                        )
                        return status == 201

                    results[f"create_{kind}"].append(
                        await window([server], pids, args.writers, share, create)
                    )
                for kind, path in PATHS.items():

                    async def list_(conn: RawConnection, worker: int, i: int, path: str = path) -> bool:
                        status, payload = await conn.request("GET", path.format(ns="bench-list"), b"")
                        return status == 200 and len(payload) > args.objects * 64

                    results[f"list_{kind}"].append(await window([server], pids, args.listers, share, list_))
            report: dict = {
                "objects_listed": args.objects,
                "keys_per_object": args.keys,
                "bytes_configmap": len(body("configmap", "o-0", args.keys)),
                "bytes_custom": len(body("custom", "o-0", args.keys)),
                "writers": args.writers,
                "listers": args.listers,
                "seconds_per_case": args.seconds,
                "load_average_1m": os.getloadavg()[0],
                **{name: summary(windows) for name, windows in results.items()},
            }
            for op in ("create", "list"):
                cm = report[f"{op}_configmap"]["per_second"]
                cm_cpu = report[f"{op}_configmap"]["cpu_s_per_1000"].get("apiserver")
                for kind in KINDS:
                    cr = report[f"{op}_{kind}"]["per_second"]
                    report[f"{op}_{kind}_ratio"] = round(cr / cm, 3) if cm else None
                    # The server's CPU per request, ConfigMap / custom: what other tenants' load disturbs least.
                    cr_cpu = report[f"{op}_{kind}"]["cpu_s_per_1000"].get("apiserver")
                    report[f"{op}_{kind}_cpu_ratio"] = (
                        round(cm_cpu / cr_cpu, 3) if cm_cpu and cr_cpu else None
                    )
            return report
        finally:
            server.stop()


def markdown(report: dict) -> str:
    lines = [
        "# Custom resources against ConfigMaps of the same size",
        "",
        f"One API server (SQLite). Closed loop, {report['seconds_per_case']:g} s per case in alternating windows; "
        f"creates: {report['writers']} connections; lists: {report['listers']} connections listing "
        f"{report['objects_listed']} objects (watch cache). Bodies: ConfigMap {report['bytes_configmap']} bytes, "
        f"custom resource {report['bytes_custom']} bytes ({report['keys_per_object']} keys of 64 bytes). "
        f"Load average {report['load_average_1m']:.1f}.",
        "",
        "| what | kind | per second | p50 ms | p99 ms | errors | server CPU s per 1 000 | rate custom / ConfigMap | CPU ConfigMap / custom |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for op in ("create", "list"):
        for kind in PATHS:
            r = report[f"{op}_{kind}"]
            ratio = f"**{report[f'{op}_{kind}_ratio']}x**" if kind in KINDS else ""
            cpu_ratio = f"{report[f'{op}_{kind}_cpu_ratio']}x" if kind in KINDS else ""
            lines.append(
                f"| {op} | {kind} | {r['per_second']} | {r['p50_ms']} | {r['p99_ms']} | {r['errors']} | "
                f"{r['cpu_s_per_1000'].get('apiserver')} | {ratio} | {cpu_ratio} |"
            )
    return "\n".join(lines)


def svg_plot(report: dict) -> str:
    bars = [
        (f"{op} {kind}", report[f"{op}_{kind}"]["per_second"]) for op in ("create", "list") for kind in PATHS
    ]
    return bar_svg("Custom resources vs ConfigMaps", bars, "requests/s")


SMOKE = {"seconds": 1.0, "rounds": 1, "writers": 4, "listers": 2, "objects": 20}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10, help="per case, split over the rounds")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--listers", type=int, default=4)
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--keys", type=int, default=4)
    run_and_report(parser, "apiserver-crd", main, markdown, svg_plot, SMOKE)
