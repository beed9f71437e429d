"""What the cache keeps across decisions so a decision need not walk every node: PodTopologySpread's
domain counts (the SpreadIndex), the nodes holding pods with inter-pod affinity, and each node's
verdicts on node affinity. Each must always equal what a walk of the nodes finds, and decisions taken
with them must equal decisions taken without."""

from __future__ import annotations

import random
from collections import Counter

from controlplane.scheduler.algorithm import FitError, Search, schedule
from controlplane.scheduler.cache import SchedulerCache
from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.filters import NodeResourcesFitFilter, default_filters
from controlplane.scheduler.framework import ClusterView
from controlplane.scheduler.nodeinfo import fits_node_affinity
from controlplane.scheduler.plugins import build_scores
from controlplane.scheduler.podinfo import node_matches, pod_info
from controlplane.scheduler.scores import BalancedAllocation, ResourceAllocation
from controlplane.scheduler.scores.inter_pod_affinity import topology_score
from controlplane.scheduler.topologyspread import domain_counts
from tests.scheduler.helpers import make_pod

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def node_obj(name: str, zone: str | None, cpu: str = "4") -> dict:
    labels = {HOST: name}
    if zone is not None:
        labels[ZONE] = zone
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}},
    }


def spread(when: str = "DoNotSchedule", key: str = ZONE, color: str = "blue") -> list[dict]:
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {"color": color}},
        }
    ]


def zone_host_spread() -> list[dict]:
    return spread(key=ZONE) + spread(key=HOST)


def walked(pod, cache: SchedulerCache, constraints) -> list[dict[str, int]]:
    return domain_counts(pod, cache.nodes(), constraints)


def test_spread_index_follows_every_placement_and_removal():
    cache = SchedulerCache()
    for i in range(6):
        cache.set_node(node_obj(f"n{i}", f"z{i % 3}" if i != 5 else None))  # n5 has no zone
    asker = make_pod(labels={"color": "blue"}, topologySpreadConstraints=zone_host_spread())
    index = cache.spread_index

    def indexed():
        return domain_counts(asker, cache.nodes(), asker.spread_hard, index)

    assert indexed() == walked(asker, cache, asker.spread_hard)  # filled by a walk
    assert len(index) == 1
    rng = random.Random(7)
    placed = []
    for step in range(120):
        action = rng.random()
        if action < 0.5 or not placed:
            pod = make_pod(
                labels={"color": rng.choice(["blue", "red"])}, namespace=rng.choice(["ns", "other"])
            )
            cache.assume(pod, f"n{rng.randrange(6)}")
            placed.append(pod)
        elif action < 0.65:  # the watch confirms it, now terminating: it no longer counts
            pod = rng.choice(placed)
            body = dict(pod.obj)
            body["metadata"] = {**body["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}
            body["spec"] = {**body["spec"], "nodeName": cache.pod_node(pod.uid)}
            cache.set_pod(pod_info(body))
        elif action < 0.8:  # moved to another node (a relist saw it bound elsewhere)
            pod = rng.choice(placed)
            cache.assume(pod, f"n{rng.randrange(6)}")
        elif action < 0.9:
            pod = placed.pop(rng.randrange(len(placed)))
            cache.forget(pod.uid)
        else:
            pod = placed.pop(rng.randrange(len(placed)))
            cache.remove_pod(pod.uid)
        assert indexed() == walked(asker, cache, asker.spread_hard), f"step {step}"
    assert len(index) == 1  # kept up to date, never refilled


def test_spread_index_is_dropped_when_a_node_comes_goes_or_is_relabelled():
    cache = SchedulerCache()
    for i in range(3):
        cache.set_node(node_obj(f"n{i}", f"z{i}"))
    asker = make_pod(labels={"color": "blue"}, topologySpreadConstraints=spread())
    cache.assume(make_pod(labels={"color": "blue"}), "n0")
    domain_counts(asker, cache.nodes(), asker.spread_hard, cache.spread_index)
    heartbeat = node_obj("n0", "z0")
    heartbeat["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    cache.set_node(heartbeat)
    assert len(cache.spread_index) == 1  # same labels: kept
    for change in (
        lambda: cache.set_node(node_obj("n0", "z9")),
        lambda: cache.set_node(node_obj("n3", "z3")),
        lambda: cache.remove_node("n1"),
    ):
        change()
        assert len(cache.spread_index) == 0
        got = domain_counts(asker, cache.nodes(), asker.spread_hard, cache.spread_index)
        assert got == walked(asker, cache, asker.spread_hard)
    assert walked(asker, cache, asker.spread_hard) == [{"z9": 1, "z2": 0, "z3": 0}]


def test_spread_index_is_not_used_when_an_inclusion_policy_narrows_the_nodes():
    cache = SchedulerCache()
    for i in range(4):
        cache.set_node(node_obj(f"n{i}", f"z{i % 2}"))
    cache.assume(make_pod(labels={"color": "blue"}), "n1")
    narrowed = make_pod(
        labels={"color": "blue"}, topologySpreadConstraints=spread(), nodeSelector={HOST: "n0"}
    )
    got = domain_counts(narrowed, cache.nodes(), narrowed.spread_hard, cache.spread_index)
    assert got == [{"z0": 0}]  # nodeAffinityPolicy Honor: only n0 counts
    assert len(cache.spread_index) == 0


def test_affinity_listings_hold_exactly_the_nodes_with_such_pods():
    cache = SchedulerCache()
    for i in range(3):
        cache.set_node(node_obj(f"n{i}", "z"))
    term = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": HOST}
    anti = make_pod(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})
    liking = make_pod(affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})
    cache.assume(make_pod(), "n0")
    cache.assume(anti, "n1")
    cache.assume(liking, "n2")
    assert [n.name for n in cache.anti_affinity_nodes()] == ["n1"]
    assert [n.name for n in cache.affinity_nodes()] == ["n2"]
    cache.assume(anti, "n2")  # moved
    assert [n.name for n in cache.anti_affinity_nodes()] == ["n2"]
    cache.remove_node("n2")  # pods kept, node not offered
    assert cache.anti_affinity_nodes() == [] and cache.affinity_nodes() == []
    cache.set_node(node_obj("n2", "z"))
    assert [n.name for n in cache.affinity_nodes()] == ["n2"]
    cache.remove_pod(liking.uid)
    cache.forget(anti.uid)
    assert cache.anti_affinity_nodes() == [] and cache.affinity_nodes() == []


def test_node_affinity_verdicts_are_remembered_per_labels():
    cache = SchedulerCache()
    cache.set_node(node_obj("n0", "z1"))
    want = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z1"]}]}
                ]
            }
        }
    }
    pod, twin, other = make_pod(affinity=want), make_pod(affinity=want), make_pod(nodeSelector={ZONE: "z2"})
    assert pod.node_affinity_id == twin.node_affinity_id != other.node_affinity_id
    assert make_pod().node_affinity_id == 0
    facts = cache.node("n0").facts
    assert fits_node_affinity(pod, facts) and fits_node_affinity(twin, facts)
    assert not fits_node_affinity(other, facts)
    assert facts.affinity_verdicts == {pod.node_affinity_id: True, other.node_affinity_id: False}
    cache.set_node(node_obj("n0", "z2"))  # relabelled: new facts, verdicts from scratch
    facts = cache.node("n0").facts
    assert not fits_node_affinity(pod, facts) and fits_node_affinity(other, facts)
    assert fits_node_affinity(pod, facts) == node_matches(pod, facts.labels, "n0")


def test_decisions_with_the_cache_indexes_equal_decisions_walking_every_node():
    """The same pods through two caches, one decided with the cache's view (indexes, listings) and
    one with a bare view of the nodes: every pod lands on the same node, with the same messages."""
    fast, slow = SchedulerCache(), SchedulerCache()
    for cache in (fast, slow):
        for i in range(150):
            cache.set_node(node_obj(f"n{i:03d}", f"z{i % 3}", cpu="2"))
    filters_fast, filters_slow = default_filters(), default_filters()
    scores = build_scores(SchedulerConfig())
    rng_fast, rng_slow = random.Random(3), random.Random(3)
    search_fast, search_slow = Search(), Search()
    anti = {"labelSelector": {"matchLabels": {"color": "green"}}, "topologyKey": ZONE}  # 3 fit
    kinds = {
        "spread": {"topologySpreadConstraints": spread(key=ZONE) + spread(when="ScheduleAnyway", key=HOST)},
        "anti": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [anti]}}},
        "node": {"nodeSelector": {ZONE: "z1"}, "topologySpreadConstraints": spread()},
        "plain": {},
        **{f"affinity-{c}": {"affinity": a} for c, a in affinity_kinds().items() if a},
    }
    outcomes: Counter[str] = Counter()
    for i in range(250):
        kind = random.Random(i).choice(list(kinds))
        color = {"spread": "blue", "anti": "green", "node": "blue"}.get(kind, kind.rpartition("-")[2])
        body = make_pod(cpu="300m", labels={"color": color}, name=f"p{i}", **kinds[kind]).obj
        results = []
        for cache, filters, rng, search, bare in (
            (fast, filters_fast, rng_fast, search_fast, False),
            (slow, filters_slow, rng_slow, search_slow, True),
        ):
            pod = pod_info(body)
            nodes = cache.nodes()
            view = ClusterView(len(nodes), cache.image_nodes, nodes) if bare else cache.cluster_view()
            try:
                chosen = schedule(pod, nodes, filters, scores, view, rng, search).name
                cache.assume(pod, chosen)
            except FitError as err:
                chosen = str(err)
            results.append(chosen)
        assert results[0] == results[1], f"pod {i} ({kind})"
        outcomes["fit" if results[0].startswith("n") else "unschedulable"] += 1
    assert outcomes["fit"] > 150 and outcomes["unschedulable"] > 0  # both paths exercised


def naive_topology_score(pod, nodes, ns_of) -> dict[str, dict[str, int]]:
    """InterPodAffinity's score sums, pod by pod (upstream's processExistingPod), as the oracle."""
    out: dict[str, dict[str, int]] = {}
    own_ns = ns_of.get(pod.namespace, {})

    def add(key, value, delta):
        out.setdefault(key, {}).setdefault(value, 0)
        out[key][value] += delta

    for node in nodes:
        labels = node.facts.labels
        for existing in node.pods.values():
            there = ns_of.get(existing.namespace, {})
            for sign, terms in (
                (1, pod.affinity.preferred_affinity),
                (-1, pod.affinity.preferred_anti_affinity),
            ):
                for t in terms:
                    if t.topology_key in labels and t.matches(existing.namespace, existing.labels, there):
                        add(t.topology_key, labels[t.topology_key], sign * t.weight)
            theirs = existing.affinity
            for weight, terms in (
                (lambda _t: 1, theirs.required_affinity),
                (lambda t: t.weight, theirs.preferred_affinity),
                (lambda t: -t.weight, theirs.preferred_anti_affinity),
            ):
                for t in terms:
                    if t.topology_key in labels and t.matches(pod.namespace, pod.labels, own_ns):
                        add(t.topology_key, labels[t.topology_key], weight(t))
    return out


def affinity_kinds() -> dict[str, dict]:
    def term(color: str, key: str) -> dict:
        return {"labelSelector": {"matchLabels": {"color": color}}, "topologyKey": key}

    def preferred(color: str, key: str, weight: int) -> list[dict]:
        return [{"weight": weight, "podAffinityTerm": term(color, key)}]

    required = "requiredDuringSchedulingIgnoredDuringExecution"
    wanted = "preferredDuringSchedulingIgnoredDuringExecution"
    return {
        "red": {"podAffinity": {wanted: preferred("red", HOST, 3)}},
        "yellow": {"podAntiAffinity": {wanted: preferred("yellow", ZONE, 5)}},
        "blue": {"podAffinity": {required: [term("blue", ZONE)]}},
        "plain": {},
    }


def test_affinity_groups_follow_placements_and_score_as_pod_by_pod():
    cache = SchedulerCache()
    for i in range(9):
        cache.set_node(node_obj(f"n{i}", f"z{i % 3}"))
    kinds = affinity_kinds()
    rng = random.Random(11)
    placed = []
    ns_of = {"ns": {"team": "a"}, "other": {}}
    for step in range(150):
        if rng.random() < 0.7 or not placed:
            color = rng.choice(list(kinds))
            pod = make_pod(
                labels={"color": color}, namespace=rng.choice(["ns", "other"]), affinity=kinds[color]
            )
            cache.assume(pod, f"n{rng.randrange(9)}")
            placed.append(pod)
        else:
            cache.remove_pod(placed.pop(rng.randrange(len(placed))).uid)
        for node in cache.nodes():
            groups = Counter((p.namespace, p.label_key) for p in node.pods.values())
            assert node.label_groups == dict(groups), f"step {step}"
            assert node.copy().scored_terms == node.scored_terms
        color = rng.choice(list(kinds))
        asker = make_pod(labels={"color": color}, affinity=kinds[color])
        view = cache.cluster_view(namespace_labels=ns_of)
        got = {k: dict(v) for k, v in topology_score(asker, view).items()}
        assert got == naive_topology_score(asker, cache.nodes(), ns_of), f"step {step}"


def test_results_by_requests_are_forgotten_when_the_node_changes():
    cache = SchedulerCache()
    cache.set_node(node_obj("n0", "z", cpu="1"))
    fit, least, balanced = NodeResourcesFitFilter(), ResourceAllocation(), BalancedAllocation()
    pod, twin = make_pod(cpu="600m"), make_pod(cpu="600m")
    assert pod.requests_id == twin.requests_id != make_pod(cpu="700m").requests_id

    def results(p):
        node = cache.node("n0")
        return fit.filter(p, node), least.score_all(p, [node], None), balanced.score_all(p, [node], None)

    empty = results(pod)
    assert empty[0] == () and results(twin) == empty and len(cache.node("n0").by_requests) == 3
    cache.assume(make_pod(cpu="500m"), "n0")  # the node's pods changed
    busy = results(twin)
    assert busy[0] == ("Insufficient cpu",) and busy[1] != empty[1] and busy[2] != empty[2]
    cache.set_node(node_obj("n0", "z", cpu="2"))  # its allocatable changed
    assert results(pod)[0] == ()
