"""Object and External metric arithmetic as upstream's replica calculator (getUsageRatioReplicaCount,
Get*PerPodMetricReplicas) and the selectors the metrics clients send."""

from __future__ import annotations

import pytest

from controlplane.controllers.podautoscaler.controller import _go_selector
from controlplane.controllers.podautoscaler.custommetrics import selector_string
from controlplane.controllers.podautoscaler.replicas import (
    ReplicaError,
    per_pod_replicas,
    usage_ratio_replicas,
)


def _pod(phase: str, ready: str) -> dict:
    return {
        "metadata": {"name": "p"},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]},
    }


def test_usage_ratio_counts_ready_running_pods_only() -> None:
    pods = [
        _pod("Running", "True"),
        _pod("Running", "False"),
        _pod("Pending", "True"),
        _pod("Running", "True"),
    ]
    assert usage_ratio_replicas(4, 1.5, pods) == 3  # 1.5 x 2 ready
    assert usage_ratio_replicas(4, 1.05, pods) == 4  # within the tolerance
    assert usage_ratio_replicas(0, 2.2, []) == 3  # from zero: the ratio alone
    with pytest.raises(ReplicaError, match="unable to calculate ready pods: no pods returned by selector"):
        usage_ratio_replicas(2, 3.0, [])


def test_per_pod_targets() -> None:
    assert per_pod_replicas(3, 9000, 3000) == (3, 3000)  # on target: unchanged
    assert per_pod_replicas(2, 9000, 1000) == (9, 4500)
    assert per_pod_replicas(4, 4100, 1000) == (4, 1025)  # 2.5 % off: within the tolerance


def test_selectors() -> None:
    sel = {
        "matchLabels": {"b": "2", "a": "1"},
        "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "dev"]},
            {"key": "x", "operator": "DoesNotExist"},
        ],
    }
    assert selector_string(sel) == "a=1,b=2,env in (dev,prod),!x"
    assert selector_string(None) == ""
    assert _go_selector(None) == "nil"
    assert _go_selector({"matchLabels": {"q": "w"}}).startswith(
        "&LabelSelector{MatchLabels:map[string]string{q: w,}"
    )
