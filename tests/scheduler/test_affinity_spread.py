"""InterPodAffinity and PodTopologySpread on hand-built nodes: the filters' verdicts and messages, the
scores, the bad-input paths (upstream's behaviour, pkg/scheduler/framework/plugins)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from controlplane.scheduler.algorithm import FitError, schedule
from controlplane.scheduler.filters import InterPodAffinityFilter, PodTopologySpreadFilter, default_filters
from controlplane.scheduler.filters.inter_pod_affinity import (
    AFFINITY_REASON,
    ANTI_AFFINITY_REASON,
    EXISTING_ANTI_AFFINITY_REASON,
)
from controlplane.scheduler.filters.pod_topology_spread import MISSING_LABEL_REASON, REASON
from controlplane.scheduler.framework import ClusterView
from controlplane.scheduler.scores import InterPodAffinityScore
from tests.scheduler.helpers import make_node, make_pod

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def nodes_in_zones(*zones: str):
    return [make_node(f"n{i}", labels={HOST: f"n{i}", ZONE: z}) for i, z in enumerate(zones)]


def view(nodes, ns_labels=None):
    return ClusterView(len(nodes), Counter(), nodes, ns_labels or {})


def term(key=HOST, **selector):
    return {"labelSelector": {"matchLabels": selector}, "topologyKey": key}


def verdicts(plugin, pod, nodes, ns_labels=None):
    plugin.prepare(pod, view(nodes, ns_labels))
    return [plugin.filter(pod, n) for n in nodes]


def anti(*terms):
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def test_required_anti_affinity_keeps_replicas_apart_and_the_message_is_upstreams():
    nodes = nodes_in_zones("a", "b")
    affinity = anti(term(app="web"))
    for n in nodes:
        n.add_pod(make_pod(labels={"app": "web"}, affinity=affinity))
    pod = make_pod(labels={"app": "web"}, affinity=affinity)
    with pytest.raises(FitError) as err:
        schedule(pod, nodes, default_filters(), [], view(nodes), random.Random(1))
    # Its own anti-affinity is checked before the placed pods': that reason wins per node.
    assert str(err.value) == "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."


def test_existing_pods_anti_affinity_rejects_a_pod_without_terms():
    nodes = nodes_in_zones("a", "a", "b")
    nodes[0].add_pod(make_pod(labels={"app": "db"}, affinity=anti(term(ZONE, app="web"))))
    pod = make_pod(labels={"app": "web"})
    assert verdicts(InterPodAffinityFilter(), pod, nodes) == [
        (EXISTING_ANTI_AFFINITY_REASON,),
        (EXISTING_ANTI_AFFINITY_REASON,),
        (),
    ]
    # Another namespace is out of the term's reach (it names only its own).
    other = make_pod(labels={"app": "web"}, namespace="elsewhere")
    assert verdicts(InterPodAffinityFilter(), other, nodes) == [(), (), ()]


def test_required_affinity_colocates_and_first_pod_may_match_itself():
    nodes = nodes_in_zones("a", "b")
    nodes[1].add_pod(make_pod(labels={"app": "cache"}))
    wants_cache = {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(ZONE, app="cache")]}
    }
    pod = make_pod(labels={"app": "web"}, affinity=wants_cache)
    assert verdicts(InterPodAffinityFilter(), pod, nodes) == [(AFFINITY_REASON,), ()]
    # No cache pod anywhere: a pod matching its own term may start the group on any node with the key.
    empty = nodes_in_zones("a", "b") + [make_node("nozone", labels={HOST: "nozone"})]
    self_group = make_pod(labels={"app": "cache"}, affinity=wants_cache)
    assert verdicts(InterPodAffinityFilter(), self_group, empty) == [(), (), (AFFINITY_REASON,)]
    assert verdicts(InterPodAffinityFilter(), pod, empty) == [(AFFINITY_REASON,)] * 3


def test_namespace_selector_and_label_keys():
    nodes = nodes_in_zones("a", "b")
    nodes[0].add_pod(make_pod(labels={"app": "web", "rev": "1"}, namespace="team-a"))
    nodes[1].add_pod(make_pod(labels={"app": "web", "rev": "2"}, namespace="team-b"))
    ns_labels = {"team-a": {"team": "a"}, "team-b": {"team": "b"}, "ns": {}}
    by_team = anti({**term(app="web"), "namespaceSelector": {"matchLabels": {"team": "a"}}})
    pod = make_pod(labels={"app": "web"}, affinity=by_team)
    assert verdicts(InterPodAffinityFilter(), pod, nodes, ns_labels) == [(ANTI_AFFINITY_REASON,), ()]
    everywhere = anti({**term(app="web"), "namespaceSelector": {}})
    pod = make_pod(labels={"app": "web"}, affinity=everywhere)
    assert verdicts(InterPodAffinityFilter(), pod, nodes, ns_labels) == [(ANTI_AFFINITY_REASON,)] * 2
    # matchLabelKeys: only pods of the same revision count; mismatchLabelKeys: only other revisions.
    same_rev = anti({**term(app="web"), "namespaces": ["team-a", "team-b"], "matchLabelKeys": ["rev"]})
    pod = make_pod(labels={"app": "web", "rev": "2"}, affinity=same_rev)
    assert verdicts(InterPodAffinityFilter(), pod, nodes, ns_labels) == [(), (ANTI_AFFINITY_REASON,)]
    other_rev = anti({**term(app="web"), "namespaces": ["team-a", "team-b"], "mismatchLabelKeys": ["rev"]})
    pod = make_pod(labels={"app": "web", "rev": "2"}, affinity=other_rev)
    assert verdicts(InterPodAffinityFilter(), pod, nodes, ns_labels) == [(ANTI_AFFINITY_REASON,), ()]


def test_invalid_selector_is_a_prefilter_verdict():
    nodes = nodes_in_zones("a")
    bad = anti(
        {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Bogus"}]}, "topologyKey": HOST}
    )
    pod = make_pod(affinity=bad)
    with pytest.raises(FitError) as err:
        schedule(pod, nodes, default_filters(), [], view(nodes), random.Random(1))
    assert str(err.value).startswith("0/1 nodes are available: parsing pod: ")


def test_affinity_score_prefers_and_avoids():
    nodes = nodes_in_zones("a", "b", "c")
    nodes[0].add_pod(make_pod(labels={"app": "cache"}))
    nodes[1].add_pod(make_pod(labels={"app": "noisy"}))
    affinity = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "podAffinityTerm": term(ZONE, app="cache")}
            ]
        },
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "podAffinityTerm": term(ZONE, app="noisy")}
            ]
        },
    }
    pod = make_pod(affinity=affinity)
    plugin = InterPodAffinityScore()
    raw = plugin.score_all(pod, nodes, plugin.prepare(pod, nodes, view(nodes)))
    assert raw == [10, -5, 0]
    assert plugin.normalize(raw) == [100, 0, 33]


def spread(max_skew=1, key=ZONE, when="DoNotSchedule", **extra):
    return {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": {"app": "web"}},
        **extra,
    }


def test_spread_max_skew_across_zones():
    nodes = nodes_in_zones("a", "a", "b")
    nodes[0].add_pod(make_pod(labels={"app": "web"}))
    nodes[1].add_pod(make_pod(labels={"app": "web"}))
    pod = make_pod(labels={"app": "web"}, topologySpreadConstraints=[spread()])
    # zone a holds 2, b 0: a third pod in a would make the skew 3.
    assert verdicts(PodTopologySpreadFilter(), pod, nodes) == [(REASON,), (REASON,), ()]
    lenient = make_pod(labels={"app": "web"}, topologySpreadConstraints=[spread(max_skew=3)])
    assert verdicts(PodTopologySpreadFilter(), lenient, nodes) == [(), (), ()]


def test_spread_min_domains_and_missing_label():
    nodes = nodes_in_zones("a", "b") + [make_node("bare", labels={HOST: "bare"})]
    nodes[0].add_pod(make_pod(labels={"app": "web"}))
    nodes[1].add_pod(make_pod(labels={"app": "web"}))
    # Two zones exist but three are wanted: the global minimum counts as 0, so 1 + 1 - 0 > 1.
    pod = make_pod(labels={"app": "web"}, topologySpreadConstraints=[spread(minDomains=3)])
    assert verdicts(PodTopologySpreadFilter(), pod, nodes) == [(REASON,), (REASON,), (MISSING_LABEL_REASON,)]
    nowhere = make_pod(labels={"app": "web"}, topologySpreadConstraints=[spread(key="no-such-key")])
    with pytest.raises(FitError) as err:
        schedule(nowhere, nodes, default_filters(), [], view(nodes), random.Random(1))
    assert str(err.value) == (
        "0/3 nodes are available: 3 node(s) didn't match pod topology spread constraints (missing required label)."
    )


def test_spread_node_policies():
    nodes = nodes_in_zones("a", "b")
    nodes[1].facts = make_node(
        "n1", labels={HOST: "n1", ZONE: "b"}, taints=[{"key": "k", "effect": "NoSchedule"}]
    ).facts
    nodes[0].add_pod(make_pod(labels={"app": "web"}))
    # Ignore (default): the tainted zone b counts, holding 0, so zone a (1 + 1 - 0) is too full.
    pod = make_pod(labels={"app": "web"}, topologySpreadConstraints=[spread()])
    assert verdicts(PodTopologySpreadFilter(), pod, nodes)[0] == (REASON,)
    # Honor: the tainted zone does not count; zone a is the only domain.
    honor = make_pod(labels={"app": "web"}, topologySpreadConstraints=[spread(nodeTaintsPolicy="Honor")])
    assert verdicts(PodTopologySpreadFilter(), honor, nodes)[0] == ()


def test_replicas_share_one_term_object_and_different_terms_stay_apart():
    """Terms are interned: the InterPodAffinity plugins remember a placed term's verdict by identity
    for one decision, which only saves work when a workload's replicas hold the same object."""
    from controlplane.scheduler.affinityterms import parse_affinity

    def anti(color: str) -> dict:  # type: ignore[type-arg]
        term = {"labelSelector": {"matchLabels": {"color": color}}, "topologyKey": "kubernetes.io/hostname"}
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}

    first = parse_affinity("ns", {"color": "green"}, anti("green")).required_anti_affinity[0]
    second = parse_affinity("ns", {"color": "green"}, anti("green")).required_anti_affinity[0]
    other_ns = parse_affinity("other", {"color": "green"}, anti("green")).required_anti_affinity[0]
    other_color = parse_affinity("ns", {"color": "green"}, anti("red")).required_anti_affinity[0]
    assert first is second
    assert other_ns != first and other_color != first
    assert other_ns.namespaces == frozenset({"other"}) and first.namespaces == frozenset({"ns"})
