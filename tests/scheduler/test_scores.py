"""Score plugins: upstream's formulas on hand-built nodes."""

from __future__ import annotations

import random
from collections import Counter

from controlplane.scheduler.framework import SKIP, ClusterView, normalize_to_max
from controlplane.scheduler.podinfo import pod_info
from controlplane.scheduler.scores import (
    BalancedAllocation,
    ImageLocality,
    NodeAffinityScore,
    PodTopologySpreadScore,
    ResourceAllocation,
    TaintTolerationScore,
)
from controlplane.scheduler.scores.balanced_allocation import balanced_score
from controlplane.scheduler.scores.image_locality import MB, image_priority
from controlplane.scheduler.scores.resource_allocation import broken_linear, least_requested, most_requested
from kubeclient.selectors import from_set
from tests.scheduler.helpers import make_node, make_pod

VIEW = ClusterView(1, Counter())


def test_least_and_most_requested_formulas():
    assert least_requested(1000, 4000) == 75
    assert least_requested(5000, 4000) == 0
    assert least_requested(0, 0) == 0
    assert most_requested(1000, 4000) == 25
    assert most_requested(5000, 4000) == 100  # capped: non-zero defaults can exceed allocatable


def test_least_allocated_prefers_the_emptier_node_most_allocated_the_fuller():
    empty, busy = make_node("empty"), make_node("busy")
    busy.add_pod(make_pod(cpu="2", memory="4Gi"))
    pod = make_pod(cpu="1", memory="2Gi")
    least = ResourceAllocation("LeastAllocated").score_all(pod, [empty, busy], None)
    most = ResourceAllocation("MostAllocated").score_all(pod, [empty, busy], None)
    assert least == [75, 25]  # (4-1)/4 and (4-3)/4 for both cpu and memory
    assert most == [25, 75]


def test_broken_linear_function_as_upstreams_cases():
    """pkg/scheduler/framework/plugins/noderesources' TestBrokenLinearFunction, point for point."""
    cases = {
        ((10, 1), (90, 9)): {
            -10: 1,
            0: 1,
            9: 1,
            10: 1,
            15: 1,
            19: 1,
            20: 2,
            89: 8,
            90: 9,
            99: 9,
            100: 9,
            110: 9,
        },
        ((0, 2), (40, 10), (100, 0)): {-10: 2, 0: 2, 20: 6, 30: 8, 40: 10, 70: 5, 100: 0, 110: 0},
        ((0, 2), (40, 2), (100, 2)): {-10: 2, 0: 2, 20: 2, 40: 2, 70: 2, 100: 2, 110: 2},
    }
    for shape, points in cases.items():
        at = broken_linear(shape)
        assert {p: at(p) for p in points} == points, shape


def _bare_pod(requests: dict[str, str] | None = None, node: str = ""):
    """A pod as upstream's st.MakePod() builds it: no container unless it requests something."""
    containers = [{"name": "c", "image": "i", "resources": {"requests": requests}}] if requests else []
    return pod_info(
        {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"containers": containers}}
    )


def test_requested_to_capacity_ratio_as_upstreams_cases():
    """TestRequestedToCapacityRatioScoringStrategy's three cases (shape 0->10, 100->0; cpu and memory):
    a resource scoring 0 is left out and the mean is rounded."""
    ratio = ResourceAllocation("RequestedToCapacityRatio", shape=[(0, 10), (100, 0)])
    small, big = make_node("n1", cpu="4000", memory="10000"), make_node("n2", cpu="6000", memory="10000")
    assert ratio.score_all(_bare_pod(), [small, big], None) == [100, 100]
    pod = _bare_pod({"cpu": "3000", "memory": "5000"})
    assert ratio.score_all(pod, [small, big], None) == [38, 50]  # (25 + 50) / 2 = 37.5 -> 38
    small, big = make_node("n1", cpu="4000", memory="10000"), make_node("n2", cpu="6000", memory="10000")
    for node in (small, big):
        node.add_pod(make_pod(cpu="3000", memory="5000"))
    assert ratio.score_all(_bare_pod(), [small, big], None) == [38, 50]


def test_requested_to_capacity_ratio_on_an_extended_resource_as_upstream():
    """TestResourceBinPackingSingleExtended: shape 0->0, 100->1 on intel.com/foo alone; a pod that does
    not request it scores 0 everywhere (the resource is not scored at all)."""
    ratio = ResourceAllocation("RequestedToCapacityRatio", [("intel.com/foo", 1)], shape=[(0, 0), (100, 1)])

    def nodes():
        return [make_node("n1", extra={"intel.com/foo": "8"}), make_node("n2", extra={"intel.com/foo": "4"})]

    assert ratio.score_all(_bare_pod(), nodes(), None) == [0, 0]
    assert ratio.score_all(_bare_pod({"intel.com/foo": "2"}), nodes(), None) == [2, 5]
    busy = nodes()
    busy[1].add_pod(_bare_pod({"intel.com/foo": "2"}))
    assert ratio.score_all(_bare_pod({"intel.com/foo": "2"}), busy, None) == [2, 10]
    assert ratio.score_all(_bare_pod({"intel.com/foo": "4"}), nodes(), None) == [5, 10]


def test_least_allocated_leaves_out_a_resource_the_node_has_none_of():
    """Upstream's leastResourceScorer skips a resource whose allocatable is 0 (weight and all)."""
    with_gpu, without = make_node("g", extra={"example.com/gpu": "4"}), make_node("n")
    scorer = ResourceAllocation("LeastAllocated", [("cpu", 1), ("example.com/gpu", 3)])
    pod = _bare_pod({"cpu": "1", "example.com/gpu": "1"})
    # with: cpu (4-1)/4 = 75, gpu (4-1)/4 = 75 -> 75; without: the gpu is left out, cpu alone 75
    assert scorer.score_all(pod, [with_gpu, without], None) == [75, 75]


def test_resource_weights_and_nonzero_requests():
    node = make_node(cpu="1", memory="1Gi")
    best_effort = make_pod(cpu=None, memory=None)
    # Counted as 100m and 200Mi: cpu (1000-100)/1000 = 90, memory (1024-200)/1024 = 80.
    assert ResourceAllocation().score_all(best_effort, [node], None) == [85]
    cpu_only = ResourceAllocation("LeastAllocated", [("cpu", 3), ("memory", 1)])
    assert cpu_only.score_all(best_effort, [node], None) == [(90 * 3 + 80) // 4]


def test_balanced_allocation():
    assert balanced_score([0.5, 0.5]) == 100
    assert balanced_score([0.2, 0.6]) == 80
    assert balanced_score([0.1, 0.2, 0.3]) == int((1 - (2 / 300) ** 0.5) * 100)
    plugin = BalancedAllocation()
    assert plugin.prepare(make_pod(cpu=None, memory=None), [], VIEW) is SKIP  # best-effort pods
    balanced, lopsided = make_node("b", cpu="4", memory="4Gi"), make_node("l", cpu="4", memory="4Gi")
    balanced.add_pod(make_pod(cpu="1", memory="1Gi"))
    lopsided.add_pod(make_pod(cpu="3", memory="100Mi"))
    scores = plugin.score_all(make_pod(cpu="1", memory="1Gi"), [balanced, lopsided], None)
    assert scores[0] == 100 and scores[1] < 70


def test_image_locality():
    assert image_priority(0, 1) == 0
    assert image_priority(1000 * MB, 1) == 100
    assert image_priority(5000 * MB, 2) == 100
    assert image_priority(23 * MB + (977 * MB) // 2, 1) == 50
    size = 500 * MB
    have = make_node("have", images={"docker.io/library/app:1": size})
    lack = make_node("lack")
    view = ClusterView(2, Counter({"docker.io/library/app:1": 1}))
    plugin = ImageLocality()
    pod = make_pod(image="app:1")
    state = plugin.prepare(pod, [have, lack], view)
    # Spread 1/2 scales the 500 MiB image to 250 MiB.
    assert plugin.score_all(pod, [have, lack], state) == [image_priority(size // 2, 1), 0]
    assert plugin.prepare(make_pod(image="other"), [have, lack], view) is SKIP


def test_image_locality_counts_init_containers_as_upstream():
    """1.32 sums the init containers' images too and spreads the range over all containers: an init
    image of 600 MiB on every node and a 400 MiB app image on this one, two containers."""
    node = make_node("n", images={"docker.io/library/init:1": 600 * MB, "docker.io/library/app:1": 400 * MB})
    view = ClusterView(1, Counter({"docker.io/library/init:1": 1, "docker.io/library/app:1": 1}))
    pod = make_pod(image="app:1", initContainers=[{"name": "i", "image": "init:1"}])
    plugin = ImageLocality()
    # (1000 MiB - 23 MiB) * 100 // (2000 MiB - 23 MiB) = 49
    assert plugin.score_all(pod, [node], plugin.prepare(pod, [node], view)) == [49]


def test_taint_toleration_score_counts_untolerated_prefer_no_schedule():
    soft = {"key": "spot", "effect": "PreferNoSchedule"}
    clean, one, two = (
        make_node("c"),
        make_node("o", taints=[soft]),
        make_node("t", taints=[soft, {"key": "old", "effect": "PreferNoSchedule"}]),
    )
    plugin = TaintTolerationScore()
    pod = make_pod()
    raw = plugin.score_all(pod, [clean, one, two], plugin.prepare(pod, [clean, one, two], VIEW))
    assert raw == [0, 1, 2]
    assert plugin.normalize(raw) == [100, 50, 0]
    tolerant = make_pod(tolerations=[{"key": "spot", "operator": "Exists", "effect": "PreferNoSchedule"}])
    assert plugin.score_all(tolerant, [one], plugin.prepare(tolerant, [one], VIEW)) == [0]
    assert plugin.prepare(pod, [clean], VIEW) is SKIP


def test_preferred_node_affinity():
    pod = make_pod(
        affinity={
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "preference": {
                            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]
                        },
                    },
                    {
                        "weight": 30,
                        "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]},
                    },
                ]
            }
        }
    )
    nodes = [
        make_node("a", labels={"zone": "a"}),
        make_node("b", labels={"disk": "ssd"}),
        make_node("c", labels={"zone": "a", "disk": "ssd"}),
        make_node("d"),
    ]
    plugin = NodeAffinityScore()
    raw = plugin.score_all(pod, nodes, plugin.prepare(pod, nodes, VIEW))
    assert raw == [10, 30, 40, 0]
    assert plugin.normalize(raw) == [25, 75, 100, 0]
    assert plugin.prepare(make_pod(), nodes, VIEW) is SKIP


def test_pod_topology_spread_default_constraints():
    """Without constraints of its own, a pod is spread by the selector of what selects it: hostname
    (maxSkew 3) and zone (maxSkew 5), each count weighted by log(domains + 2)."""
    a, b, c = (make_node(n, labels={"kubernetes.io/hostname": n}) for n in "abc")
    for _ in range(2):
        a.add_pod(make_pod(labels={"app": "web"}))
    b.add_pod(make_pod(labels={"app": "web"}))
    b.add_pod(make_pod(labels={"app": "other"}))
    selector = from_set({"app": "web"})
    view = ClusterView(3, Counter(), [a, b, c], {}, lambda _pod: selector)
    plugin = PodTopologySpreadScore()
    pod = make_pod(labels={"app": "web"})
    state = plugin.prepare(pod, [a, b, c], view)
    raw = plugin.score_all(pod, [a, b, c], state)
    # log(3 + 2) = 1.609: a 2 * 1.609 + 2 = 5.2 -> 5; b 1.609 + 2 -> 4; c 2. No node has a zone.
    assert raw == [5, 4, 2]
    assert plugin.normalize(raw) == [100 * (5 + 2 - s) // 5 for s in raw] == [40, 60, 100]
    nothing = ClusterView(3, Counter(), [a, b, c], {}, lambda _pod: None)
    assert plugin.prepare(pod, [a, b, c], nothing) is SKIP


def test_default_normalize():
    assert normalize_to_max([0, 5, 10]) == [0, 50, 100]
    assert normalize_to_max([0, 0]) == [0, 0]
    assert normalize_to_max([0, 0], reverse=True) == [100, 100]


def test_the_unrolled_cpu_memory_scores_equal_the_general_ones():
    """BalancedAllocation's and LeastAllocated's two-resource fast paths give what the general
    arithmetic gives (LeastAllocated's general loop is taken by naming the resources in the other
    order; nodes without cpu included)."""
    rng = random.Random(7)
    nodes = []
    for i in range(200):
        node = make_node(f"n{i}", cpu=f"{rng.randint(0, 8)}", memory=f"{rng.randint(1, 16)}Gi")
        for _ in range(rng.randint(0, 5)):
            node.add_pod(make_pod(cpu=f"{rng.randint(0, 3000)}m", memory=f"{rng.randint(0, 4096)}Mi"))
        nodes.append(node)
    for pod in (
        make_pod(cpu="1", memory="1Gi"),
        make_pod(cpu=None, memory=None),
        make_pod(cpu="7", memory="20Gi"),
    ):
        assert _general_balanced(pod, nodes) == BalancedAllocation().score_all(pod, nodes, None)
        fast = ResourceAllocation(resources=(("cpu", 2), ("memory", 1))).score_all(pod, nodes, None)
        general = ResourceAllocation(resources=(("memory", 1), ("cpu", 2))).score_all(pod, nodes, None)
        assert fast == general


def _general_balanced(pod, nodes):
    out = []
    for node in nodes:
        fractions = []
        for r in ("cpu", "memory"):
            a = node.facts.allocatable.get(r, 0)
            if a:
                fractions.append(min((node.requested.get(r, 0) + pod.requests.get(r, 0)) / a, 1.0))
        out.append(balanced_score(fractions))
    return out
