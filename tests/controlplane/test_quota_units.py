"""The pure parts of quota: resource arithmetic in upstream's formats, a pod's requests with init and
sidecar containers, which pods count and which scopes match, and CheckRequest's charges and refusals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controlplane.apiserver.quota.check import QuotaRefused, Write, check_request
from controlplane.apiserver.quota.limitranger import aggregate, ratio_constraint
from controlplane.quota import resources as rl
from controlplane.quota.evaluators import (
    PodEvaluator,
    ServiceEvaluator,
    counts,
    evaluator_for,
    evaluators_for,
)
from controlplane.quota.podresources import is_best_effort, pod_resources
from kubeclient.quantity import Quantity


def container(name: str, cpu: str = "", restart: str = "") -> dict:
    c: dict = {"name": name}
    if cpu:
        c["resources"] = {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
    if restart:
        c["restartPolicy"] = restart
    return c


def test_add_takes_the_format_of_a_non_zero_first_operand() -> None:
    total = rl.add(rl.parse({"memory": "0"}), rl.parse({"memory": "256Mi"}))
    assert rl.dump(total) == {"memory": "256Mi"}
    assert rl.dump(rl.add(total, rl.parse({"memory": "268435456"}))) == {"memory": "512Mi"}
    assert rl.pretty(rl.parse({"requests.cpu": "0.5", "pods": "1"})) == "pods=1,requests.cpu=500m"


def test_pod_requests_with_init_and_sidecar_containers() -> None:
    pod = {
        "spec": {
            "containers": [container("a", "100m"), container("b", "200m")],
            "initContainers": [container("side", "50m", "Always"), container("big", "1")],
            "overhead": {"cpu": "10m"},
        }
    }
    # max(300m + 50m sidecar, 1 + 50m beside it) + 10m overhead
    assert str(pod_resources(pod, "requests")["cpu"]) == "1060m"
    assert not is_best_effort(pod)
    assert is_best_effort(
        {"spec": {"containers": [{"name": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}
    )


def test_terminal_and_long_terminating_pods_do_not_count() -> None:
    assert counts({"status": {"phase": "Running"}})
    assert not counts({"status": {"phase": "Succeeded"}})
    past = (datetime.now(UTC) - timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert not counts({"metadata": {"deletionTimestamp": past, "deletionGracePeriodSeconds": 30}})
    assert PodEvaluator().usage({"status": {"phase": "Failed"}}) == {"count/pods": rl.ONE}


def test_priority_class_selector() -> None:
    ev = PodEvaluator()
    pod = {"spec": {"priorityClassName": "high"}}
    assert ev.scope_matches({"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}, pod)
    assert not ev.scope_matches({"scopeName": "PriorityClass", "operator": "NotIn", "values": ["high"]}, pod)
    assert ev.scope_matches(
        {"scopeName": "PriorityClass", "operator": "NotIn", "values": ["high"]}, {"spec": {}}
    )
    assert ev.scope_matches({"scopeName": "PriorityClass", "operator": "DoesNotExist"}, {"spec": {}})


def quota(hard: dict, used: dict, name: str = "q", **spec: object) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {"hard": hard, **spec},
        "status": {"hard": hard, "used": used},
    }


def test_update_is_charged_the_difference() -> None:
    ev = ServiceEvaluator()
    old = {"metadata": {"resourceVersion": "5"}, "spec": {"type": "ClusterIP", "ports": [{"port": 1}]}}
    new = {"metadata": {"resourceVersion": "5"}, "spec": {"type": "NodePort", "ports": [{"port": 1}]}}
    q = quota({"services": "1", "services.nodeports": "1"}, {"services": "1", "services.nodeports": "0"})
    (charged,) = check_request([q], Write("UPDATE", "", new, old), ev)
    assert charged is not None and rl.dump(charged) == {"services": "1", "services.nodeports": "1"}
    # Unchanged usage costs nothing, even at the limit.
    (same,) = check_request([q], Write("UPDATE", "", old, old), ev)
    assert same is None


def test_refusals() -> None:
    ev = PodEvaluator()
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}, {"name": "d"}]}}
    with pytest.raises(QuotaRefused, match="^failed quota: q: must specify requests.cpu for: c,d$"):
        check_request(
            [quota({"requests.cpu": "1"}, {"requests.cpu": "0"})], Write("CREATE", "", pod, None), ev
        )
    with pytest.raises(QuotaRefused, match="^status unknown for quota: q, resources: pods$"):
        check_request([quota({"pods": "1"}, {})], Write("CREATE", "", pod, None), ev)
    scoped = quota({"pods": "0"}, {"pods": "0"}, scopes=["Terminating"])
    assert check_request([scoped], Write("CREATE", "", pod, None), ev) == [None]


def test_evaluators_for_hard_names() -> None:
    keys = {k for k, _ in evaluators_for(["pods", "count/deployments.apps", "requests.storage", "secrets"])}
    assert keys == {("", "pods"), ("apps", "deployments"), ("", "persistentvolumeclaims"), ("", "secrets")}
    assert evaluator_for("", "events") is None


def test_limit_ranger_texts() -> None:
    req, lim = {"cpu": Quantity.parse("300m")}, {"cpu": Quantity.parse("1")}
    assert ratio_constraint("Container", "cpu", Quantity.parse("2"), req, lim) == (
        "cpu max limit to request ratio per Container is 2, but provided ratio is 3.333333"
    )
    assert aggregate(["a", "b", "a"]) == "[a, b]" and aggregate(["a", "a"]) == "a"
