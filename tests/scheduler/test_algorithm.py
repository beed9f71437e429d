"""One decision end to end on hand-built nodes: the FitError message, tie-breaking, skipping."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from controlplane.scheduler.algorithm import (
    FitError,
    Search,
    feasible_nodes_to_find,
    find_feasible,
    fit_message,
    schedule,
    select_host,
)
from controlplane.scheduler.cache import SchedulerCache
from controlplane.scheduler.config import SchedulerConfig, config_from_dict
from controlplane.scheduler.cyclemetrics import CycleMetrics
from controlplane.scheduler.filters import default_filters
from controlplane.scheduler.framework import ClusterView
from controlplane.scheduler.metrics import SchedulerMetrics
from controlplane.scheduler.plugins import build_scores
from tests.scheduler.helpers import make_node, make_pod


def decide(pod, nodes, config=None, seed=0):
    return schedule(
        pod,
        nodes,
        default_filters(),
        build_scores(config or SchedulerConfig()),
        ClusterView(len(nodes), Counter()),
        random.Random(seed),
    )


def test_message_matches_upstream_example():
    gpu = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    nodes = [make_node("a", memory="1Gi"), make_node("b", taints=gpu), make_node("c", taints=gpu)]
    with pytest.raises(FitError) as err:
        decide(make_pod(memory="2Gi"), nodes)
    assert str(err.value) == (
        "0/3 nodes are available: 1 Insufficient memory, 2 node(s) had untolerated taint {dedicated: gpu}."
    )


def test_first_failing_filter_names_the_reason():
    # Cordoned and too small: only "were unschedulable" is reported, as NodeUnschedulable runs first.
    node = make_node(cpu="100m", unschedulable=True)
    with pytest.raises(FitError) as err:
        decide(make_pod(cpu="1"), [node])
    assert str(err.value) == "0/1 nodes are available: 1 node(s) were unschedulable."


def test_histogram_is_sorted_as_strings():
    reasons = {f"n{i}": ("Insufficient cpu",) for i in range(10)}
    reasons["x"] = ("Too many pods",)
    reasons["y"] = ("Too many pods",)
    # "10 ..." sorts before "2 ..." as upstream's sort.Strings does.
    assert fit_message(12, reasons) == "0/12 nodes are available: 10 Insufficient cpu, 2 Too many pods."


def test_no_nodes():
    with pytest.raises(FitError) as err:
        decide(make_pod(), [])
    assert str(err.value) == "no nodes available to schedule pods"


def test_ties_are_broken_at_random():
    nodes = [make_node(f"n{i}") for i in range(4)]
    picks = Counter(select_host(nodes, [5, 5, 5, 5], random.Random(seed)).name for seed in range(400))
    assert set(picks) == {"n0", "n1", "n2", "n3"}
    assert min(picks.values()) > 50  # roughly uniform
    assert select_host(nodes, [1, 9, 3, 9], random.Random(1)).name in {"n1", "n3"}
    assert select_host(nodes, [1, 2, 10, 3], random.Random(1)).name == "n2"


def test_strategy_decides_between_emptier_and_fuller():
    empty, busy = make_node("empty"), make_node("busy")
    busy.add_pod(make_pod(cpu="2", memory="4Gi"))
    pod = make_pod(cpu="1", memory="2Gi")
    assert decide(pod, [empty, busy]).name == "empty"
    most = config_from_dict(
        {
            "profiles": [
                {
                    "pluginConfig": [
                        {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
                    ]
                }
            ]
        }
    )
    assert decide(pod, [empty, busy], most).name == "busy"


def test_sequential_decisions_with_assumed_pods_never_overcommit():
    nodes = [make_node(f"n{i}", cpu="2") for i in range(5)]
    placed = Counter()
    for i in range(12):
        pod = make_pod(cpu="1", name=f"p{i}")
        try:
            node = decide(pod, nodes, seed=i)
        except FitError as err:
            assert str(err) == "0/5 nodes are available: 5 Insufficient cpu."
            continue
        node.add_pod(pod)  # what the cache's assume does
        placed[node.name] += 1
    assert sum(placed.values()) == 10
    assert all(v == 2 for v in placed.values())


@pytest.mark.parametrize(
    ("nodes", "percentage", "expected"),
    [
        (50, 0, 50),
        (100, 0, 100),
        (500, 0, 230),
        (1000, 0, 420),
        (5000, 0, 500),
        (6000, 0, 300),
        (500, 10, 100),
        (1000, 30, 300),
        (1000, 100, 1000),
    ],
)
def test_feasible_nodes_to_find(nodes, percentage, expected):
    assert feasible_nodes_to_find(nodes, percentage) == expected


def test_big_clusters_stop_early_and_rotate_the_start():
    nodes = [make_node(f"n{i:03d}") for i in range(500)]
    search = Search()
    feasible, rejected = find_feasible(make_pod(), nodes, default_filters(), search)
    assert len(feasible) == 230 and not rejected
    assert [n.name for n in feasible[:2]] == ["n000", "n001"] and search.next_start == 230
    feasible, _ = find_feasible(make_pod(), nodes, default_filters(), search)
    assert feasible[0].name == "n230" and feasible[-1].name == "n459"
    # When nothing fits, every node is looked at and reported.
    with pytest.raises(FitError) as err:
        schedule(
            make_pod(cpu="64"),
            nodes,
            default_filters(),
            [],
            ClusterView(500, Counter()),
            random.Random(0),
            search,
        )
    assert str(err.value) == "0/500 nodes are available: 500 Insufficient cpu."


def test_rejected_nodes_count_as_evaluated_and_move_the_start():
    """Upstream's search: it stops at the 420th feasible node of 1000 (50% - 1000/125 = 42%), the
    rejected nodes it met on the way counted as processed, so the next pod starts after both."""
    nodes = [make_node(f"n{i:04d}", cpu="100m" if i < 100 else "4") for i in range(1000)]
    evaluated: list[str] = []

    class Counting:
        name = "Counting"

        def applies(self, pod):
            return True

        def filter(self, pod, node):
            evaluated.append(node.name)
            return ()

    search = Search()
    feasible, rejected = find_feasible(make_pod(cpu="1"), nodes, [*default_filters(), Counting()], search)
    assert len(feasible) == 420 and len(rejected) == 100
    assert len(evaluated) == 420  # the filter after NodeResourcesFit saw only the nodes that fit so far
    assert search.next_start == 520
    search.percentage = 10  # a profile's own setting: 10% of 1000 is 100
    feasible, _ = find_feasible(make_pod(cpu="1"), nodes, default_filters(), search)
    assert len(feasible) == 100 and feasible[0].name == "n0520"


def _node(name: str, taints: list | None = None, unschedulable: bool = False) -> dict:  # type: ignore[type-arg]
    alloc = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    spec = {"taints": taints or [], "unschedulable": unschedulable}
    return {"metadata": {"name": name}, "spec": spec, "status": {"allocatable": alloc}}


def _counting_calls(cache: SchedulerCache, pod, sampled: bool) -> tuple[str, Counter]:  # type: ignore[type-arg]
    """The chosen node and how often each filter was asked, through the cache's view of the cluster."""
    calls: Counter[str] = Counter()
    filters = default_filters()
    for f in filters:
        inner = f.filter

        def counted(p, node, _inner=inner, _name=f.name):
            calls[_name] += 1
            return _inner(p, node)

        f.filter = counted  # type: ignore[method-assign]
    view = cache.cluster_view()
    observer = CycleMetrics(SchedulerMetrics(), "p", sampled)
    chosen = schedule(pod, view.all_nodes, filters, [], view, random.Random(0), None, observer)
    return chosen.name, calls


def test_filters_that_pass_every_node_are_asked_only_when_their_durations_are_sampled():
    """No node is tainted or cordoned and the pod has no inter-pod terms: TaintToleration,
    NodeUnschedulable and InterPodAffinity cannot reject a node, so an unsampled cycle does not ask them
    (same node chosen); a sampled cycle asks them per node, as upstream's calls are timed."""
    cache = SchedulerCache()
    for name in ("a", "b", "c"):
        cache.set_node(_node(name))
    pod = make_pod(cpu="1")
    chosen, unsampled = _counting_calls(cache, pod, sampled=False)
    assert unsampled == {"NodeResourcesFit": 3}
    again, sampled = _counting_calls(cache, pod, sampled=True)
    assert again == chosen
    every = {"NodeUnschedulable": 3, "TaintToleration": 3, "NodeResourcesFit": 3, "InterPodAffinity": 3}
    assert sampled == every
    cache.set_node(_node("c", taints=[{"key": "k", "effect": "NoSchedule"}]))
    _, calls = _counting_calls(cache, pod, sampled=False)
    assert calls["TaintToleration"] == 3 and "NodeUnschedulable" not in calls
    cache.set_node(_node("a", unschedulable=True))
    cache.assume(make_pod(cpu="3"), "b")
    with pytest.raises(FitError) as err:  # c: untolerated taint, a: cordoned, b: too full for 2 cpu
        _counting_calls(cache, make_pod(cpu="2"), sampled=False)
    assert str(err.value) == (
        "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {k: }, "
        "1 node(s) were unschedulable."
    )
    cache.set_node(_node("a"))
    cache.set_node(_node("c"))  # untainted again: the filters are left out again
    assert _counting_calls(cache, pod, sampled=False)[1] == {"NodeResourcesFit": 3}
