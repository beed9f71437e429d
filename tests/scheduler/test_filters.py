"""Each filter plugin on hand-built nodes, including the exact upstream reason strings."""

from __future__ import annotations

import pytest

from controlplane.scheduler.filters import (
    NodeAffinityFilter,
    NodeNameFilter,
    NodePortsFilter,
    NodeResourcesFitFilter,
    NodeUnschedulableFilter,
    TaintTolerationFilter,
)
from controlplane.scheduler.taints import Taint, Toleration
from kubeclient.nodeaffinity import Requirement
from tests.scheduler.helpers import make_node, make_pod


def test_node_unschedulable():
    f = NodeUnschedulableFilter()
    assert f.filter(make_pod(), make_node(unschedulable=True)) == ("node(s) were unschedulable",)
    assert f.filter(make_pod(), make_node()) == ()
    tolerant = make_pod(
        tolerations=[
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
        ]
    )
    assert f.filter(tolerant, make_node(unschedulable=True)) == ()


def test_node_name():
    f = NodeNameFilter()
    assert not f.applies(make_pod())
    pinned = make_pod(nodeName="a")
    assert f.filter(pinned, make_node("a")) == ()
    assert f.filter(pinned, make_node("b")) == ("node(s) didn't match the requested node name",)


def test_resources_fit_counts_every_shortfall_in_order():
    f = NodeResourcesFitFilter()
    node = make_node(cpu="1", memory="1Gi", pods=1)
    node.add_pod(make_pod(cpu="500m", memory="512Mi"))
    assert f.filter(make_pod(cpu="400m", memory="256Mi"), node) == ("Too many pods",)
    node2 = make_node(cpu="1", memory="1Gi", pods=10)
    node2.add_pod(make_pod(cpu="500m", memory="512Mi"))
    assert f.filter(make_pod(cpu="600m", memory="600Mi"), node2) == (
        "Insufficient cpu",
        "Insufficient memory",
    )
    assert f.filter(make_pod(cpu="500m", memory="512Mi"), node2) == ()  # exactly the rest fits


def test_resources_fit_extended_and_ephemeral():
    f = NodeResourcesFitFilter()
    node = make_node(extra={"example.com/gpu": "1", "ephemeral-storage": "1Gi"})
    gpu_pod = make_pod()
    gpu_pod.fit_checks = (("example.com/gpu", 2),)
    assert f.filter(gpu_pod, node) == ("Insufficient example.com/gpu",)
    disk = make_pod(cpu=None, memory=None)
    disk.fit_checks = (("ephemeral-storage", 2 * 2**30),)
    assert f.filter(disk, node) == ("Insufficient ephemeral-storage",)


def test_removing_a_pod_frees_its_share():
    node = make_node(cpu="1")
    p = make_pod(cpu="1")
    node.add_pod(p)
    assert NodeResourcesFitFilter().filter(make_pod(cpu="1"), node) == ("Insufficient cpu",)
    node.remove_pod(p.uid)
    assert NodeResourcesFitFilter().filter(make_pod(cpu="1"), node) == ()
    assert node.requested["cpu"] == 0 and node.nonzero_cpu == 0 and not node.ports


AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"


def required(*expressions, fields=()):
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(expressions), "matchFields": list(fields)}]
            }
        }
    }


@pytest.mark.parametrize(
    ("operator", "values", "labels", "fits"),
    [
        ("In", ["a", "b"], {"k": "a"}, True),
        ("In", ["a"], {"k": "c"}, False),
        ("In", ["a"], {}, False),
        ("NotIn", ["a"], {"k": "b"}, True),
        ("NotIn", ["a"], {}, True),
        ("NotIn", ["a"], {"k": "a"}, False),
        ("Exists", [], {"k": ""}, True),
        ("Exists", [], {}, False),
        ("DoesNotExist", [], {}, True),
        ("DoesNotExist", [], {"k": "x"}, False),
        ("Gt", ["5"], {"k": "6"}, True),
        ("Gt", ["5"], {"k": "5"}, False),
        ("Gt", ["5"], {"k": "x"}, False),
        ("Lt", ["5"], {"k": "4"}, True),
        ("Lt", ["5"], {"k": "5"}, False),
        ("Lt", ["5"], {}, False),
    ],
)
def test_node_affinity_operators(operator, values, labels, fits):
    pod = make_pod(affinity=required({"key": "k", "operator": operator, "values": values}))
    got = NodeAffinityFilter().filter(pod, make_node(labels=labels))
    assert got == (() if fits else (AFFINITY_REASON,))


def test_node_affinity_terms_are_ored_and_empty_term_matches_nothing():
    f = NodeAffinityFilter()
    two_terms = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
                    {"matchExpressions": [{"key": "b", "operator": "Exists"}]},
                ]
            }
        }
    }
    assert f.filter(make_pod(affinity=two_terms), make_node(labels={"b": "1"})) == ()
    empty = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}
    assert f.filter(make_pod(affinity=empty), make_node()) == (AFFINITY_REASON,)


def test_node_selector_and_match_fields():
    f = NodeAffinityFilter()
    assert f.filter(make_pod(nodeSelector={"a": "1"}), make_node(labels={"a": "1", "b": "2"})) == ()
    assert f.filter(make_pod(nodeSelector={"a": "1"}), make_node(labels={"a": "2"})) == (AFFINITY_REASON,)
    by_name = make_pod(
        affinity=required(fields=[{"key": "metadata.name", "operator": "In", "values": ["n1"]}])
    )
    assert f.filter(by_name, make_node("n1")) == ()
    assert f.filter(by_name, make_node("n2")) == (AFFINITY_REASON,)
    assert Requirement("metadata.name", "Exists", ()).matches({"metadata.name": "n"})  # label semantics
    not_supported = make_pod(affinity=required(fields=[{"key": "metadata.name", "operator": "Exists"}]))
    assert f.filter(not_supported, make_node("n1")) == (AFFINITY_REASON,)


def test_taints_and_tolerations():
    f = TaintTolerationFilter()
    node = make_node(
        taints=[
            {"key": "soft", "effect": "PreferNoSchedule"},
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            {"key": "evict", "effect": "NoExecute"},
        ]
    )
    assert f.filter(make_pod(), node) == ("node(s) had untolerated taint {dedicated: gpu}",)
    only_gpu = make_pod(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu"}])
    assert f.filter(only_gpu, node) == ("node(s) had untolerated taint {evict: }",)
    everything = make_pod(tolerations=[{"operator": "Exists"}])
    assert f.filter(everything, node) == ()


@pytest.mark.parametrize(
    ("toleration", "tolerates"),
    [
        (Toleration("k", "Equal", "v", "NoSchedule"), True),
        (Toleration("k", "Equal", "v", ""), True),
        (Toleration("k", "Equal", "w", "NoSchedule"), False),
        (Toleration("k", "Exists", "", "NoSchedule"), True),
        (Toleration("k", "Exists", "", "NoExecute"), False),
        (Toleration("", "Exists", "", ""), True),
        (Toleration("other", "Exists", "", ""), False),
        (Toleration("k", "Lt", "v", ""), False),
    ],
)
def test_toleration_matching(toleration, tolerates):
    assert toleration.tolerates(Taint("k", "v", "NoSchedule")) is tolerates


def test_node_ports():
    f = NodePortsFilter()
    node = make_node()
    node.add_pod(make_pod(ports=[{"containerPort": 80, "hostPort": 8080}]))
    reason = ("node(s) didn't have free ports for the requested pod ports",)
    assert f.filter(make_pod(ports=[{"containerPort": 1, "hostPort": 8080}]), node) == reason
    assert f.filter(make_pod(ports=[{"containerPort": 1, "hostPort": 8080, "protocol": "UDP"}]), node) == ()
    assert f.filter(make_pod(ports=[{"containerPort": 1, "hostPort": 8081}]), node) == ()
    specific = make_node()
    specific.add_pod(make_pod(ports=[{"containerPort": 80, "hostPort": 9000, "hostIP": "10.0.0.1"}]))
    assert (
        f.filter(make_pod(ports=[{"containerPort": 1, "hostPort": 9000, "hostIP": "10.0.0.2"}]), specific)
        == ()
    )
    assert f.filter(make_pod(ports=[{"containerPort": 1, "hostPort": 9000}]), specific) == reason
    assert not f.applies(make_pod())
