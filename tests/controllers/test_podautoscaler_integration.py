"""The HPA controller in-process against the real API server, on its own identity
(system:serviceaccount:kube-system:horizontal-pod-autoscaler), for what needs no metrics: a target that
does not exist (FailedGetScale), a target scaled to zero (ScalingDisabled), replicas outside
minReplicas/maxReplicas brought back through /scale (SuccessfulRescale with upstream's reasons), and a
cluster without the metrics API (FailedGetResourceMetric, the replica count left alone). Scaling on
metrics runs on the whole stack (e2e/test_top_and_hpa.py)."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.controllers.conftest import eventually, running


def _deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}
                    ]
                },
            },
        },
    }


def _hpa(name: str, target: str, minimum: int = 1, maximum: int = 3) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": minimum,
            "maxReplicas": maximum,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
                }
            ],
        },
    }


def _condition(autoscaling: client.AutoscalingV2Api, namespace: str, name: str, kind: str) -> Any:
    hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler(name, namespace)
    return next((c for c in (hpa.status.conditions or []) if c.type == kind), None)


def _events(v1: client.CoreV1Api, namespace: str, reason: str) -> list[str]:
    return [e.message for e in v1.list_namespaced_event(namespace, field_selector=f"reason={reason}").items]


async def test_a_missing_target_is_failed_get_scale(apiserver, api, v1, namespace) -> None:
    autoscaling = client.AutoscalingV2Api(api)
    autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, _hpa("h", "nothing"))
    async with running(apiserver, "horizontalpodautoscaling"):
        cond = await eventually(
            lambda: _condition(autoscaling, namespace, "h", "AbleToScale"), what="AbleToScale"
        )
    assert (cond.status, cond.reason) == ("False", "FailedGetScale")
    assert cond.message.startswith("the HPA controller was unable to get the target's current scale: ")
    assert any('deployments.apps "nothing" not found' in m for m in _events(v1, namespace, "FailedGetScale"))


async def test_replicas_outside_the_bounds_are_brought_back(apiserver, api, v1, apps, namespace) -> None:
    autoscaling = client.AutoscalingV2Api(api)
    apps.create_namespaced_deployment(namespace, _deployment("big", 5))
    apps.create_namespaced_deployment(namespace, _deployment("small", 1))
    autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, _hpa("big", "big", 1, 3))
    autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, _hpa("small", "small", 2, 4))
    async with running(apiserver, "horizontalpodautoscaling"):
        await eventually(
            lambda: apps.read_namespaced_deployment("big", namespace).spec.replicas == 3, what="big at 3"
        )
        await eventually(
            lambda: apps.read_namespaced_deployment("small", namespace).spec.replicas == 2, what="small at 2"
        )
        hpa = await eventually(
            lambda: (
                (
                    h := autoscaling.read_namespaced_horizontal_pod_autoscaler("big", namespace)
                ).status.desired_replicas
                == 3
                and h
            ),
            what="big's status",
        )
    assert hpa.status.current_replicas == 5 and hpa.status.last_scale_time is not None
    able = next(c for c in hpa.status.conditions if c.type == "AbleToScale")
    assert (able.reason, able.message) == (
        "SucceededRescale",
        "the HPA controller was able to update the target scale to 3",
    )
    messages = _events(v1, namespace, "SuccessfulRescale")
    assert "New size: 3; reason: Current number of replicas above Spec.MaxReplicas" in messages
    assert "New size: 2; reason: Current number of replicas below Spec.MinReplicas" in messages


async def test_zero_replicas_disable_scaling(apiserver, api, apps, namespace) -> None:
    autoscaling = client.AutoscalingV2Api(api)
    apps.create_namespaced_deployment(namespace, _deployment("off", 0))
    autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, _hpa("off", "off"))
    async with running(apiserver, "horizontalpodautoscaling"):
        cond = await eventually(
            lambda: _condition(autoscaling, namespace, "off", "ScalingActive"), what="ScalingActive"
        )
    assert (cond.status, cond.reason, cond.message) == (
        "False",
        "ScalingDisabled",
        "scaling is disabled since the replica count of the target is zero",
    )
    assert apps.read_namespaced_deployment("off", namespace).spec.replicas == 0


async def test_no_metrics_api_leaves_the_replicas_alone(apiserver, api, v1, apps, namespace) -> None:
    autoscaling = client.AutoscalingV2Api(api)
    apps.create_namespaced_deployment(namespace, _deployment("web", 2))
    autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, _hpa("web", "web"))
    async with running(apiserver, "horizontalpodautoscaling"):
        cond = await eventually(
            lambda: _condition(autoscaling, namespace, "web", "ScalingActive"), what="ScalingActive"
        )
        await eventually(lambda: _events(v1, namespace, "FailedComputeMetricsReplicas"), what="the event")
    assert (cond.status, cond.reason) == ("False", "FailedGetResourceMetric")
    assert cond.message.startswith(
        "the HPA was unable to compute the replica count: failed to get cpu utilization: unable to get metrics for resource cpu: "
        "unable to fetch metrics from resource metrics API: "
    )
    assert any(
        m.startswith("invalid metrics (1 invalid out of 1), first error is: failed to get cpu utilization")
        for m in _events(v1, namespace, "FailedComputeMetricsReplicas")
    )
    assert apps.read_namespaced_deployment("web", namespace).spec.replicas == 2
    printed = autoscaling.read_namespaced_horizontal_pod_autoscaler("web", namespace)
    assert printed.status.current_replicas == 2
