"""ADD and DEL latency of pykubelet-cni against the reference bridge + host-local plugins.

Both run in the same process, on the same machine, against the same kind of network (one bridge each,
same netconf shape, private ranges on bridges made here), interleaved call by call so that noise hits
both alike. Prints a table with ratios and writes cni-latency.{json,md,svg} (default bench/results/).
The bridges and ranges are leased (pykubelet.rig.netlease) and the namespaces carry the run's own
token, so a run beside a test session collides with nothing; afterwards the run checks that it left
none of its namespaces, bridges, veths or NAT entries.

    sudo python3 bench/cni/latency.py [--pods 40] [--rounds 3] [--parallel 10] [--masq] [--out DIR]
    sudo python3 bench/cni/latency.py --smoke --out DIR     # 3 pods, 1 round: seconds
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.cni import nat
from agent.cni.install import install_plugins
from agent.cni.service import BackgroundService
from bench.reporting import add_run_options, out_dir, write_report
from pykubelet.rig.leaks import Scope
from pykubelet.rig.netlease import lease_network

REFERENCE_DIR = Path("/usr/lib/cni")
NETNS_DIR = Path("/var/run/netns")


@dataclass
class Variant:
    """One plugin set-up under test."""

    label: str
    executable: Path
    conf: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    add_ms: list[float] = field(default_factory=list)
    del_ms: list[float] = field(default_factory=list)

    def call(self, command: str, cid: str, ns: str) -> float:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": cid,
            "CNI_NETNS": f"/var/run/netns/{ns}",
            "CNI_IFNAME": "eth0",
            "CNI_PATH": f"{self.executable.parent}:{REFERENCE_DIR}",
            **self.env,
        }
        data = json.dumps(self.conf).encode()
        t0 = time.perf_counter()
        proc = subprocess.run([str(self.executable)], input=data, env=env, capture_output=True, check=False)
        elapsed = (time.perf_counter() - t0) * 1000
        if proc.returncode != 0:
            raise RuntimeError(f"{self.label} {command} {cid}: {proc.stdout!r} {proc.stderr!r}")
        return elapsed


def netconf(
    name: str, bridge: str, subnet: str, data_dir: Path, reference: bool, masq: bool
) -> dict[str, Any]:
    ipam: dict[str, Any] = {"ranges": [[{"subnet": subnet}]]}
    conf: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": name,
        "type": "bridge" if reference else "pykubelet-cni",
        "bridge": bridge,
        "isGateway": True,
        "isDefaultGateway": True,
        "ipMasq": masq,
        "hairpinMode": True,
    }
    if reference:
        ipam.update(type="host-local", dataDir=str(data_dir))
    else:
        conf["dataDir"] = str(data_dir)
    conf["ipam"] = ipam
    return conf


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "p50": statistics.median(values),
        "p90": pct(values, 0.9),
        "max": max(values),
    }


def burst(v: Variant, names: list[str], parallel: int) -> dict[str, float]:
    """Wall time to ADD then DEL every pod, `parallel` calls at a time (as containerd does)."""
    with ThreadPoolExecutor(parallel) as pool:
        t0 = time.perf_counter()
        list(pool.map(lambda i: v.call("ADD", f"par-{i}", names[i]), range(len(names))))
        t1 = time.perf_counter()
        list(pool.map(lambda i: v.call("DEL", f"par-{i}", names[i]), range(len(names))))
        t2 = time.perf_counter()
    return {"add_s": t1 - t0, "del_s": t2 - t1}


def iptables_nat_exists() -> bool:
    return (
        subprocess.run(["nft", "list", "table", "ip", "nat"], capture_output=True, check=False).returncode
        == 0
    )


def drop_empty_iptables_nat() -> None:
    """The reference bridge plugin's ipMasq leaves iptables' (empty) nat table behind after DEL;
    remove it when it holds no rule at all, so the bench leaves the host as it found it."""
    out = subprocess.run(
        ["nft", "-j", "list", "table", "ip", "nat"], capture_output=True, text=True, check=False
    )
    if out.returncode == 0 and not any("rule" in o for o in json.loads(out.stdout)["nftables"]):
        subprocess.run(["nft", "delete", "table", "ip", "nat"], check=False)


def run(pods: int, rounds: int, parallel: int, masq: bool) -> dict[str, Any]:
    with ExitStack() as leases:
        leased = {
            k: leases.enter_context(lease_network("c")) for k in ("ours", "ours-standalone", "reference")
        }
        nets = {
            k: (name, leased[k].bridge, leased[k].pod_cidr)
            for k, name in (
                ("ours", "pkcbench"),
                ("ours-standalone", "pkcbench2"),
                ("reference", "pkcbenchref"),
            )
        }
        work = Path(tempfile.mkdtemp(prefix="pkcni-bench-"))
        scope = Scope.of(
            work, bridges=[n.bridge for n in leased.values()], pod_cidrs=[n.pod_cidr for n in leased.values()]
        )
        token = uuid.uuid4().hex[:6]
        # each plugin gets its own namespaces: both name the pod interface eth0
        spaces = {k: [f"pkcb-{token}-{k}-{i}" for i in range(pods)] for k in ("o", "r")}
        report = measure(work, spaces, nets, pods, rounds, parallel, masq)
        leaked = scope.leaked()
        left_netns = (
            sorted(set(os.listdir(NETNS_DIR)) & set(spaces["o"] + spaces["r"])) if NETNS_DIR.is_dir() else []
        )
        if leaked or left_netns:
            raise RuntimeError(f"the benchmark left {leaked} {left_netns}")
        return report


def measure(
    work: Path,
    spaces: dict[str, list[str]],
    nets: dict[str, tuple[str, str, str]],
    pods: int,
    rounds: int,
    parallel: int,
    masq: bool,
) -> dict[str, Any]:
    socket_path = str(work / "cni.sock")
    install_plugins(work / "bin", socket_path)
    our = Variant(
        "pykubelet-cni (shim + service)",
        work / "bin" / "pykubelet-cni",
        netconf(*nets["ours"], work / "ipam", False, masq),
        {"PYKUBELET_CNI_SOCKET": socket_path},
    )
    standalone = Variant(
        "pykubelet-cni (standalone python)",
        work / "bin" / "pykubelet-cni",
        netconf(*nets["ours-standalone"], work / "ipam2", False, masq),
        {"PYKUBELET_CNI_SOCKET": str(work / "nobody-listens.sock")},
    )
    ref = Variant(
        "reference bridge + host-local",
        REFERENCE_DIR / "bridge",
        netconf(*nets["reference"], work / "ipam-ref", True, masq),
    )
    had_nat = iptables_nat_exists()
    service = BackgroundService(socket_path).start()
    concurrent: dict[str, float] = {}
    try:
        for ns in spaces["o"] + spaces["r"]:
            subprocess.run(["ip", "netns", "add", ns], check=True)
        pairs = ((our, spaces["o"]), (ref, spaces["r"]))
        # warm-up: bridges created, caches filled, so the first call's set-up is not measured
        for v, names in pairs:
            v.call("ADD", "warmup", names[0])
            v.call("DEL", "warmup", names[0])
        for r in range(rounds):
            for i in range(pods):
                for v, names in pairs:
                    v.add_ms.append(v.call("ADD", f"{v.conf['name']}-{r}-{i}", names[i]))
            for i in range(pods):
                for v, names in pairs:
                    v.del_ms.append(v.call("DEL", f"{v.conf['name']}-{r}-{i}", names[i]))
        # the standalone path is slow, a few calls are enough to show it
        for i, ns in enumerate(spaces["o"][: min(5, pods)]):
            standalone.add_ms.append(standalone.call("ADD", f"sa-{i}", ns))
            standalone.del_ms.append(standalone.call("DEL", f"sa-{i}", ns))
        # throughput: all pods at once, `parallel` at a time
        for v, names in pairs:
            concurrent[v.label] = burst(v, names, parallel)
    finally:
        service.stop()
        for ns in spaces["o"] + spaces["r"]:
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
        for _name, bridge, subnet in nets.values():
            subprocess.run(["ip", "link", "del", bridge], check=False, capture_output=True)
            nat.remove_network(ipaddress.IPv4Network(subnet))
        if not had_nat:
            drop_empty_iptables_nat()
        shutil.rmtree(work, ignore_errors=True)
    return {
        "masq": masq,
        "pods": pods,
        "rounds": rounds,
        "parallel": parallel,
        "variants": {
            v.label: {"add": summary(v.add_ms), "del": summary(v.del_ms)} for v in (our, standalone, ref)
        },
        "concurrent": concurrent,
        "ratio_add_p50": summary(our.add_ms)["p50"] / summary(ref.add_ms)["p50"],
        "ratio_del_p50": summary(our.del_ms)["p50"] / summary(ref.del_ms)["p50"],
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        f"CNI ADD/DEL latency, ipMasq={report['masq']}, {report['pods']} pods x {report['rounds']} rounds "
        f"(sequential, interleaved), ms",
        "",
        f"| {'plugin':34} | {'ADD p50':>8} | {'ADD p90':>8} | {'ADD mean':>8} | {'DEL p50':>8} | {'DEL p90':>8} | {'n':>4} |",
        f"|{'-' * 36}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 6}|",
    ]
    for label, v in report["variants"].items():
        a, d = v["add"], v["del"]
        lines.append(
            f"| {label:34} | {a['p50']:8.1f} | {a['p90']:8.1f} | {a['mean']:8.1f} | {d['p50']:8.1f} | {d['p90']:8.1f} | {a['n']:4d} |"
        )
    lines += [
        "",
        f"ours / reference (p50): ADD {report['ratio_add_p50']:.2f}x, DEL {report['ratio_del_p50']:.2f}x (goal: ADD <= 2x)",
        "",
        f"{report['pods']} pods, {report['parallel']} at a time (wall seconds):",
    ]
    for label, c in report["concurrent"].items():
        lines.append(f"  {label:34} ADD {c['add_s']:.2f} s   DEL {c['del_s']:.2f} s")
    lines.append("")
    width = 50
    top = max(v["add"]["p50"] for v in report["variants"].values())
    lines.append("ADD p50 (bar ~ ms)")
    for label, v in report["variants"].items():
        n = max(1, round(v["add"]["p50"] / top * width))
        lines.append(f"  {label:34} {'#' * n} {v['add']['p50']:.1f}")
    return "\n".join(lines)


def svg_plot(reports: list[dict[str, Any]]) -> str:
    """Grouped bars (ADD/DEL p50 and p90 per plugin, per ipMasq setting), no plotting library needed."""
    colours = {"pykubelet-cni (shim + service)": "#2b7bb9", "reference bridge + host-local": "#d9822b"}
    groups = [
        (f"{op} {stat} masq={r['masq']}", {k: r["variants"][k][op.lower()][stat] for k in colours})
        for r in reports
        for op in ("ADD", "DEL")
        for stat in ("p50", "p90")
    ]
    top = max(v for _, vals in groups for v in vals.values()) or 1.0
    bar, gap, height = 18, 22, 220
    width = len(groups) * (len(colours) * bar + gap) + 60
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 90}" font-family="sans-serif" font-size="10">'
    ]
    x = 40
    for label, vals in groups:
        for i, (name, colour) in enumerate(colours.items()):
            h = vals[name] / top * height
            out.append(
                f'<rect x="{x + i * bar}" y="{height - h + 10:.1f}" width="{bar - 2}" height="{h:.1f}" fill="{colour}"/>'
            )
            out.append(f'<text x="{x + i * bar}" y="{height - h + 7:.1f}">{vals[name]:.0f}</text>')
        out.append(f'<text x="{x}" y="{height + 24}" transform="rotate(30 {x} {height + 24})">{label}</text>')
        x += len(colours) * bar + gap
    for i, (name, colour) in enumerate(colours.items()):
        out.append(f'<rect x="40" y="{height + 62 + i * 12}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="54" y="{height + 71 + i * 12}">{name} (ms)</text>')
    out.append("</svg>")
    return "\n".join(out)


SMOKE = {"pods": 3, "rounds": 1, "parallel": 2}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=10)
    parser.add_argument(
        "--masq", action="store_true", help="also measure with ipMasq (iptables for the reference)"
    )
    add_run_options(parser)
    ns = parser.parse_args()
    out = out_dir(parser, ns)
    if ns.smoke:
        vars(ns).update(SMOKE)
    if os.geteuid() != 0:
        print("needs root (network namespaces, bridges)", file=sys.stderr)
        return 2
    reports = [run(ns.pods, ns.rounds, ns.parallel, masq=False)]
    if ns.masq:
        reports.append(run(ns.pods, ns.rounds, ns.parallel, masq=True))
    text = "\n\n".join(render(r) for r in reports)
    print(text)
    write_report(out, "cni-latency", reports, "```\n" + text + "\n```", svg_plot(reports))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
