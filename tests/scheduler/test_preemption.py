"""DefaultPreemption's choices on hand-built nodes (upstream's rules, pkg/scheduler/framework/plugins/
defaultpreemption and framework/preemption)."""

from __future__ import annotations

from collections import Counter

from controlplane.scheduler.algorithm import FitError, find_feasible, pre_filter_all
from controlplane.scheduler.filters import default_filters
from controlplane.scheduler.framework import ClusterView
from controlplane.scheduler.preemption import NOT_HELPFUL, Budget, preempt
from kubeclient.selectors import from_set
from tests.scheduler.helpers import make_node, make_pod


def run(pod, nodes, budgets=()):
    filters = default_filters()
    view = ClusterView(len(nodes), Counter(), nodes, {})
    pre_filter_all(pod, filters, view, len(nodes))
    feasible, rejected = find_feasible(pod, nodes, filters, None, view)
    assert not feasible
    return preempt(pod, rejected, filters, view, budgets)


def test_lowest_priority_victims_and_only_as_many_as_needed():
    node = make_node("a", cpu="2")
    for name, prio, cpu in (("p1", 1, "500m"), ("p5", 5, "500m"), ("p9", 9, "1")):
        node.add_pod(make_pod(cpu=cpu, name=name, priority=prio))
    outcome = run(make_pod(cpu="1", priority=10), [node])
    assert outcome.candidate is not None
    # Removing p1 and p5 frees 1 cpu: p9, the most important, is given back.
    assert [v.name for v in outcome.candidate.victims] == ["p5", "p1"]


def test_no_lower_priority_pods_and_unresolvable_nodes_message():
    full = make_node("full", cpu="1")
    full.add_pod(make_pod(cpu="1", priority=100))
    tainted = make_node("tainted", taints=[{"key": "k", "effect": "NoSchedule"}])
    outcome = run(make_pod(cpu="1", priority=10), [full, tainted])
    assert outcome.candidate is None
    assert outcome.message == (
        f"0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 {NOT_HELPFUL}."
    )
    err = FitError(2, {"full": ("Insufficient cpu",)}, post_filter=f"preemption: {outcome.message}")
    assert str(err) == (
        "0/2 nodes are available: 1 Insufficient cpu. preemption: 0/2 nodes are available: "
        "1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
    )


def test_preemption_policy_never():
    node = make_node("a", cpu="1")
    node.add_pod(make_pod(cpu="1", priority=0))
    outcome = run(make_pod(cpu="1", priority=10, preemptionPolicy="Never"), [node])
    assert outcome.candidate is None and outcome.message == "not eligible due to preemptionPolicy=Never."


def test_fewest_pdb_violations_win_then_lowest_priority():
    guarded, free = make_node("guarded", cpu="1"), make_node("free", cpu="1")
    guarded.add_pod(make_pod(cpu="1", priority=1, labels={"app": "db"}))
    free.add_pod(make_pod(cpu="1", priority=5, labels={"app": "web"}))
    budget = Budget("ns", from_set({"app": "db"}), allowed=0)
    outcome = run(make_pod(cpu="1", priority=10), [guarded, free], [budget])
    assert outcome.candidate is not None and outcome.candidate.node.name == "free"
    # Without the budget the lower-priority victim's node wins.
    outcome = run(make_pod(cpu="1", priority=10), [guarded, free])
    assert outcome.candidate is not None and outcome.candidate.node.name == "guarded"


def test_nominated_pods_keep_their_room():
    node = make_node("a", cpu="1")
    waiting = make_pod(cpu="1", priority=10, name="nominee")
    view = ClusterView(1, Counter(), [node], {}, None, {"a": [waiting]})
    filters = default_filters()
    lower = make_pod(cpu="500m", priority=5)
    assert find_feasible(lower, [node], filters, None, view)[0] == []
    higher = make_pod(cpu="500m", priority=20)
    assert find_feasible(higher, [node], filters, None, view)[0] == [node]
