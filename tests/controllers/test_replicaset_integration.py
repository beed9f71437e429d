"""The ReplicaSet controller against the real API server: replicas created (slow start, events,
ownerReferences), status, replacement, scale-down order, adoption and release."""

from __future__ import annotations

import asyncio

from kubernetes import client

from tests.controllers.conftest import eventually, mark_ready, running


def replicaset(name: str, replicas: int, labels: dict[str, str] | None = None, min_ready: int = 0) -> dict:
    labels = labels or {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "minReadySeconds": min_ready,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": {**labels, "extra": "x"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }


def owned(v1: client.CoreV1Api, ns: str, rs_uid: str) -> list[client.V1Pod]:
    pods = v1.list_namespaced_pod(ns).items
    return [
        p
        for p in pods
        if any(r.uid == rs_uid and r.controller for r in p.metadata.owner_references or [])
        and not p.metadata.deletion_timestamp
    ]


async def test_replicas_are_created_owned_and_counted(apiserver, v1, apps, namespace):
    async with running(apiserver, "replicaset"):
        rs = apps.create_namespaced_replica_set(namespace, replicaset("web", 3))
        pods = await eventually(
            lambda: (p := owned(v1, namespace, rs.metadata.uid)) and len(p) == 3 and p, what="3 pods"
        )
        for pod in pods:
            assert pod.metadata.name.startswith("web-")
            assert pod.metadata.labels == {"app": "web", "extra": "x"}
            ref = pod.metadata.owner_references[0]
            assert (ref.kind, ref.name, ref.controller, ref.block_owner_deletion) == (
                "ReplicaSet",
                "web",
                True,
                True,
            )
        events = await eventually(
            lambda: (
                (
                    e := [
                        e for e in v1.list_namespaced_event(namespace).items if e.reason == "SuccessfulCreate"
                    ]
                )
                and len(e) == 3
                and e
            ),
            what="3 SuccessfulCreate events",
        )
        assert {e.message for e in events} == {f"Created pod: {p.metadata.name}" for p in pods}
        assert events[0].source.component == "replicaset-controller"
        assert events[0].involved_object.kind == "ReplicaSet"
        for pod in pods[:2]:
            mark_ready(v1, pod)
        status = await eventually(
            lambda: (
                (s := apps.read_namespaced_replica_set_status("web", namespace).status)
                and s.ready_replicas == 2
                and s
            ),
            what="status",
        )
        assert (
            status.replicas,
            status.fully_labeled_replicas,
            status.available_replicas,
            status.observed_generation,
        ) == (3, 3, 2, 1)


async def test_a_deleted_pod_is_replaced_by_a_new_one(apiserver, v1, apps, namespace):
    async with running(apiserver, "replicaset"):
        rs = apps.create_namespaced_replica_set(namespace, replicaset("web", 2))
        pods = await eventually(lambda: (p := owned(v1, namespace, rs.metadata.uid)) and len(p) == 2 and p)
        victim = pods[0]
        v1.delete_namespaced_pod(victim.metadata.name, namespace, grace_period_seconds=0)
        after = await eventually(
            lambda: (
                (p := owned(v1, namespace, rs.metadata.uid))
                and len(p) == 2
                and victim.metadata.uid not in {x.metadata.uid for x in p}
                and p
            ),
            what="replacement",
        )
        assert victim.metadata.name not in {p.metadata.name for p in after}


async def test_scale_down_deletes_unscheduled_then_unready_pods_first(apiserver, v1, apps, namespace):
    async with running(apiserver, "replicaset"):
        rs = apps.create_namespaced_replica_set(namespace, replicaset("web", 4))
        pods = await eventually(lambda: (p := owned(v1, namespace, rs.metadata.uid)) and len(p) == 4 and p)
        ready_a, ready_b, unready, unscheduled = pods
        mark_ready(v1, ready_a, "n1")
        mark_ready(v1, ready_b, "n2")
        mark_ready(v1, unready, "n3", ready=False)
        await eventually(
            lambda: apps.read_namespaced_replica_set_status("web", namespace).status.ready_replicas == 2
        )
        apps.patch_namespaced_replica_set_scale("web", namespace, {"spec": {"replicas": 2}})
        left = await eventually(
            lambda: (p := owned(v1, namespace, rs.metadata.uid)) and len(p) == 2 and p, what="scale down to 2"
        )
        assert {p.metadata.uid for p in left} == {ready_a.metadata.uid, ready_b.metadata.uid}
        assert unscheduled.metadata.name  # deleted with the unready one


async def test_orphans_are_adopted_and_mismatched_pods_released(apiserver, v1, apps, namespace):
    orphan = v1.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "orphan", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    async with running(apiserver, "replicaset"):
        rs = apps.create_namespaced_replica_set(namespace, replicaset("web", 1))
        adopted = await eventually(
            lambda: (p := owned(v1, namespace, rs.metadata.uid)) and p, what="adoption"
        )
        assert [p.metadata.uid for p in adopted] == [orphan.metadata.uid]  # adopted, none created
        v1.patch_namespaced_pod("orphan", namespace, {"metadata": {"labels": {"app": "other"}}})
        fresh = await eventually(
            lambda: (
                (p := owned(v1, namespace, rs.metadata.uid))
                and p[0].metadata.uid != orphan.metadata.uid
                and p
            ),
            what="release and replacement",
        )
        assert len(fresh) == 1
        released = v1.read_namespaced_pod("orphan", namespace)
        assert not released.metadata.owner_references


async def test_a_template_the_server_refuses_gives_replica_failure_and_backs_off(
    apiserver, v1, apps, namespace
):
    """The API server refuses every pod of this template (its priority class does not exist): the
    ReplicaSet shows ReplicaFailure with the server's message, FailedCreate events, and its attempts
    slow down (slow start: one pod per attempt; per-key backoff between attempts) instead of hammering."""
    body = replicaset("web", 5)
    body["spec"]["template"]["spec"]["priorityClassName"] = "no-such-class"
    async with running(apiserver, "replicaset"):
        apps.create_namespaced_replica_set(namespace, body)
        status = await eventually(
            lambda: (
                (s := apps.read_namespaced_replica_set_status("web", namespace).status) and s.conditions and s
            ),
            what="ReplicaFailure",
        )
        (cond,) = status.conditions
        assert (cond.type, cond.status, cond.reason) == ("ReplicaFailure", "True", "FailedCreate")
        assert "no PriorityClass with name no-such-class was found" in cond.message
        events = await eventually(
            lambda: (
                (e := [e for e in v1.list_namespaced_event(namespace).items if e.reason == "FailedCreate"])
                and e
            ),
            what="FailedCreate",
        )
        assert events[0].message.startswith("Error creating: ") and events[0].type == "Warning"
        first = events[0].count or 1
        await asyncio.sleep(3)  # a window to count attempts in (the claim is about a rate)
        again = [e for e in v1.list_namespaced_event(namespace).items if e.reason == "FailedCreate"]
        attempts = sum(e.count or 1 for e in again) - first
        # Per-key backoff doubles from 5 ms: at most ~10 further attempts fit in 3 s, one pod each
        # (slow start stops at the first failed batch), never 5 pods per attempt.
        assert attempts <= 12, f"{attempts} create attempts in 3 s"
        assert v1.list_namespaced_pod(namespace).items == []
