"""DefaultPreemption's choices on hand-built nodes (upstream's rules, pkg/scheduler/framework/plugins/
defaultpreemption and framework/preemption)."""

from __future__ import annotations

from collections import Counter

from controlplane.scheduler.algorithm import FitError, find_feasible, pre_filter_all
from controlplane.scheduler.filters import default_filters
from controlplane.scheduler.framework import ClusterView
from controlplane.scheduler.podinfo import pod_info
from controlplane.scheduler.preemption import NOT_HELPFUL, Budget, SavedStates, Trial, preempt
from controlplane.scheduler.victims import budgets
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
        "1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling.."
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


def _anti(**labels):
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": labels}, "topologyKey": "topology.kubernetes.io/zone"}
            ]
        }
    }


def test_the_trial_keeps_prefilter_state_as_a_recount_would():
    """Upstream's AddPod/RemovePod extensions: after pods leave and return on the trial node, each
    filter's PreFilter state equals what counting the changed cluster afresh gives."""
    zone = "topology.kubernetes.io/zone"
    nodes = [make_node(f"n{i}", labels={zone: f"z{i % 2}"}) for i in range(4)]
    pods = []
    for i, node in enumerate(nodes):
        for j in range(3):
            p = make_pod(
                name=f"p{i}{j}", priority=j, labels={"app": "db" if j else "web"}, affinity=_anti(app="x")
            )
            node.add_pod(p)
            pods.append(p)
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": zone,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "db"}},
        }
    ]
    pod = make_pod(
        priority=10, labels={"app": "x"}, affinity=_anti(app="db"), topologySpreadConstraints=spread
    )
    filters = default_filters()
    view = ClusterView(len(nodes), Counter(), nodes, {})
    pre_filter_all(pod, filters, view, len(nodes))
    original = [(f.name, f.state.copy()) for f in filters if hasattr(f, "save")]  # type: ignore[attr-defined]
    states = SavedStates(pod, filters)
    states.restore()  # as preempt() does before each candidate: the trial works on copies
    trial = Trial(pod, nodes[0], filters)
    victims = [p for p in nodes[0].pods.values() if p.priority > 0]
    for p in victims:
        trial.remove(p)
    trial.add(victims[0])
    incremental = [(f.name, f.state) for f in filters if hasattr(f, "save")]  # type: ignore[attr-defined]
    changed = [trial.node if n.name == "n0" else n for n in nodes]
    pre_filter_all(pod, filters, ClusterView(4, Counter(), changed, {}), 4)
    recounted = [(f.name, f.state) for f in filters if hasattr(f, "save")]  # type: ignore[attr-defined]
    assert incremental == recounted
    assert [n for n, _ in recounted] == ["PodTopologySpread", "InterPodAffinity"]
    assert incremental != original  # the trial did change them
    states.restore()  # the pod's own state is back for the next candidate
    assert [(f.name, f.state) for f in filters if hasattr(f, "save")] == original  # type: ignore[attr-defined]


def test_a_node_freed_for_a_nominated_pod_is_not_freed_again():
    """Upstream's RunFilterPluginsWithNominatedPods in SelectVictimsOnNode: with the first preemptor
    nominated to `a` (its victims still there), the second one of equal priority goes to `b`."""
    a, b = make_node("a", cpu="4"), make_node("b", cpu="4")
    for node in (a, b):
        for i in range(4):
            node.add_pod(make_pod(cpu="900m", name=f"{node.name}-low{i}", priority=0))
    first = make_pod(cpu="3", priority=10, name="first")
    second = make_pod(cpu="3", priority=10, name="second")
    filters = default_filters()
    view = ClusterView(2, Counter(), [a, b], {}, None, {"a": [first]})
    pre_filter_all(second, filters, view, 2)
    _, rejected = find_feasible(second, [a, b], filters, None, view)
    outcome = preempt(second, rejected, filters, view)
    assert outcome.candidate is not None and outcome.candidate.node.name == "b"
    assert len(outcome.candidate.victims) == 3


def test_a_victim_already_terminating_on_the_nominated_node_is_waited_for():
    """Upstream's PodEligibleToPreemptOthers: a pod nominated to a node where a lower-priority pod is
    already terminating waits for it to go rather than evicting more (issue 33's bad input)."""
    node = make_node("a", cpu="1")
    going = make_pod(cpu="1", priority=0, name="going")
    going = pod_info(
        {**going.obj, "metadata": {**going.obj["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    )
    node.add_pod(going)
    preemptor = make_pod(cpu="1", priority=10, name="p")
    nominated = pod_info({**preemptor.obj, "status": {"nominatedNodeName": "a"}})
    outcome = run(nominated, [node])
    assert outcome.candidate is None
    assert outcome.message == "not eligible due to a terminating pod on the nominated node."
    # Not nominated there yet: the node is a candidate as any other.
    outcome = run(preemptor, [node])
    assert outcome.candidate is not None and outcome.candidate.node.name == "a"


def test_a_budget_whose_selector_does_not_parse_or_is_empty_protects_nothing():
    """Upstream's filterPodsWithPDBViolation: a PDB whose selector does not parse, or is empty, matches no
    pod, so it neither blocks preemption nor stops the cycle."""
    pdbs = [
        {
            "metadata": {"namespace": "ns", "name": "bad"},
            "spec": {
                "selector": {"matchExpressions": [{"key": "app", "operator": "Sideways", "values": ["db"]}]}
            },
            "status": {"disruptionsAllowed": 0},
        },
        {"metadata": {"namespace": "ns", "name": "empty"}, "spec": {"selector": {}}, "status": {}},
        {
            "metadata": {"namespace": "ns", "name": "good"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}},
            "status": {"disruptionsAllowed": 0},
        },
    ]
    read = budgets(pdbs)
    assert len(read) == 2  # the one that does not parse is skipped
    node = make_node("a", cpu="1")
    node.add_pod(make_pod(cpu="1", priority=1, labels={"app": "web"}))
    outcome = run(make_pod(cpu="1", priority=10), [node], read)
    assert outcome.candidate is not None and outcome.candidate.violations == 0
    # The parsed budget still counts for the pods it selects.
    guarded = make_node("b", cpu="1")
    guarded.add_pod(make_pod(cpu="1", priority=1, labels={"app": "db"}))
    outcome = run(make_pod(cpu="1", priority=10), [guarded], read)
    assert outcome.candidate is not None and outcome.candidate.violations == 1
