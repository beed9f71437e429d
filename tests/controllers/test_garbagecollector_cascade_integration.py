"""Cascading deletion end to end: the API server's DELETE (propagationPolicy, each kind's default) and the
garbage collector (in-process, against the real server) finishing what it started.

Foreground: the owner stays, marked with `foregroundDeletion`, until every dependent whose reference
blocks owner deletion is gone; dependents that do not block are collected once it is gone. Orphan: the
dependents lose their reference to the owner and stay; then the owner goes. A dependent held by a
finalizer of the test's own is what keeps a foreground deletion waiting, so each wait is a condition the
test controls, not a race.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controllers.conftest import eventually, mark_ready, running
from tests.controllers.test_replicaset_integration import owned, replicaset

HOLD = "example.com/hold"


def gone(read: Any) -> bool:
    try:
        read()
    except ApiException as err:
        return err.status == 404
    return False


def ref(owner: client.V1ConfigMap, block: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner.metadata.name,
        "uid": owner.metadata.uid,
        "blockOwnerDeletion": block,
    }


def cm(
    v1: client.CoreV1Api, ns: str, name: str, owners: list[dict[str, Any]] | None = None, hold: bool = False
) -> client.V1ConfigMap:
    meta: dict[str, Any] = {"name": name}
    if owners:
        meta["ownerReferences"] = owners
    if hold:
        meta["finalizers"] = [HOLD]
    return v1.create_namespaced_config_map(ns, {"metadata": meta})


def release(v1: client.CoreV1Api, ns: str, name: str) -> None:
    v1.patch_namespaced_config_map(name, ns, {"metadata": {"$deleteFromPrimitiveList/finalizers": [HOLD]}})


def read_cm(v1: client.CoreV1Api, ns: str, name: str) -> client.V1ConfigMap | None:
    try:
        return v1.read_namespaced_config_map(name, ns)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


async def test_foreground_waits_for_blocking_dependents_only(apiserver, v1, namespace):
    owner = cm(v1, namespace, "owner")
    cm(v1, namespace, "blocker", [ref(owner)], hold=True)
    cm(v1, namespace, "bystander", [ref(owner, block=False)], hold=True)
    async with running(apiserver, "garbage-collector"):
        v1.delete_namespaced_config_map("owner", namespace, propagation_policy="Foreground")
        # The collector deletes every dependent; their finalizers keep them, and the blocking one keeps
        # the owner waiting.
        for name in ("blocker", "bystander"):
            await eventually(
                lambda n=name: (x := read_cm(v1, namespace, n)) and x.metadata.deletion_timestamp,
                what=f"{name} to be deleted",
            )
        waiting = read_cm(v1, namespace, "owner")
        assert waiting is not None and waiting.metadata.finalizers == ["foregroundDeletion"]
        assert waiting.metadata.deletion_timestamp is not None
        release(v1, namespace, "blocker")
        # The bystander (blockOwnerDeletion false) is still there, and does not hold the owner.
        await eventually(
            lambda: gone(lambda: v1.read_namespaced_config_map("owner", namespace)),
            what="the owner to go once its blocking dependent is gone",
        )
        assert read_cm(v1, namespace, "bystander") is not None
        release(v1, namespace, "bystander")
        await eventually(lambda: gone(lambda: v1.read_namespaced_config_map("bystander", namespace)))


async def test_a_foreground_chain_goes_from_the_leaves_up(apiserver, v1, namespace):
    a = cm(v1, namespace, "a")
    b = cm(v1, namespace, "b", [ref(a)])
    cm(v1, namespace, "c", [ref(b)], hold=True)
    async with running(apiserver, "garbage-collector"):
        v1.delete_namespaced_config_map("a", namespace, propagation_policy="Foreground")
        # b has a dependent of its own, so the collector deletes it in the foreground too.
        await eventually(
            lambda: (
                (x := read_cm(v1, namespace, "b")) and "foregroundDeletion" in (x.metadata.finalizers or [])
            ),
            what="b to wait for c in the foreground",
        )
        await eventually(
            lambda: (x := read_cm(v1, namespace, "c")) and x.metadata.deletion_timestamp, what="c deleted"
        )
        assert read_cm(v1, namespace, "a") is not None and read_cm(v1, namespace, "b") is not None
        release(v1, namespace, "c")
        for name in ("c", "b", "a"):
            await eventually(
                lambda n=name: gone(lambda: v1.read_namespaced_config_map(n, namespace)), what=f"{name} gone"
            )


async def test_orphan_releases_the_dependents_then_the_owner_goes(apiserver, v1, namespace):
    owner = cm(v1, namespace, "owner")
    other = cm(v1, namespace, "other")
    cm(v1, namespace, "only", [ref(owner)])
    cm(v1, namespace, "shared", [ref(owner), ref(other)])
    async with running(apiserver, "garbage-collector"):
        v1.delete_namespaced_config_map("owner", namespace, propagation_policy="Orphan")
        await eventually(
            lambda: gone(lambda: v1.read_namespaced_config_map("owner", namespace)), what="the owner to go"
        )
        only, shared = read_cm(v1, namespace, "only"), read_cm(v1, namespace, "shared")
        assert only is not None and not only.metadata.owner_references
        assert [r.uid for r in shared.metadata.owner_references] == [other.metadata.uid]
        assert only.metadata.deletion_timestamp is None and shared.metadata.deletion_timestamp is None


async def test_replicaset_foreground_waits_for_its_pods(apiserver, v1, apps, namespace):
    async with running(apiserver, "replicaset", "garbage-collector"):
        rs = apps.create_namespaced_replica_set(namespace, replicaset("web", 2))
        pods = await eventually(
            lambda: (p := owned(v1, namespace, rs.metadata.uid)) and len(p) == 2 and p, what="2 pods"
        )
        for pod in pods:
            mark_ready(v1, pod)  # bound: deleted gracefully, so they stay until "their kubelet" finishes
        apps.delete_namespaced_replica_set("web", namespace, propagation_policy="Foreground")
        terminating = await eventually(
            lambda: (
                (p := v1.list_namespaced_pod(namespace).items)
                and all(x.metadata.deletion_timestamp for x in p)
                and p
            ),
            what="the pods deleted",
        )
        assert len(terminating) == 2  # no replacement while the ReplicaSet is being deleted
        held = apps.read_namespaced_replica_set("web", namespace)
        assert held.metadata.deletion_timestamp is not None and held.metadata.finalizers == [
            "foregroundDeletion"
        ]
        for pod in terminating:
            v1.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
        await eventually(
            lambda: gone(lambda: apps.read_namespaced_replica_set("web", namespace)),
            what="the ReplicaSet to go after its pods",
        )


async def test_a_namespace_deleted_in_the_foreground_goes(apiserver, v1):
    name = f"c-fg-{apiserver.port}"
    v1.create_namespace({"metadata": {"name": name}})
    cm(v1, name, "content")
    async with running(apiserver, "garbage-collector"):
        v1.delete_namespace(name, propagation_policy="Foreground")
        await eventually(lambda: gone(lambda: v1.read_namespace(name)), what="the namespace to go")


async def test_a_dependent_with_another_live_owner_loses_its_reference_to_the_waiting_one(
    apiserver, v1, namespace
):
    going = cm(v1, namespace, "going", hold=True)
    staying = cm(v1, namespace, "staying")
    cm(v1, namespace, "shared", [ref(going), ref(staying)])
    async with running(apiserver, "garbage-collector"):
        v1.delete_namespaced_config_map("going", namespace, propagation_policy="Foreground")
        # Not garbage (one owner lives): upstream's collector removes its reference to the owner that
        # waits for its dependents (attemptToDeleteItem, solid and waitingForDependentsDeletion), while
        # that owner is still there (held here by the test's own finalizer).
        shared = await eventually(
            lambda: (
                (x := read_cm(v1, namespace, "shared"))
                and [r.uid for r in x.metadata.owner_references] == [staying.metadata.uid]
                and x
            ),
            what="the shared dependent to lose its reference to the owner being deleted",
        )
        assert shared.metadata.deletion_timestamp is None
        assert shared.metadata.owner_references[0].block_owner_deletion is True
        held = read_cm(v1, namespace, "going")
        assert held is not None and held.metadata.finalizers == [HOLD]  # foregroundDeletion done
        release(v1, namespace, "going")
        await eventually(
            lambda: gone(lambda: v1.read_namespaced_config_map("going", namespace)),
            what="the foreground owner to go",
        )
        assert read_cm(v1, namespace, "shared") is not None


async def test_an_owner_cycle_deleted_in_the_foreground_goes_entirely(apiserver, v1, namespace):
    """Upstream's conformance test "should not be blocked by dependency circle": pod1 owned by pod3,
    pod2 by pod1, pod3 by pod2, all blocking; a foreground delete of pod1 removes all three."""
    pods = [
        v1.create_namespaced_pod(
            namespace,
            {"metadata": {"name": f"pod{i}"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        )
        for i in (1, 2, 3)
    ]

    def owned_by(owner: client.V1Pod) -> dict[str, Any]:
        return {
            "metadata": {
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": owner.metadata.name,
                        "uid": owner.metadata.uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ]
            }
        }

    for dependent, owner in ((0, 2), (1, 0), (2, 1)):
        v1.patch_namespaced_pod(pods[dependent].metadata.name, namespace, owned_by(pods[owner]))
    async with running(apiserver, "garbage-collector"):
        v1.delete_namespaced_pod(
            "pod1",
            namespace,
            body=client.V1DeleteOptions(
                propagation_policy="Foreground",
                preconditions=client.V1Preconditions(uid=pods[0].metadata.uid),
            ),
        )
        await eventually(
            lambda: not v1.list_namespaced_pod(namespace).items, timeout=30, what="all three pods to go"
        )
