"""What one etcd write costs the API server's process in its etcd client alone (issue 36): CPU per
`EtcdStore.update` (one Txn over grpc.aio, TLS with client certificates) in this process, at a paced
rate as the server sees Lease renewals and status patches, and closed loop. Figures are reported, never
asserted.

  python bench/apiserver/etcdclient.py [--rates 50,200,0 --updates 1000 --keys 16 --rounds 3]
  python bench/apiserver/etcdclient.py --smoke --out DIR        # 40 updates, one round

Rate 0 is closed loop (--keys writers back to back). The CPU is the whole process's (every thread:
grpc's own EventEngine threads count), from getrusage, per update, the best of --rounds; the Python
around the call (building the request, our `_call`) is in it, which is small beside grpc's. At a
paced rate each call pays grpc.aio's hand-offs between its threads and the event loop on its own;
closed loop shares them between calls in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reporting import bar_svg, run_and_report
from controlplane.storage.etcd import EtcdConfig, EtcdStore
from pykubelet.rig.etcd import Etcd

VALUE = b'{"spec":{"holderIdentity":"node-0","renewTime":"' + b"0" * 400 + b'"}}'


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def window(store: EtcdStore, revisions: dict[str, int], updates: int, rate: float) -> dict[str, float]:
    """`updates` updates spread over the keys, each key written by its own writer; paced at `rate`
    per second overall (0: each writer back to back)."""
    keys = sorted(revisions)
    each = max(updates // len(keys), 1)
    start = time.perf_counter()

    async def writer(k: int) -> None:
        key = keys[k]
        for j in range(each):
            if rate:
                delay = start + (j * len(keys) + k) / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            revisions[key] = await store.update(key, VALUE, revisions[key])

    cpu0 = cpu_seconds()
    await asyncio.gather(*(writer(k) for k in range(len(keys))))
    elapsed = time.perf_counter() - start
    done = each * len(keys)
    return {"us_per_update": (cpu_seconds() - cpu0) / done * 1e6, "per_second": done / elapsed}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    rates = [float(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory(prefix="etcdclient-bench-") as tmp:
        etcd = Etcd(Path(tmp) / "etcd")
        etcd.start()
        store = EtcdStore(
            EtcdConfig((etcd.url,), etcd.pki.ca_cert, etcd.pki.client_cert, etcd.pki.client_key)
        )
        try:
            await store.start()
            revisions = {f"/leases/kube-node-lease/node-{k}": 0 for k in range(args.keys)}
            for key in revisions:
                revisions[key] = await store.create(key, VALUE)
            await window(store, revisions, args.keys * 10, 0)  # warm up: not counted
            best: dict[float, dict[str, float]] = {}
            for _ in range(args.rounds):
                for rate in rates:
                    result = await window(store, revisions, args.updates, rate)
                    if rate not in best or result["us_per_update"] < best[rate]["us_per_update"]:
                        best[rate] = result
        finally:
            await store.close()
            etcd.stop()
    return {
        "keys": args.keys,
        "updates": args.updates,
        "rounds": args.rounds,
        "load_average_1m": os.getloadavg()[0],
        "by_rate": [
            {
                "rate": rate,
                "us_per_update": round(r["us_per_update"], 1),
                "per_second": round(r["per_second"], 1),
            }
            for rate, r in best.items()
        ],
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# etcd client CPU per update (EtcdStore.update: one Txn over grpc.aio, TLS)",
        "",
        f"{report['updates']} updates over {report['keys']} keys per window, best of {report['rounds']} rounds; "
        f"load average {report['load_average_1m']:.1f}.",
        "",
        "| rate (0: closed loop) | achieved/s | process CPU us per update |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {r['rate']:g} | {r['per_second']} | {r['us_per_update']} |" for r in report["by_rate"]]
    return "\n".join(lines)


def svg_plot(report: dict[str, Any]) -> str:
    bars = [(f"rate {r['rate']:g}/s", r["us_per_update"]) for r in report["by_rate"]]
    return bar_svg("etcd client CPU per update", bars, "us")


SMOKE = {"rates": "20,0", "updates": 40, "keys": 4, "rounds": 1}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rates", default="50,200,0", help="updates per second of each window, 0: closed loop"
    )
    parser.add_argument("--updates", type=int, default=1000)
    parser.add_argument("--keys", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    run_and_report(parser, "apiserver-etcdclient", main, markdown, svg_plot, SMOKE)
