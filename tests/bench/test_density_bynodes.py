"""Density's sizes run one at a time are joined into one report against cluster size (bench/scale/bynodes.py):
the sizes in order with the file and commit each came from, the largest N holding every SLO and the first
to break beyond it by each definition, and a refusal to join runs of different benchmarks or one size
twice. The runs are stand-ins with every field the report reads (test_density_report.py's)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.scale import bynodes, density
from tests.bench.test_density_report import finished_size

ROOT = Path(__file__).resolve().parents[2]


def result(
    sizes: list[int], *, store: str = "etcd", commit: str = "a" * 40, broken: dict[int, str] | None = None
) -> dict[str, Any]:
    runs = []
    for nodes in sizes:
        run = finished_size(nodes)
        run["load_before"] = run["load_after"] = [0.5, 0.5, 0.5]
        if broken and nodes in broken:
            run["slo_held"][broken[nodes]] = False
        runs.append(run)
    return {
        "store": store,
        "apiservers": 1,
        "pods_per_node": 30,
        "rate_pods_per_s": 50.0,
        "controller_manager_qps": 100.0,
        "commit": commit,
        "load_average": [0.5, 0.5, 0.5],
        "cpus": 2,
        "slo_seconds": density.SLO,
        "definitions": density.DEFINITIONS,
        "runs": runs,
    }


def sli(single_held: bool, whole_held: bool = True) -> dict[str, Any]:
    def classes(single: bool) -> dict[str, Any]:
        return {
            "single object": {"held": single, "groups": 3},
            "namespace": {"held": True, "groups": 1},
            "non-resource": {"held": True, "groups": 0},  # no call of the class: not judged
        }

    return {"windowed": {"classes": classes(single_held)}, "whole_run": {"classes": classes(whole_held)}}


def test_sizes_from_several_files_join_in_order_each_with_its_source_and_commit() -> None:
    joined = bynodes.join(
        [
            ("big.json", result([2000], commit="b" * 40, broken={2000: "single"})),
            ("small.json", result([100, 500])),
            ("mid.json", result([1000], commit="c" * 40)),
        ]
    )
    assert [(r["nodes"], r["source"], r["commit"][0]) for r in joined["runs"]] == [
        (100, "small.json", "a"),
        (500, "small.json", "a"),
        (1000, "mid.json", "c"),
        (2000, "big.json", "b"),
    ]
    assert joined["verdict"] == {
        "client-timed": {
            "sizes": [100, 500, 1000, 2000],
            "largest_holding_all": 1000,
            "first_broken": {"nodes": 2000, "slos": ["single"]},
        }
    }
    text = bynodes.markdown(joined)
    assert "| client-timed | 100, 500, 1000, 2000 | 1000 | 2000: single |" in text
    assert "| 2000 | big.json | bbbbbbbbbbbb |" in text
    assert "| 2000 | 60000 |" in text  # density's own table, over every size


def test_a_size_holding_again_after_a_broken_one_does_not_raise_the_largest_n() -> None:
    runs = [finished_size(n) for n in (100, 500, 1000)]
    runs[1]["slo_held"]["pod startup"] = False
    runs[1]["slo_held"]["single"] = False
    for run, (windows, whole) in zip(runs, [(True, True), (False, True), (True, True)], strict=True):
        run["api_sli"] = sli(windows, whole)
    verdict = bynodes.verdict(runs)
    assert verdict["client-timed"]["largest_holding_all"] == 100
    assert verdict["client-timed"]["first_broken"] == {"nodes": 500, "slos": ["pod startup", "single"]}
    assert verdict["SLI, 1-minute windows"]["largest_holding_all"] == 100
    assert verdict["SLI, 1-minute windows"]["first_broken"] == {"nodes": 500, "slos": ["single object"]}
    assert verdict["SLI, whole run"] == {
        "sizes": [100, 500, 1000],
        "largest_holding_all": 1000,
        "first_broken": None,
    }


def test_a_size_broken_from_the_first_holds_at_no_n() -> None:
    verdict = bynodes.verdict([{**finished_size(100), "slo_held": {"single": False, "pod startup": True}}])
    assert verdict["client-timed"]["largest_holding_all"] is None
    assert "| client-timed | 100 | none | 100: single |" in bynodes.markdown(
        {
            **result([]),
            "runs": [{**finished_size(100), "source": "x.json", "commit": None}],
            "verdict": verdict,
        }
    )


@pytest.mark.parametrize(
    ("second", "said"),
    [
        (
            result([1000], store="sqlite"),
            "other.json measured another benchmark: store 'sqlite' (not 'etcd' as in first.json)",
        ),
        (result([500]), "500 nodes measured twice: in first.json and in other.json"),
    ],
)
def test_runs_of_another_benchmark_or_a_size_twice_are_refused(second: dict[str, Any], said: str) -> None:
    with pytest.raises(bynodes.NotJoinable) as refused:
        bynodes.join([("first.json", result([100, 500])), ("other.json", second)])
    assert str(refused.value) == said


def test_the_command_writes_the_joined_report_and_refuses_a_mismatch_without_writing(tmp_path: Path) -> None:
    small, big, sqlite = tmp_path / "small.json", tmp_path / "big.json", tmp_path / "sqlite.json"
    small.write_text(json.dumps(result([100])))
    big.write_text(json.dumps(result([1000], broken={1000: "pod startup"})))
    sqlite.write_text(json.dumps(result([500], store="sqlite")))
    out = tmp_path / "out"
    script = str(ROOT / "bench/scale/bynodes.py")
    done = subprocess.run(
        [sys.executable, script, str(big), str(small), "--out", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    written = json.loads((out / "scale-density-by-nodes.json").read_text())
    assert [r["nodes"] for r in written["runs"]] == [100, 1000]
    assert written["verdict"]["client-timed"]["first_broken"] == {"nodes": 1000, "slos": ["pod startup"]}
    assert (out / "scale-density-by-nodes.svg").read_text().startswith("<svg")
    refused = subprocess.run(
        [sys.executable, script, str(small), str(sqlite), "--out", str(tmp_path / "none")],
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2
    assert "sqlite.json measured another benchmark: store 'sqlite'" in refused.stderr
    assert not (tmp_path / "none").exists()


async def test_a_density_result_names_the_commit_it_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def one_size(_root: Path, nodes: int, _args: argparse.Namespace) -> dict[str, Any]:
        return finished_size(nodes)

    monkeypatch.setattr(density, "one_size", one_size)
    args = argparse.Namespace(
        nodes="5", store="etcd", apiservers=1, pods_per_node=30, rate=50.0, controller_manager_qps=None
    )
    await density.main(args, tmp_path)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    written = json.loads((tmp_path / "scale-density.json").read_text())
    assert written["commit"] == head.stdout.strip()
    assert f"main at {head.stdout.strip()[:12]}" in (tmp_path / "scale-density.md").read_text()
