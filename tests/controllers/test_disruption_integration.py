"""The disruption controller in-process against the real API server, on its own identity
(system:serviceaccount:kube-system:disruption-controller), beside the replicaset and deployment loops;
the test plays the kubelet (bind + Ready). Budgets over a Deployment's pods get upstream's numbers
(minAvailable and maxUnavailable, counts and percentages of the Deployment's scale), evictions spend
them (201, then 429 at zero), a recorded disruption of a pod that never goes expires after 2 minutes,
and pods with no controller make a percentage budget fail safe."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controllers.conftest import eventually, mark_ready, running

pytestmark = pytest.mark.integration

VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."


class Clock:
    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


def deployment(name: str, replicas: int) -> dict:
    labels = {"app": name}
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }


def budget(name: str, app: str, **spec: object) -> dict:
    return {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": app}}, **spec}}


def status_of(policy: client.PolicyV1Api, namespace: str, name: str) -> dict:
    pdb = policy.api_client.sanitize_for_serialization(
        policy.read_namespaced_pod_disruption_budget(name, namespace)
    )
    return pdb.get("status") or {}


def numbers(status: dict) -> tuple[int, int, int, int]:
    return (
        status.get("expectedPods", 0),
        status.get("desiredHealthy", 0),
        status.get("currentHealthy", 0),
        status.get("disruptionsAllowed", 0),
    )


async def ready_pods(v1: client.CoreV1Api, namespace: str, app: str, count: int) -> list[client.V1Pod]:
    pods = await eventually(
        lambda: (lambda items: items if len(items) == count else None)(
            v1.list_namespaced_pod(namespace, label_selector=f"app={app}").items
        ),
        what=f"{count} pods of {app}",
    )
    for pod in pods:
        mark_ready(v1, pod)
    return pods


def evict(v1: client.CoreV1Api, namespace: str, name: str) -> None:
    v1.create_namespaced_pod_eviction(
        name, namespace, {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    )


async def test_budget_numbers_and_evictions(apiserver, v1, apps, api, namespace) -> None:  # type: ignore[no-untyped-def]
    policy = client.PolicyV1Api(api)
    async with running(apiserver, "replicaset", "deployment", "disruption"):
        apps.create_namespaced_deployment(namespace, deployment("web", 3))
        pods = await ready_pods(v1, namespace, "web", 3)
        policy.create_namespaced_pod_disruption_budget(namespace, budget("min2", "web", minAvailable=2))
        await eventually(
            lambda: numbers(status_of(policy, namespace, "min2")) == (3, 2, 3, 1), what="min2 numbers"
        )
        cond = next(
            c for c in status_of(policy, namespace, "min2")["conditions"] if c["type"] == "DisruptionAllowed"
        )
        assert (cond["status"], cond["reason"]) == ("True", "SufficientPods")
        assert status_of(policy, namespace, "min2")["observedGeneration"] == 1

        # percentages are of the Deployment's scale, rounded up
        policy.patch_namespaced_pod_disruption_budget("min2", namespace, {"spec": {"minAvailable": "50%"}})
        await eventually(
            lambda: (lambda s: s.get("observedGeneration") == 2 and numbers(s) == (3, 2, 3, 1))(
                status_of(policy, namespace, "min2")
            ),
            what="50% of 3",
        )
        policy.patch_namespaced_pod_disruption_budget(
            "min2", namespace, {"spec": {"minAvailable": None, "maxUnavailable": "34%"}}
        )
        await eventually(
            lambda: numbers(status_of(policy, namespace, "min2")) == (3, 1, 3, 2), what="34% of 3"
        )
        policy.patch_namespaced_pod_disruption_budget("min2", namespace, {"spec": {"maxUnavailable": 1}})
        await eventually(lambda: numbers(status_of(policy, namespace, "min2")) == (3, 2, 3, 1), what="max 1")

        # one eviction spends the budget; the next is refused until the controller sees a new pod ready
        evict(v1, namespace, pods[0].metadata.name)
        status = status_of(policy, namespace, "min2")
        assert status["disruptionsAllowed"] == 0 and pods[0].metadata.name in status["disruptedPods"]
        with pytest.raises(ApiException) as err:
            evict(v1, namespace, pods[1].metadata.name)
        assert err.value.status == 429 and json.loads(err.value.body)["message"] == VIOLATES
        # the terminating pod leaves disruptedPods; the ReplicaSet's replacement turns ready: 1 allowed again
        await eventually(
            lambda: (
                numbers(status_of(policy, namespace, "min2")) == (3, 2, 2, 0)
                and not status_of(policy, namespace, "min2").get("disruptedPods")
            ),
            what="the evicted pod no longer counted",
        )
        fresh = await eventually(
            lambda: [
                p
                for p in v1.list_namespaced_pod(namespace, label_selector="app=web").items
                if p.metadata.deletion_timestamp is None and not p.spec.node_name
            ],
            what="the replacement pod",
        )
        mark_ready(v1, fresh[0])
        await eventually(
            lambda: numbers(status_of(policy, namespace, "min2")) == (3, 2, 3, 1), what="budget back"
        )
        evict(v1, namespace, pods[1].metadata.name)


async def test_disrupted_pods_expire(apiserver, v1, apps, api, namespace) -> None:  # type: ignore[no-untyped-def]
    policy = client.PolicyV1Api(api)
    clock = Clock()
    async with running(apiserver, "replicaset", "deployment", "disruption", disruption_clock=clock):
        apps.create_namespaced_deployment(namespace, deployment("db", 2))
        pods = await ready_pods(v1, namespace, "db", 2)
        policy.create_namespaced_pod_disruption_budget(namespace, budget("db", "db", minAvailable=1))
        await eventually(
            lambda: numbers(status_of(policy, namespace, "db")) == (2, 1, 2, 1), what="db numbers"
        )
        # an eviction the handler recorded but whose pod never went (what a failed delete leaves)
        name = pods[0].metadata.name
        status = status_of(policy, namespace, "db")
        status["disruptedPods"] = {name: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        status["disruptionsAllowed"] = 0
        policy.patch_namespaced_pod_disruption_budget_status("db", namespace, {"status": status})
        await eventually(
            lambda: numbers(status_of(policy, namespace, "db")) == (2, 1, 1, 0), what="pod not counted"
        )
        assert name in status_of(policy, namespace, "db")["disruptedPods"]
        clock.offset = timedelta(minutes=2, seconds=5)
        v1.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {"poke": "1"}}})
        await eventually(
            lambda: (
                numbers(status_of(policy, namespace, "db")) == (2, 1, 2, 1)
                and not status_of(policy, namespace, "db").get("disruptedPods")
            ),
            what="the entry expired",
        )
        events = await eventually(
            lambda: [
                e
                for e in v1.list_namespaced_event(namespace).items
                if e.reason == "NotDeleted" and e.involved_object.name == name
            ],
            what="the NotDeleted event",
        )
        assert events[0].source.component == "controllermanager"


async def test_unmanaged_pods_fail_safe_for_percentages(apiserver, v1, api, namespace) -> None:  # type: ignore[no-untyped-def]
    policy = client.PolicyV1Api(api)
    async with running(apiserver, "disruption"):
        for name in ("a", "b"):
            made = v1.create_namespaced_pod(
                namespace,
                {
                    "metadata": {"name": name, "labels": {"app": "lone"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            )
            mark_ready(v1, made)
        policy.create_namespaced_pod_disruption_budget(namespace, budget("count", "lone", minAvailable=1))
        await eventually(
            lambda: numbers(status_of(policy, namespace, "count")) == (2, 1, 2, 1), what="integer"
        )
        policy.create_namespaced_pod_disruption_budget(namespace, budget("pct", "lone", maxUnavailable="50%"))
        # unmanaged pods add nothing to the scale: nothing expected, nothing allowed; the warning is an event
        await eventually(
            lambda: numbers(status_of(policy, namespace, "pct")) == (0, 0, 2, 0), what="pct status"
        )
        await eventually(
            lambda: any(e.reason == "UnmanagedPods" for e in v1.list_namespaced_event(namespace).items),
            what="the UnmanagedPods event",
        )
        # a pod whose controller cannot be found: the sync fails safe
        v1.create_namespaced_pod(
            namespace,
            {
                "metadata": {
                    "name": "orphaned",
                    "labels": {"app": "lone"},
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "ReplicaSet",
                            "name": "gone",
                            "uid": "0000",
                            "controller": True,
                        }
                    ],
                },
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        )

        def failed() -> bool:
            conds = status_of(policy, namespace, "pct").get("conditions") or []
            return any(c["reason"] == "SyncFailed" and c["status"] == "False" for c in conds)

        await eventually(failed, what="SyncFailed")
        cond = next(
            c for c in status_of(policy, namespace, "pct")["conditions"] if c["type"] == "DisruptionAllowed"
        )
        assert cond["message"] == 'found no controllers for pod "orphaned"'


async def test_stale_disruption_target_is_reset(apiserver, v1, api, namespace) -> None:  # type: ignore[no-untyped-def]
    """A pod marked DisruptionTarget whose deletion never came (an eviction whose delete failed) has the
    condition set back to False once it is 2 minutes old."""
    made = v1.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "kept", "labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    mark_ready(v1, made)
    old = (datetime.now(UTC) - timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    v1.patch_namespaced_pod_status(
        "kept",
        namespace,
        {
            "status": {
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "EvictionByEvictionAPI",
                        "message": "Eviction API: evicting",
                        "lastTransitionTime": old,
                    }
                ]
            }
        },
    )
    async with running(apiserver, "disruption"):

        def reset() -> object:
            conds = v1.read_namespaced_pod("kept", namespace).status.conditions or []
            target = next((c for c in conds if c.type == "DisruptionTarget"), None)
            return target if target is not None and target.status == "False" else None

        target = await eventually(reset, what="DisruptionTarget False")
        assert (
            target.reason == "EvictionByEvictionAPI"
        )  # what the eviction wrote stays; only the status moved


async def test_other_controllers_through_their_scale(apiserver, v1, apps, api, namespace) -> None:  # type: ignore[no-untyped-def]
    """A pod whose controller is none of the kinds read from the caches (here a Deployment owning pods
    directly, as a StatefulSet does) is counted through the controller's scale subresource."""
    policy = client.PolicyV1Api(api)
    owner = apps.create_namespaced_deployment(namespace, deployment("direct", 4))
    ref = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "direct",
        "uid": owner.metadata.uid,
        "controller": True,
    }
    for i in range(2):
        made = v1.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": f"direct-{i}", "labels": {"app": "direct"}, "ownerReferences": [ref]},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        )
        mark_ready(v1, made)
    async with running(apiserver, "disruption"):
        policy.create_namespaced_pod_disruption_budget(
            namespace, budget("direct", "direct", maxUnavailable=1)
        )
        # expected 4 (the scale), desired 3, healthy 2: nothing may go
        await eventually(
            lambda: numbers(status_of(policy, namespace, "direct")) == (4, 3, 2, 0), what="scale of 4"
        )
        apps.patch_namespaced_deployment_scale("direct", namespace, {"spec": {"replicas": 2}})
        v1.patch_namespaced_pod("direct-0", namespace, {"metadata": {"annotations": {"poke": "1"}}})
        await eventually(
            lambda: numbers(status_of(policy, namespace, "direct")) == (2, 1, 2, 1), what="scale of 2"
        )
