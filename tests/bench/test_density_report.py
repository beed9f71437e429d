"""The density benchmark keeps each cluster size's figures as soon as that size finishes: a run stopped
or broken at a larger N (the 500-node size runs for the best part of an hour) still leaves the report of
the sizes before it. The sizes themselves are replaced by a stand-in here (a real size starts an API
server and hundreds of simulated nodes: the smoke test in test_smoke.py runs one); what is tested is the
loop over sizes and the report it writes."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench.scale import apisli, density

ROOT = Path(__file__).resolve().parents[2]


def finished_size(nodes: int) -> dict[str, Any]:
    """A size's result with every field the report reads."""
    calls = {"n": 10, "p50": 0.01, "p90": 0.02, "p99": 0.05}
    return {
        "nodes": nodes,
        "pods": nodes * 30,
        "registration_s": 1.0,
        "saturation_s": 2.0,
        "scale_to_zero_s": 3.0,
        "create_deployment": calls,
        "calls": {"single": calls, "namespaced list": calls, "cluster list": calls},
        "pod_startup": calls,
        "scheduling_pods_per_s": 40.0,
        "watch_fanout": {"watchers": 5, "last_watcher": calls},
        "slo_held": {"single": True, "namespaced list": True, "cluster list": True, "pod startup": True},
        "processes": {"apiserver": {"cpu_s": 1.0, "peak_rss_mib": 100.0}},
    }


class Broken(Exception):
    pass


async def test_a_size_that_breaks_leaves_the_report_of_the_sizes_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[int] = []

    async def one_size(_root: Path, nodes: int, _args: argparse.Namespace) -> dict[str, Any]:
        ran.append(nodes)
        if nodes == 500:
            # By now the report of 100 nodes must be on disk.
            written = json.loads((tmp_path / "scale-density.json").read_text())
            assert [r["nodes"] for r in written["runs"]] == [100]
            raise Broken("stopped at 500 nodes")
        return finished_size(nodes)

    monkeypatch.setattr(density, "one_size", one_size)
    args = argparse.Namespace(
        nodes="100,500", store="etcd", apiservers=1, pods_per_node=30, rate=50.0, controller_manager_qps=None
    )
    with pytest.raises(Broken):
        await density.main(args, tmp_path)
    assert ran == [100, 500]
    written = json.loads((tmp_path / "scale-density.json").read_text())
    assert [r["nodes"] for r in written["runs"]] == [100]
    assert len(written["runs"][0]["load_before"]) == 3
    table = (tmp_path / "scale-density.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| 100 | 3000 |")]
    assert len(rows) == 1
    assert (tmp_path / "scale-density.svg").read_text().startswith("<svg")


async def test_every_size_finished_is_in_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def one_size(_root: Path, nodes: int, _args: argparse.Namespace) -> dict[str, Any]:
        return finished_size(nodes)

    monkeypatch.setattr(density, "one_size", one_size)
    args = argparse.Namespace(
        nodes="5,10", store="sqlite", apiservers=1, pods_per_node=30, rate=50.0, controller_manager_qps=None
    )
    result = await density.main(args, tmp_path)
    written = json.loads((tmp_path / "scale-density.json").read_text())
    assert [r["nodes"] for r in written["runs"]] == [5, 10] == [r["nodes"] for r in result["runs"]]
    assert "| 10 | 300 |" in (tmp_path / "scale-density.md").read_text()


async def test_several_api_servers_report_under_their_own_name_each_process_tree_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def one_size(_root: Path, nodes: int, _args: argparse.Namespace) -> dict[str, Any]:
        run = finished_size(nodes)
        tree = {"cpu_s": 1.0, "peak_rss_mib": 100.0}
        run["processes"] = {
            "apiserver-0": {
                **tree,
                "by_process": {"server": tree, "scheduler": tree},
                "leads": ["scheduler"],
            },
            "apiserver-1": {**tree, "by_process": {"server": tree}, "leads": ["controller-manager"]},
            "apiserver-2": {**tree, "by_process": {"server": tree}, "leads": []},
        }
        return run

    monkeypatch.setattr(density, "one_size", one_size)
    args = argparse.Namespace(
        nodes="5", store="etcd", apiservers=3, pods_per_node=30, rate=50.0, controller_manager_qps=None
    )
    await density.main(args, tmp_path)
    assert not (tmp_path / "scale-density.json").exists(), "a 3-server run overwrote the 1-server report"
    written = json.loads((tmp_path / "scale-density-3apiservers.json").read_text())
    assert written["apiservers"] == 3
    table = (tmp_path / "scale-density-3apiservers.md").read_text()
    assert "3 API servers on one etcd" in table.splitlines()[0]
    assert (
        "| 5 | apiserver-0 | 1.0 / 100.0 | server 1.0 / 100.0, scheduler 1.0 / 100.0 | scheduler |" in table
    )
    assert "| 5 | apiserver-2 | 1.0 / 100.0 | server 1.0 / 100.0 | - |" in table


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--apiservers", "0"], "--apiservers must be at least 1, not 0"),
        (["--apiservers", "3", "--store", "sqlite"], "--apiservers 3 needs --store etcd"),
    ],
)
def test_a_server_count_that_cannot_run_is_refused_before_anything_starts(
    tmp_path: Path, given: list[str], said: str
) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench/scale/density.py"),
            *given,
            "--smoke",
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "something started (or wrote) before the refusal"
    assert time.monotonic() - started < 30


class Answers:
    """A stand-in client that answers every call at once, counting them (the prober's spreading is
    what is tested; the real servers are the smoke run's)."""

    def __init__(self) -> None:
        self.calls = 0

    async def get(self, path: str) -> dict[str, Any]:
        self.calls += 1
        return {}

    async def patch(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.calls += 1
        return {}


async def test_the_probe_rounds_go_round_robin_over_the_servers() -> None:
    clients = {f"apiserver-{i}": Answers() for i in range(3)}
    prober = density.Prober(clients, "sim-0")  # type: ignore[arg-type]
    task = asyncio.create_task(prober.run(rate=1000.0))
    try:
        for _ in range(2000):  # 9 rounds of 4 calls, bounded
            if sum(c.calls for c in clients.values()) >= 36:
                break
            await asyncio.sleep(0.005)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    counts = [c.calls for c in clients.values()]
    assert sum(counts) >= 36 and max(counts) - min(counts) <= 4, counts  # even, to one round of 4
    calls, per_server = prober.result()
    assert calls["single"]["n"] == sum(per_server[s]["single"]["n"] for s in clients)
    for name, client in clients.items():
        assert per_server[name]["single"]["n"] == client.calls // 2
        assert per_server[name]["cluster list"]["n"] == client.calls // 4


def sli_of(p99_bucket: str) -> dict[str, Any]:
    """An api_sli section from two hand-written scrapes: 100 lease PUTs in the given bucket."""
    from bench.scale import apisli

    def scrape(count: int) -> str:
        labels = 'verb="PUT",group="coordination.k8s.io",version="v1",resource="leases",subresource="",scope="resource",component="apiserver"'
        lines = ["# TYPE apiserver_request_sli_duration_seconds histogram"]
        for le in ("0.05", "1.0", "1.25", "+Inf"):
            n = count if float(le) >= float(p99_bucket) else 0
            lines.append(f'apiserver_request_sli_duration_seconds_bucket{{{labels},le="{le}"}} {n}')
        return "\n".join(lines) + "\n"

    return apisli.report([(0.0, [scrape(0)]), (120.0, [scrape(100)])])


async def test_the_sli_table_stands_beside_the_client_timed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def one_size(_root: Path, nodes: int, _args: argparse.Namespace) -> dict[str, Any]:
        run = finished_size(nodes)
        run["api_sli"] = sli_of("1.25")  # p99 in (1, 1.25]: the single-object class breaks
        run["bench_loop_lag"] = {"n": 10, "p50": 0.001, "p99": 0.2}
        run["pod_startup_cl2"] = {"n": 3, "p50": 1.2, "p90": 1.5, "p99": 1.9}
        return run

    monkeypatch.setattr(density, "one_size", one_size)
    args = argparse.Namespace(
        nodes="100", store="etcd", apiservers=1, pods_per_node=30, rate=50.0, controller_manager_qps=None
    )
    await density.main(args, tmp_path)
    table = (tmp_path / "scale-density.md").read_text()
    # the client-timed row is as it was: its SLO verdicts untouched
    (row,) = [line for line in table.splitlines() if line.startswith("| 100 | 3000 |")]
    assert "single, namespaced list, cluster list, pod startup" in row
    assert "API call latency by two definitions" in table
    (sli_row,) = [
        line for line in table.splitlines() if line.startswith("| 100 | single object (resource) |")
    ]
    assert "PUT leases" in sli_row and "| BROKEN / BROKEN / BROKEN |" in sli_row
    assert "bench event-loop lag (100 ms ticker) p50 / p99 0.001 / 0.2 s" in table
    written = json.loads((tmp_path / "scale-density.json").read_text())
    assert set(written["definitions"]) == {"calls", "api_sli", "pod_startup", "pod_startup_cl2"}
    classes = written["runs"][0]["api_sli"]["windowed"]["classes"]
    assert classes["single object"]["broken"][0]["resource"] == "leases"


@pytest.mark.integration
def test_a_smoke_run_reports_upstreams_sli_beside_the_probes(tmp_path: Path) -> None:
    """The real thing at the smoke size: every API call of the run, timed inside the server, grouped as
    ClusterLoader2 groups them; each p99 is what Prometheus's interpolation gives for its buckets."""
    from bench.scale import apisli

    done = subprocess.run(
        [sys.executable, str(ROOT / "bench/scale/density.py"), "--smoke", "--out", str(tmp_path / "out")],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = json.loads((tmp_path / "out/scale-density.json").read_text())["runs"]
    sli = run["api_sli"]
    assert sli["scrapes"] >= 2 and sli["windowed"]["windows"] >= 1
    groups = sli["whole_run"]["groups"]
    assert {"leases", "pods", "nodes"} <= {g["resource"] for g in groups if g["count"] > 0}
    assert not [g for g in groups if g["verb"] == "WATCH" or g["subresource"] in ("exec", "log")]
    for g in groups:
        buckets = {float(le): n for le, n in g["buckets"].items()}
        assert g["count"] == buckets[float("inf")] > 0
        assert g["p99"] == pytest.approx(apisli.histogram_quantile(0.99, buckets), abs=1e-4)
        assert 0 < g["p50"] <= g["p90"] <= g["p99"] <= 60
    created = [g for g in groups if (g["resource"], g["verb"]) == ("pods", "POST")]
    assert created and created[0]["scope"] == "resource" and created[0]["count"] >= run["pods"]
    single = sli["whole_run"]["classes"]["single object"]
    assert single["groups"] > 0 and single["worst"]["p99"] == max(
        g["p99"] for g in groups if g["scope"] == "resource"
    )
    assert run["bench_loop_lag"]["n"] > 0
    assert run["pod_startup_cl2"]["n"] == run["pods"]
    assert "API call latency by two definitions" in (tmp_path / "out/scale-density.md").read_text()


def test_a_child_that_ends_during_the_run_keeps_its_cpu_in_the_tree_and_its_role(tmp_path: Path) -> None:
    """A scheduler or controller manager that loses its leader Lease exits and is started again: its
    first life's CPU stays in the tree's figure (its parent's reaped-children times) and in its role's
    (the last sample taken of it). Before, both dropped it."""
    burn = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass"
    started, ended = tmp_path / "started", tmp_path / "ended"
    parent_code = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', {burn!r}, 'pykubelet', 'burner'])\n"
        f"open({str(started)!r}, 'w').close()\n"
        "child.wait()\n"
        f"open({str(ended)!r}, 'w').close()\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code, "pykubelet", "parent"])
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.01)
        use = density.ProcessUse(parent.pid)
        while not ended.exists():
            assert time.monotonic() < deadline and parent.poll() is None
            use.sample()
            time.sleep(0.01)
        assert "burner" not in {density.role(p) for p in use._tree()}  # it has ended
        result = use.result()
        assert result["by_process"]["burner"]["cpu_s"] >= 0.2, result
        assert result["cpu_s"] >= 0.3, result
    finally:
        parent.kill()
        parent.wait()


def test_a_group_broken_in_a_window_is_named_with_the_minute_and_the_phase_it_broke_in() -> None:
    from tests.bench.test_apisli import rows, text

    def scrape(fast: int, slow: int) -> str:
        return text(
            rows(
                "POST",
                "events",
                "resource",
                {"0.05": fast, "1.0": fast, "1.25": fast + slow, "+Inf": fast + slow},
            )
        )

    # a run of 7 minutes: the last 2 are judged, the slow calls (10 of the 100) in the minute ending at 420 s
    counts = [(0.0, 0, 0), (360.0, 2000, 0), (420.0, 2090, 10), (425.0, 2095, 10)]
    scrapes = [(t, [scrape(fast, slow)]) for t, fast, slow in counts]
    run = {
        **finished_size(1000),
        "api_sli": apisli.report(scrapes),
        "bench_loop_lag": {},
        "pod_startup_cl2": {},
    }
    run["phases_end_s"] = {
        "creating": 300.0,
        "starting the last pods": 330.0,
        "all running (watch fan-out)": 400.0,
        "scaling to 0": 600.0,
    }
    table = "\n".join(density.sli_table([run]))
    p99 = round(apisli.histogram_quantile(0.99, {0.05: 90.0, 1.0: 90.0, 1.25: 100.0, math.inf: 100.0}), 4)
    assert (
        f"| BROKEN / held / BROKEN | POST events (worst minute ending 420.0 s in, scaling to 0: 100 calls, "
        f"p99 {p99} s) |" in table
    )
    assert density.phase_at(run["phases_end_s"], 300.0) == "creating"
    assert density.phase_at(run["phases_end_s"], 301.0) == "starting the last pods"
    assert density.phase_at(run["phases_end_s"], 700.0) is None
