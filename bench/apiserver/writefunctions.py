"""The write path's pure steps, timed in process (issue 36): CPU per call of a kubelet's pod status patch
(strategic merge, then managedFields) and of a Lease renewal's managedFields and body decoding, this
tree's functions against a baseline tree's. Figures are reported, never asserted.

  python bench/apiserver/writefunctions.py --baseline DIR [--calls 2000 --rounds 5]
  python bench/apiserver/writefunctions.py --smoke --out DIR        # 20 calls, 1 round, no baseline

`writepath.py` measures whole requests through a server, where a step's saving is a few per cent of a
request and the machine's other load moves the figure by as much; this measures the steps themselves
(process CPU time, the best of --rounds), which other load disturbs far less. The objects are a real
server's answers: a pod created by one manager and patched once by the kubelet (nodesim's running
status, so managedFields hold both), and a Lease in the kubelet's shape. The baseline's modules
(`ssa.py`, `patch.py`, `decoding.py`) are loaded from DIR's files beside this tree's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.apiserver.run import ssl_context
from bench.apiserver.writepath import LEASES, PODS, STRATEGIC, pod_body
from bench.reporting import bar_svg, run_and_report
from controlplane.apiserver import decoding, patch, ssa
from controlplane.apiserver.kinds.lease import KIND as LEASE
from controlplane.apiserver.kinds.pod import KIND as POD
from nodesim.nodeobjects import lease_object
from nodesim.podstatus import running
from nodesim.stages import PodRecord
from pykubelet.rig.apiserver import ApiServer

MODULES = {"ssa": "controlplane/apiserver/ssa.py", "patch": "controlplane/apiserver/patch.py"}
MODULES["decoding"] = "controlplane/apiserver/decoding.py"


def tree_modules(root: Path) -> dict[str, ModuleType]:
    out = {}
    for name, rel in MODULES.items():
        spec = importlib.util.spec_from_file_location(f"baseline_{name}", root / rel)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out[name] = module
    return out


def status_patch(pod: dict[str, Any], ready: bool) -> dict[str, Any]:
    record = PodRecord(node=pod["spec"]["nodeName"], seen_at=0.0)
    record.ip, record.start_stamp = "10.244.0.5", "2026-12-06T10:00:05Z"
    status = running(pod, record, "10.0.0.1", "2026-12-06T10:00:05Z")
    if not ready:
        for condition in status["conditions"]:
            if condition["type"] in ("Ready", "ContainersReady"):
                condition.update(status="False", reason="ContainersNotReady")
    return {"metadata": {"uid": pod["metadata"]["uid"]}, "status": status}


def fetch(
    server: ApiServer, path: str, method: str, body: bytes, content_type: str = "application/json"
) -> tuple[int, bytes, None]:
    request = urllib.request.Request(server.url + path, body, {"Content-Type": content_type}, method=method)
    with urllib.request.urlopen(request, context=ssl_context(server), timeout=30) as resp:
        return resp.status, resp.read(), None


def objects() -> tuple[bytes, bytes]:
    """A pod after its creator and one kubelet status patch, and a created Lease: the server's bytes."""
    with tempfile.TemporaryDirectory(prefix="writefunctions-") as tmp, ApiServer(Path(tmp)) as server:
        body = json.dumps(pod_body(0)).encode()
        status, answer, _ = fetch(server, f"{PODS}?fieldManager=kube-controller-manager", "POST", body)
        assert status == 201, answer
        first = json.dumps(status_patch(json.loads(answer), True)).encode()
        status, pod, _ = fetch(server, f"{PODS}/pod-0/status?fieldManager=kubelet", "PATCH", first, STRATEGIC)
        assert status == 200, pod
        body = json.dumps(lease_object("node-0", "u0", 40)).encode()
        status, lease, _ = fetch(server, f"{LEASES}?fieldManager=kubelet", "POST", body)
        assert status == 201, lease
        return pod, lease


def steps(mods: dict[str, Any], pod_raw: bytes, lease_raw: bytes) -> dict[str, Callable[[], Any]]:
    """Each step as the registry runs it, with its own decoding of the stored bytes (as the server's)."""
    smp, apply_pod, apply_lease = POD.smp, POD.apply_schema, LEASE.apply_schema
    patch_body = status_patch(json.loads(pod_raw), False)
    renewed = json.loads(lease_raw)
    renewed["spec"]["renewTime"] = "2026-12-06T10:00:15.000000Z"
    put_body = json.dumps(renewed).encode()

    def merge() -> Any:
        return mods["patch"].strategic_merge(json.loads(pod_raw), patch_body, smp)

    def status_fields() -> None:
        current, merged = json.loads(pod_raw), merge()
        new = {**merged, "spec": current["spec"], "metadata": dict(merged["metadata"])}
        new["metadata"]["managedFields"] = current["metadata"].get("managedFields", [])
        mods["ssa"].track_update(current, new, "kubelet", "status", apply_pod)

    def lease_fields() -> None:
        current, new = json.loads(lease_raw), json.loads(put_body)
        new["metadata"]["managedFields"] = current["metadata"].get("managedFields", [])
        mods["ssa"].track_update(current, new, "kubelet", "", apply_lease)

    def lease_body() -> Any:
        if hasattr(mods["decoding"], "decode_json"):
            return mods["decoding"].decode_json(put_body)
        return mods["decoding"].decode(put_body, "application/json"), mods["decoding"].duplicate_fields(
            put_body
        )

    return {
        "pod status: strategic merge": merge,
        "pod status: strategic merge + managedFields": status_fields,
        "lease PUT: managedFields": lease_fields,
        "lease PUT: body decoding": lease_body,
        "two json.loads of the pod (reference)": lambda: (json.loads(pod_raw), json.loads(pod_raw)),
    }


def per_call_us(fn: Callable[[], Any], calls: int, rounds: int) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, time.process_time() - start)
    return round(best / calls * 1e6, 1)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    pod_raw, lease_raw = objects()
    trees = {"this": {"ssa": ssa, "patch": patch, "decoding": decoding}}
    if args.baseline:
        trees = {"baseline": tree_modules(Path(args.baseline)), **trees}
    results: dict[str, dict[str, float]] = {}
    for name, mods in trees.items():
        for step, fn in steps(mods, pod_raw, lease_raw).items():
            results.setdefault(step, {})[name] = per_call_us(fn, args.calls, args.rounds)
    return {
        "trees": {"this": str(Path(__file__).resolve().parents[2]), "baseline": args.baseline or None},
        "calls": args.calls,
        "rounds": args.rounds,
        "us_per_call": results,
        "load_average_1m": os.getloadavg()[0],
    }


def markdown(report: dict[str, Any]) -> str:
    names = [n for n in ("baseline", "this") if report["trees"].get(n)]
    lines = [
        "# The write path's steps, CPU per call",
        "",
        f"Best of {report['rounds']} rounds of {report['calls']} calls, process CPU time. Load average "
        f"{report['load_average_1m']:.1f}. Trees: " + ", ".join(f"{n} = {report['trees'][n]}" for n in names),
        "",
        "| step | " + " | ".join(f"{n} us" for n in names) + " | saved us |",
        "| --- |" + " --- |" * (len(names) + 1),
    ]
    for step, by_tree in report["us_per_call"].items():
        saved = by_tree["baseline"] - by_tree["this"] if "baseline" in by_tree else float("nan")
        lines.append(f"| {step} | " + " | ".join(str(by_tree[n]) for n in names) + f" | {saved:.1f} |")
    return "\n".join(lines)


def svg_plot(report: dict[str, Any]) -> str:
    bars = [
        (f"{step} ({n})", us) for step, by_tree in report["us_per_call"].items() for n, us in by_tree.items()
    ]
    return bar_svg("Write path steps: CPU per call", bars, "us")


SMOKE = {"calls": 20, "rounds": 1, "baseline": ""}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", default="", help="a source tree whose steps to time beside this one's")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    run_and_report(parser, "apiserver-writefunctions", main, markdown, svg_plot, SMOKE)
