"""Field managers and event reporters mapped to the components a person knows."""

from __future__ import annotations

import pytest

from journey.writers import component, event_reporter


@pytest.mark.parametrize(
    ("manager", "lane"),
    [
        ("kube-controller-manager", "kube-controller-manager"),
        ("deployment-controller", "kube-controller-manager"),
        ("endpointslice-controller", "kube-controller-manager"),
        ("system:serviceaccount:kube-system:replicaset-controller", "kube-controller-manager"),
        ("kube-scheduler", "kube-scheduler"),
        ("default-scheduler", "kube-scheduler"),
        ("kubelet", "kubelet"),
        ("system:node:node-1", "kubelet"),
        ("kubectl-client-side-apply", "user"),
        ("kubectl-create", "user"),
        ("kubectl-edit", "user"),
        ("OpenAPI-Generator", "user"),
        ("argocd-controller", "kube-controller-manager"),
        ("my-operator", "my-operator"),
        ("", "unknown"),
    ],
)
def test_component(manager: str, lane: str) -> None:
    assert component(manager) == lane


def test_event_reporter_prefers_reporting_controller():
    assert event_reporter({"reportingController": "kubelet", "source": {"component": "x"}}) == "kubelet"
    assert event_reporter({"source": {"component": "default-scheduler"}}) == "default-scheduler"
    assert event_reporter({}) == ""
