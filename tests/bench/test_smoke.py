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
    args: tuple[str, ...] = ()  # beyond --smoke --out DIR: another definition of the same script


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
    "apiserver-watchfanout": Benchmark(
        "bench/apiserver/watchfanout.py", "apiserver-watchfanout", needs_root=False
    ),
    "apiserver-selectorcost": Benchmark(
        "bench/apiserver/selectorcost.py", "apiserver-selectorcost", needs_root=False
    ),
    "apiserver-protobuf": Benchmark("bench/apiserver/protobuf.py", "apiserver-protobuf", needs_root=False),
    "apiserver-servicecreate": Benchmark(
        "bench/apiserver/servicecreate.py", "apiserver-servicecreate", needs_root=False
    ),
    "apiserver-writepath": Benchmark("bench/apiserver/writepath.py", "apiserver-writepath", needs_root=False),
    "apiserver-writefunctions": Benchmark(
        "bench/apiserver/writefunctions.py", "apiserver-writefunctions", needs_root=False
    ),
    "apiserver-etcdclient": Benchmark(
        "bench/apiserver/etcdclient.py", "apiserver-etcdclient", needs_root=False
    ),
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
    "netpolicy-sync": Benchmark("bench/netpolicy/sync.py", "netpolicy-sync", needs_root=True),
    "netpolicy-churn": Benchmark("bench/netpolicy/churn.py", "netpolicy-churn", needs_root=True),
    "netpolicy-connections": Benchmark(
        "bench/netpolicy/connections.py", "netpolicy-connections", needs_root=True
    ),
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
    "journey-pods": Benchmark("bench/journey/realpods.py", "journey-pods", needs_root=True),
    "scale-density": Benchmark("bench/scale/density.py", "scale-density", needs_root=False),
    "scale-density-2apiservers": Benchmark(
        "bench/scale/density.py", "scale-density-2apiservers", needs_root=False, args=("--apiservers", "2")
    ),
    "snapshot-saverestore": Benchmark(
        "bench/snapshot/saverestore.py", "snapshot-saverestore", needs_root=False
    ),
    "reliability-outage": Benchmark("bench/reliability/outage.py", "reliability-outage", needs_root=True),
    "ingress-hop": Benchmark("bench/ingress/hop.py", "ingress-hop", needs_root=False),
    "ingress-routes": Benchmark("bench/ingress/routes.py", "ingress-routes", needs_root=False),
    "csi-startup": Benchmark("bench/csi/startup.py", "csi-startup", needs_root=True),
}


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


# Smoke runs side by side: most of each is starting and stopping its own stack (waiting, not computing),
# so a few at a time shorten the module's wall time several-fold without a run slowing another's past
# its timeout.
SIDE_BY_SIDE = 3
TIMEOUT = 300.0


@dataclass
class SmokeRun:
    """One benchmark's smoke run, started ahead of its test; its output goes to files (not pipes, which
    would fill while nobody reads them)."""

    bench: Benchmark
    work: Path
    process: subprocess.Popen[bytes]

    @property
    def out(self) -> Path:
        return self.work / "report"

    def finish(self) -> tuple[int, str]:
        try:
            code = self.process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            code = -9
        output = (self.work / "output.txt").read_text(errors="replace")
        return code, output[-6000:]


class SmokeRuns:
    """The module's selected benchmarks in test order; asking for one starts it and the next few."""

    def __init__(self, order: list[str], tmp: pytest.TempPathFactory) -> None:
        self.order = order
        self.tmp = tmp
        self.runs: dict[str, SmokeRun] = {}

    def _start(self, name: str) -> None:
        bench = BENCHMARKS[name]
        if name in self.runs or (bench.needs_root and os.geteuid() != 0):
            return
        # A short folder: the stack's unix sockets live under it (108 bytes at most).
        work = self.tmp.mktemp("b")
        env = dict(
            os.environ,
            TMPDIR=str(work),
            PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        )
        with open(work / "output.txt", "wb") as output:
            process = subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / bench.script),
                    *bench.args,
                    "--smoke",
                    "--out",
                    str(work / "report"),
                ],
                cwd=ROOT,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        self.runs[name] = SmokeRun(bench, work, process)

    def get(self, name: str) -> SmokeRun:
        at = self.order.index(name)
        for ahead in self.order[at : at + SIDE_BY_SIDE]:
            self._start(ahead)
        return self.runs[name]

    def stop(self) -> None:
        for run in self.runs.values():
            if run.process.poll() is None:
                run.process.kill()
                run.process.wait()


@pytest.fixture(scope="module")
def smoke_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    order = [
        item.callspec.params["name"]
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec") and "name" in item.callspec.params
    ]
    runs = SmokeRuns(order, tmp_path_factory)
    yield runs
    runs.stop()


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_smoke_run_writes_the_report(name: str, smoke_runs: SmokeRuns) -> None:
    bench = BENCHMARKS[name]
    if bench.needs_root and os.geteuid() != 0:
        pytest.skip("needs root: containerd, network namespaces")
    run = smoke_runs.get(name)
    code, output = run.finish()
    assert code == 0, f"{bench.script} --smoke failed ({code}):\n{output}"
    out = run.out
    for suffix in ("json", "md", "svg"):
        path = out / f"{bench.report}.{suffix}"
        assert path.is_file() and path.stat().st_size > 0, f"{path} missing or empty"
    json.loads((out / f"{bench.report}.json").read_text(), parse_constant=_not_json)
    assert (out / f"{bench.report}.svg").read_text().lstrip().startswith("<svg")
    leaked = Scope.of(run.work).leaked()
    assert not leaked, f"{bench.script} --smoke left {leaked}"
