"""The density benchmark keeps each cluster size's figures as soon as that size finishes: a run stopped
or broken at a larger N (the 500-node size runs for the best part of an hour) still leaves the report of
the sizes before it. The sizes themselves are replaced by a stand-in here (a real size starts an API
server and hundreds of simulated nodes: the smoke test in test_smoke.py runs one); what is tested is the
loop over sizes and the report it writes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from bench.scale import density


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
        nodes="100,500", store="etcd", pods_per_node=30, rate=50.0, controller_manager_qps=None
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
        nodes="5,10", store="sqlite", pods_per_node=30, rate=50.0, controller_manager_qps=None
    )
    result = await density.main(args, tmp_path)
    written = json.loads((tmp_path / "scale-density.json").read_text())
    assert [r["nodes"] for r in written["runs"]] == [5, 10] == [r["nodes"] for r in result["runs"]]
    assert "| 10 | 300 |" in (tmp_path / "scale-density.md").read_text()
