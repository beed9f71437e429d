"""Every benchmark still runs: its smoke size, as a subprocess, writes its full report.

Only that is asserted (exit 0; the JSON, markdown and SVG files exist, are not empty, and the JSON
parses): figures are never part of pass/fail. A benchmark that needs containerd or network namespaces
runs under the integration tests' rules: as root, with its temporary state (the stack it starts)
inside this test's folder, so the session's leak check covers it, and nothing of it may remain when
it has exited.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from pykubelet.rig.leaks import Scope

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Benchmark:
    script: str
    report: str  # the report's file name, without .json/.md/.svg
    needs_root: bool


BENCHMARKS = {
    "apiserver": Benchmark("bench/apiserver/run.py", "apiserver", needs_root=False),
    "apiserver-authz": Benchmark("bench/apiserver/authz.py", "apiserver-authz", needs_root=False),
    "apiserver-stores": Benchmark("bench/apiserver/stores.py", "apiserver-stores", needs_root=False),
    "apiserver-replicas": Benchmark("bench/apiserver/replicas.py", "apiserver-replicas", needs_root=False),
    "apiserver-apf": Benchmark("bench/apiserver/apf.py", "apiserver-apf", needs_root=False),
    "apiserver-consistent": Benchmark(
        "bench/apiserver/consistent.py", "apiserver-consistent", needs_root=False
    ),
    "apiserver-webhooks": Benchmark("bench/apiserver/webhooks.py", "apiserver-webhooks", needs_root=False),
    "apiserver-security": Benchmark("bench/apiserver/security.py", "apiserver-security", needs_root=False),
    "apiserver-crd": Benchmark("bench/apiserver/crd.py", "apiserver-crd", needs_root=False),
    "apiserver-protobuf": Benchmark("bench/apiserver/protobuf.py", "apiserver-protobuf", needs_root=False),
    "scheduler": Benchmark("bench/scheduler/throughput.py", "scheduler-throughput", needs_root=False),
    "scheduler-perf-workloads": Benchmark(
        "bench/scheduler/perf_workloads.py", "scheduler-perf-workloads", needs_root=False
    ),
    "cni": Benchmark("bench/cni/latency.py", "cni-latency", needs_root=True),
    "agent-startup": Benchmark("bench/agent/startup.py", "agent-startup", needs_root=True),
    "agent-stats": Benchmark("bench/agent/stats.py", "agent-stats", needs_root=True),
    "probes-load": Benchmark("bench/probes/load.py", "probes-load", needs_root=True),
    "controllers-replicasets": Benchmark(
        "bench/controllers/replicasets.py", "controllers-replicasets", needs_root=False
    ),
    "proxy-sync": Benchmark("bench/proxy/sync.py", "proxy-sync", needs_root=True),
    "proxy-connections": Benchmark("bench/proxy/connections.py", "proxy-connections", needs_root=True),
    "dns-latency": Benchmark("bench/dns/latency.py", "dns-latency", needs_root=False),
    "dns-distinct": Benchmark("bench/dns/distinct.py", "dns-distinct", needs_root=False),
    "controllers-deployment": Benchmark(
        "bench/controllers/deployment.py", "controllers-deployment", needs_root=True
    ),
    "controllers-jobs": Benchmark("bench/controllers/jobs.py", "controllers-jobs", needs_root=True),
    "controllers-statefulset": Benchmark(
        "bench/controllers/statefulset.py", "controllers-statefulset", needs_root=True
    ),
    "controllers-daemonset": Benchmark(
        "bench/controllers/daemonset.py", "controllers-daemonset", needs_root=True
    ),
    "streaming-roundtrip": Benchmark("bench/streaming/roundtrip.py", "streaming-roundtrip", needs_root=True),
    "journey": Benchmark("bench/journey/timing.py", "journey", needs_root=False),
    "scale-density": Benchmark("bench/scale/density.py", "scale-density", needs_root=False),
    "csi-startup": Benchmark("bench/csi/startup.py", "csi-startup", needs_root=True),
}


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_smoke_run_writes_the_report(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    bench = BENCHMARKS[name]
    if bench.needs_root and os.geteuid() != 0:
        pytest.skip("needs root: containerd, network namespaces")
    # A short folder: the stack's unix sockets live under it (108 bytes at most).
    work = tmp_path_factory.mktemp("b")
    out = work / "report"
    env = dict(
        os.environ,
        TMPDIR=str(work),
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    result = subprocess.run(
        [sys.executable, str(ROOT / bench.script), "--smoke", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, (
        f"{bench.script} --smoke failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    for suffix in ("json", "md", "svg"):
        path = out / f"{bench.report}.{suffix}"
        assert path.is_file() and path.stat().st_size > 0, f"{path} missing or empty"
    json.loads((out / f"{bench.report}.json").read_text(), parse_constant=_not_json)
    assert (out / f"{bench.report}.svg").read_text().lstrip().startswith("<svg")
    leaked = Scope.of(work).leaked()
    assert not leaked, f"{bench.script} --smoke left {leaked}"
