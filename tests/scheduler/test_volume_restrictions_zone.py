"""VolumeRestrictions and VolumeZone on hand-built nodes, against upstream 1.32's rules and texts
(pkg/scheduler/framework/plugins/volumerestrictions and volumezone)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from controlplane.scheduler.algorithm import FitError, schedule
from controlplane.scheduler.filters import default_filters
from controlplane.scheduler.framework import ClusterView
from controlplane.scheduler.preemption import preempt
from controlplane.scheduler.volumerestrictions import (
    DISK_CONFLICT,
    RWOP_CONFLICT,
    VolumeRestrictions,
    disks_conflict,
)
from controlplane.scheduler.volumezone import ZONE_CONFLICT, VolumeZone
from tests.scheduler.helpers import make_node, make_pod
from tests.scheduler.test_volumebinding import Store

ZONE = "topology.kubernetes.io/zone"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"


def view(nodes):
    return ClusterView(len(nodes), Counter(), nodes, {})


def claim(name, modes=("ReadWriteOnce",), volume="", cls=""):
    spec = {"accessModes": list(modes), "volumeName": volume}
    if cls:
        spec["storageClassName"] = cls
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def with_claims(*names, **kw):
    return make_pod(volumes=[{"name": n, "persistentVolumeClaim": {"claimName": n}} for n in names], **kw)


def with_volume(source, body, **kw):
    return make_pod(volumes=[{"name": "v", source: body}], **kw)


@pytest.mark.parametrize(
    ("source", "mine", "theirs", "conflict"),
    [
        ("gcePersistentDisk", {"pdName": "d"}, {"pdName": "d"}, True),
        ("gcePersistentDisk", {"pdName": "d", "readOnly": True}, {"pdName": "d", "readOnly": True}, False),
        ("gcePersistentDisk", {"pdName": "d", "readOnly": True}, {"pdName": "d"}, True),
        ("gcePersistentDisk", {"pdName": "d"}, {"pdName": "e"}, False),
        (
            "awsElasticBlockStore",
            {"volumeID": "v", "readOnly": True},
            {"volumeID": "v", "readOnly": True},
            True,
        ),
        ("iscsi", {"iqn": "q", "readOnly": True}, {"iqn": "q", "readOnly": True}, False),
        ("iscsi", {"iqn": "q"}, {"iqn": "q", "readOnly": True}, True),
        (
            "rbd",
            {"monitors": ["a", "b"], "image": "i"},
            {"monitors": ["b"], "image": "i", "pool": "rbd"},
            True,
        ),
        ("rbd", {"monitors": ["a"], "image": "i"}, {"monitors": ["b"], "image": "i"}, False),
        ("rbd", {"monitors": ["a"], "image": "i", "pool": "p"}, {"monitors": ["a"], "image": "i"}, False),
    ],
)
def test_disk_conflicts(source, mine, theirs, conflict):
    assert disks_conflict({source: mine}, {source: theirs}) is conflict
    node = make_node("n")
    node.add_pod(with_volume(source, theirs))
    plugin = VolumeRestrictions(Store(namespaced=True))
    pod = with_volume(source, mine)
    assert plugin.applies(pod) and plugin.pre_filter(pod) is None
    plugin.prepare(pod, view([node]))
    assert plugin.filter(pod, node) == ((DISK_CONFLICT,) if conflict else ())


def test_read_write_once_pod_claim_in_use_rejects_every_node_until_its_pod_goes():
    claims = Store(claim("solo", ("ReadWriteOncePod",)), claim("shared", ("ReadWriteMany",)), namespaced=True)
    plugin = VolumeRestrictions(claims)
    holder, other = make_node("holder"), make_node("other")
    owner = with_claims("solo", "shared", name="owner")
    holder.add_pod(owner)
    pod = with_claims("solo")
    assert plugin.pre_filter(pod) is None
    plugin.prepare(pod, view([holder, other]))
    assert [plugin.filter(pod, n) for n in (holder, other)] == [(RWOP_CONFLICT,)] * 2
    # A ReadWriteMany claim in use is no conflict.
    shared = with_claims("shared")
    plugin.pre_filter(shared)
    plugin.prepare(shared, view([holder, other]))
    assert plugin.filter(shared, other) == ()
    holder.remove_pod(owner.uid)
    plugin.pre_filter(pod)
    plugin.prepare(pod, view([holder, other]))
    assert plugin.filter(pod, holder) == ()


def test_missing_claim_is_upstreams_prefilter_text_with_the_preemption_verdict():
    nodes = [make_node("a"), make_node("b")]
    filters = default_filters(VolumeRestrictions(Store(namespaced=True)))
    with pytest.raises(FitError) as caught:
        schedule(with_claims("gone"), nodes, filters, [], view(nodes), random.Random(1))
    err = caught.value
    assert err.plugins == {"VolumeRestrictions"}
    err.post_filter = "preemption: " + preempt(with_claims("gone"), err.reasons, filters, view(nodes)).message
    assert str(err) == (
        '0/2 nodes are available: persistentvolumeclaim "gone" not found. '
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.."
    )


def test_preemption_frees_a_read_write_once_pod_claim():
    claims = Store(claim("solo", ("ReadWriteOncePod",)), namespaced=True)
    restrictions = VolumeRestrictions(claims)
    filters = default_filters(restrictions)
    holder, other = make_node("holder"), make_node("other")
    holder.add_pod(with_claims("solo", name="low", priority=1))
    pod = with_claims("solo", priority=100)
    nodes = [holder, other]
    with pytest.raises(FitError) as caught:
        schedule(pod, nodes, filters, [], view(nodes), random.Random(1))
    assert str(caught.value) == f"0/2 nodes are available: 2 {RWOP_CONFLICT}."
    outcome = preempt(pod, caught.value.reasons, filters, view(nodes))
    assert outcome.candidate is not None
    assert outcome.candidate.node.name == "holder"
    assert [v.name for v in outcome.candidate.victims] == ["low"]


def zone_plugin(pv_labels, cls_mode="WaitForFirstConsumer"):
    claims = Store(
        claim("bound", volume="pv"),
        claim("later", cls="wffc"),
        claim("nopv", volume="ghost"),
        namespaced=True,
    )
    volumes = Store({"metadata": {"name": "pv", "labels": pv_labels}, "spec": {}})
    classes = Store({"metadata": {"name": "wffc"}, "volumeBindingMode": cls_mode})
    return VolumeZone(claims, volumes, classes)


@pytest.mark.parametrize(
    ("pv_labels", "node_labels", "fits"),
    [
        ({ZONE: "z1"}, {ZONE: "z1"}, True),
        ({ZONE: "z1"}, {ZONE: "z2"}, False),
        ({ZONE: "z1__z2"}, {ZONE: "z2"}, True),
        ({ZONE: "z1"}, {}, True),  # a node without zone labels: single-zone cluster
        ({ZONE: "z1"}, {"topology.kubernetes.io/region": "r"}, False),  # has a label, not the zone
        ({BETA_ZONE: "z1"}, {ZONE: "z1"}, True),  # the beta key found under its GA name
        ({ZONE: "z1"}, {BETA_ZONE: "z1"}, False),  # not the other way round
        ({ZONE: "z1__"}, {ZONE: "z9"}, True),  # an empty zone in the list: the label is ignored
        ({}, {ZONE: "z1"}, True),
    ],
)
def test_volume_zone(pv_labels, node_labels, fits):
    plugin = zone_plugin(pv_labels)
    pod = with_claims("bound", "later")
    node = make_node("n", labels=node_labels)
    assert plugin.pre_filter(pod) is None
    assert plugin.filter(pod, node) == (() if fits else (ZONE_CONFLICT,))


def test_volume_zone_prefilter_texts():
    plugin = zone_plugin({ZONE: "z1"})
    assert plugin.pre_filter(with_claims("missing")) == 'persistentvolumeclaim "missing" not found'
    assert plugin.pre_filter(with_claims("nopv")) == 'persistentvolume "ghost" not found'
    immediate = zone_plugin({}, cls_mode="Immediate")
    assert immediate.pre_filter(with_claims("later")) == "PersistentVolume had no name"


def test_volume_zone_conflict_is_not_for_preemption():
    plugin = zone_plugin({ZONE: "z1"})
    nodes = [make_node("a", labels={ZONE: "z2"}), make_node("b", labels={ZONE: "z3"})]
    filters = default_filters(plugin)
    pod = with_claims("bound", priority=100)
    with pytest.raises(FitError) as caught:
        schedule(pod, nodes, filters, [], view(nodes), random.Random(1))
    outcome = preempt(pod, caught.value.reasons, filters, view(nodes))
    assert f"{caught.value} preemption: {outcome.message}" == (
        f"0/2 nodes are available: 2 {ZONE_CONFLICT}. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
