"""Every filter reason and FailedScheduling text this scheduler writes, pinned to upstream 1.32's string
(the file each comes from in kubernetes/kubernetes is named beside it), each produced by the plugin in a
situation that makes upstream's plugin say it, then the message assembly: "0/N nodes are available:"
with "<count> <reason>" sorted as strings, a PreFilter verdict, nodes a PreFilter left out, and the
"preemption: ..." suffix."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from controlplane.scheduler.algorithm import FitError, schedule
from controlplane.scheduler.filters import default_filters
from controlplane.scheduler.filters.inter_pod_affinity import InterPodAffinityFilter
from controlplane.scheduler.framework import ClusterView
from controlplane.scheduler.preemption import preempt
from tests.scheduler.helpers import make_node, make_pod

PLUGINS = "pkg/scheduler/framework/plugins"
HOST = "kubernetes.io/hostname"


def fails(pod, nodes, filters=None) -> str:
    """The FitError text of one decision (upstream's FitError.Error, pkg/scheduler/framework/types.go)."""
    filters = default_filters() if filters is None else filters
    view = ClusterView(len(nodes), Counter(), nodes)
    with pytest.raises(FitError) as err:
        schedule(pod, nodes, filters, [], view, random.Random(0))
    return str(err.value)


def one(reason: str) -> str:
    return f"0/1 nodes are available: 1 {reason}."


def hosts(*names: str, **labels: str):
    return [make_node(n, labels={HOST: n, **labels}) for n in names]


def placed(node, **kwargs):
    pod = make_pod(**kwargs)
    node.add_pod(pod)
    return node


def anti(key: str = HOST, app: str = "web") -> dict:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def spread() -> list[dict]:
    return [
        {
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]


def name_affinity(*names: str) -> dict:
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(names)}]}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


# (upstream text, upstream file, the situation) -- the situation's FitError must be exactly one node
# rejected with that text.
CASES: list[tuple[str, str, Callable[[], str]]] = [
    (
        "node(s) were unschedulable",
        f"{PLUGINS}/nodeunschedulable/node_unschedulable.go",
        lambda: fails(make_pod(), [make_node(unschedulable=True)]),
    ),
    (
        "node(s) didn't match the requested node name",
        f"{PLUGINS}/nodename/node_name.go",
        lambda: fails(make_pod(nodeName="other"), [make_node("n")]),
    ),
    (
        "node(s) had untolerated taint {dedicated: gpu}",
        f"{PLUGINS}/tainttoleration/taint_toleration.go",
        lambda: fails(
            make_pod(), [make_node(taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])]
        ),
    ),
    (
        "node(s) didn't match Pod's node affinity/selector",
        f"{PLUGINS}/nodeaffinity/node_affinity.go",
        lambda: fails(make_pod(nodeSelector={"disk": "ssd"}), [make_node()]),
    ),
    (
        "node(s) didn't have free ports for the requested pod ports",
        f"{PLUGINS}/nodeports/node_ports.go",
        lambda: fails(
            make_pod(ports=[{"containerPort": 80, "hostPort": 80}]),
            [placed(make_node(), ports=[{"containerPort": 80, "hostPort": 80}])],
        ),
    ),
    ("Insufficient cpu", f"{PLUGINS}/noderesources/fit.go", lambda: fails(make_pod(cpu="8"), [make_node()])),
    (
        "Insufficient memory",
        f"{PLUGINS}/noderesources/fit.go",
        lambda: fails(make_pod(memory="9Gi"), [make_node()]),
    ),
    (
        "Insufficient example.com/gpu",
        f"{PLUGINS}/noderesources/fit.go",
        lambda: fails(
            make_pod(
                containers=[{"name": "c", "resources": {"requests": {"example.com/gpu": "2"}}}],
            ),
            [make_node(extra={"example.com/gpu": "1"})],
        ),
    ),
    ("Too many pods", f"{PLUGINS}/noderesources/fit.go", lambda: fails(make_pod(), [make_node(pods=0)])),
    (
        "node(s) didn't match pod topology spread constraints (missing required label)",
        f"{PLUGINS}/podtopologyspread/filtering.go",
        lambda: fails(make_pod(topologySpreadConstraints=spread(), labels={"app": "web"}), hosts("a")),
    ),
    (
        "node(s) didn't match pod affinity rules",
        f"{PLUGINS}/interpodaffinity/filtering.go",
        # no pod anywhere matches the term (and the pod does not match it itself)
        lambda: fails(
            make_pod(
                affinity={
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOST}
                        ]
                    }
                }
            ),
            hosts("a"),
        ),
    ),
]


@pytest.mark.parametrize(("text", "source", "situation"), CASES, ids=[c[0][:40] for c in CASES])
def test_filter_reason_is_upstreams(text: str, source: str, situation: Callable[[], str]) -> None:
    assert situation() == one(text), source


def test_inter_pod_affinity_texts() -> None:
    """pkg/scheduler/framework/plugins/interpodaffinity/filtering.go: the three reasons."""
    # The incoming pod's own anti-affinity against the app=web pod of node a.
    nodes = [placed(hosts("a")[0], labels={"app": "web"})]
    message = fails(make_pod(affinity=anti()), nodes, [InterPodAffinityFilter()])
    assert message == one("node(s) didn't match pod anti-affinity rules")
    # The placed pod's anti-affinity against the incoming app=web pod.
    a, _ = hosts("a", "b")
    placed(a, labels={"app": "db"}, affinity=anti())
    message = fails(make_pod(labels={"app": "web"}), [a], [InterPodAffinityFilter()])
    assert message == one("node(s) didn't satisfy existing pods anti-affinity rules")


def test_pod_topology_spread_skew_text() -> None:
    """pkg/scheduler/framework/plugins/podtopologyspread/filtering.go: maxSkew broken in zone a, while
    zone b (empty, its node tainted but counted under the default nodeTaintsPolicy Ignore) is the minimum."""
    za = placed(make_node("a", labels={"zone": "a"}), labels={"app": "web"})
    zb = make_node("b", labels={"zone": "b"}, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])
    pod = make_pod(topologySpreadConstraints=spread(), labels={"app": "web"})
    assert fails(pod, [za, zb]) == (
        "0/2 nodes are available: 1 node(s) didn't match pod topology spread constraints, "
        "1 node(s) had untolerated taint {k: v}."
    )


def test_pre_filter_verdict_and_node_affinity_names() -> None:
    """pkg/scheduler/framework/types.go (FitError) with pkg/scheduler/schedule_one.go: a PreFilter
    verdict stands alone; nodes NodeAffinity's PreFilter left out (matchFields metadata.name, as a
    DaemonSet's pod) are `node(s) didn't satisfy plugin(s) [NodeAffinity]`; names that conflict are
    nodeaffinity/node_affinity.go's `pod affinity terms conflict`."""
    nodes = hosts("a", "b", "c")
    full = fails(make_pod(cpu="8", affinity=name_affinity("a")), nodes)
    assert (
        full
        == "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )
    gone = fails(make_pod(affinity=name_affinity("z")), nodes)
    assert gone == "0/3 nodes are available: 3 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    terms = name_affinity("a")
    terms["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchFields"
    ].append({"key": "metadata.name", "operator": "In", "values": ["b"]})
    assert fails(make_pod(affinity=terms), nodes) == "0/3 nodes are available: pod affinity terms conflict."


def test_preemption_suffix_for_left_out_nodes() -> None:
    """pkg/scheduler/framework/preemption/preemption.go: nodes a PreFilter left out or rejected as
    unresolvable are `Preemption is not helpful for scheduling`; a node short of cpu with nothing of lower
    priority on it is `No preemption victims found for incoming pod`."""
    nodes = hosts("a", "b", "c")
    pod = make_pod(cpu="8", affinity=name_affinity("a"))
    view = ClusterView(3, Counter(), nodes)
    with pytest.raises(FitError) as err:
        schedule(pod, nodes, default_filters(), [], view, random.Random(0))
    outcome = preempt(pod, err.value.reasons, default_filters(), view)
    assert outcome.candidate is None
    assert outcome.message == (
        "0/3 nodes are available: 1 No preemption victims found for incoming pod, "
        "2 Preemption is not helpful for scheduling."
    )
    err.value.post_filter = f"preemption: {outcome.message}"
    assert str(err.value) == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]. "
        "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, "
        # FitError.Error appends each part as " %v." (pkg/scheduler/framework/types.go): the preemption
        # part's own period and the separator's make kube-scheduler's "..".
        "2 Preemption is not helpful for scheduling.."
    )


def test_volume_texts_are_upstreams() -> None:
    """The volume plugins' reasons, as constants: each is produced in its own test module
    (test_volumebinding.py, test_volume_restrictions_zone.py, test_volumelimits.py)."""
    from controlplane.scheduler import volumebinding, volumelimits, volumerestrictions, volumezone

    table = [
        # pkg/scheduler/framework/plugins/volumebinding/binder.go
        (volumebinding.NODE_CONFLICT, "node(s) had volume node affinity conflict"),
        (volumebinding.BIND_CONFLICT, "node(s) didn't find available persistent volumes to bind"),
        (volumebinding.NOT_ENOUGH_SPACE, "node(s) did not have enough free storage"),
        (
            volumebinding.PV_NOT_EXIST,
            "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)",
        ),
        # pkg/scheduler/framework/plugins/volumebinding/volume_binding.go
        (volumebinding.UNBOUND_IMMEDIATE, "pod has unbound immediate PersistentVolumeClaims"),
        # pkg/scheduler/framework/plugins/volumerestrictions/volume_restrictions.go
        (volumerestrictions.DISK_CONFLICT, "node(s) had no available disk"),
        (
            volumerestrictions.RWOP_CONFLICT,
            "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode",
        ),
        # pkg/scheduler/framework/plugins/nodevolumelimits/csi.go
        (volumelimits.MAX_VOLUME_COUNT, "node(s) exceed max volume count"),
        # pkg/scheduler/framework/plugins/volumezone/volume_zone.go
        (volumezone.ZONE_CONFLICT, "node(s) had no available volume zone"),
    ]
    for ours, upstream in table:
        assert ours == upstream
