"""A sync costs its own object's children, not the cluster's: the controllers that every pod event wakes
read, per sync, only the pods (or ReplicaSets) of the object being synced (upstream's controllers read
them from an index by controller UID, or by node).

The density benchmark found the opposite at 300 simulated nodes: the attach/detach controller's sync of
a node walked every pod in the cluster, and every pod and node event asked for such a sync, so its cost
grew with the square of the cluster (69% of the controller manager's CPU at 3 600 pods); the ReplicaSet
and Deployment controllers walked their whole namespace per sync. Each test fills the informers' caches
with many owners' settled children, counts the reads of every cached object during one sync, and
asserts that no object belonging to another owner (or node) was read at all."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from controlplane.controllers.base import ControllerContext
from controlplane.controllers.deployment.controller import DeploymentController
from controlplane.controllers.informers import SharedInformers
from controlplane.controllers.refmanager import CLAIM_INDEXERS, claim_candidates
from controlplane.controllers.replicaset import ReplicaSetController, calculate_status
from controlplane.controllers.volume.attachdetach import AttachDetachController
from kubeclient.client import KubeClient
from kubeclient.config import ClusterConfig
from kubeclient.informer import Informer, key_of
from kubeclient.selectors import from_label_selector

Obj = dict[str, Any]
OWNERS = 20
PER_OWNER = 3


class Counted(dict):  # type: ignore[type-arg]
    """A cached object that counts the reads of its fields once armed."""

    armed = False
    reads = 0

    def _read(self) -> None:
        if self.armed:
            self.reads += 1

    def get(self, *args: Any) -> Any:
        self._read()
        return super().get(*args)

    def __getitem__(self, key: Any) -> Any:
        self._read()
        return super().__getitem__(key)


def cache(informer: Informer, objects: list[Obj]) -> list[Counted]:
    """Put the objects in the informer's cache (indexed) and arm them."""
    counted = [Counted(o) for o in objects]
    for obj in counted:
        informer._put(key_of(obj), obj)
    for obj in counted:
        obj.armed = True
    return counted


def ready_pod(name: str, node: str, owner: Obj | None, labels: dict[str, str]) -> Obj:
    refs = []
    if owner is not None:
        refs = [
            {
                "apiVersion": "apps/v1",
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": labels,
            "ownerReferences": refs,
            "creationTimestamp": "2026-12-01T00:00:00Z",
            "resourceVersion": "1",
        },
        "spec": {"nodeName": node},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T00:00:00Z"}],
        },
    }


def owner(kind: str, name: str, owner_of: Obj | None = None) -> Obj:
    labels = {"app": name}
    obj: Obj = {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "generation": 1,
            "labels": labels,
        },
        "spec": {
            "replicas": PER_OWNER,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}},
        },
    }
    if owner_of is not None:
        obj["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": owner_of["metadata"]["name"],
                "uid": owner_of["metadata"]["uid"],
                "controller": True,
            }
        ]
        obj["metadata"]["labels"] = owner_of["metadata"]["labels"]
        obj["spec"]["selector"] = owner_of["spec"]["selector"]
    return obj


@pytest.fixture
async def ctx() -> AsyncIterator[ControllerContext]:
    # The syncs below find everything settled and never call the API: a call would fail here.
    unused = KubeClient(ClusterConfig(server="http://127.0.0.1:9"))
    yield ControllerContext(client=unused, informers=SharedInformers(unused), registry=CollectorRegistry())
    await unused.close()


async def test_a_replicaset_sync_reads_only_its_own_pods(ctx: ControllerContext) -> None:
    controller = ReplicaSetController(ctx)
    sets = [owner("ReplicaSet", f"rs-{i}") for i in range(OWNERS)]
    pods: dict[str, list[Counted]] = {}
    for rs in sets:
        name = rs["metadata"]["name"]
        mine = [ready_pod(f"{name}-{j}", "n1", rs, {"app": name}) for j in range(PER_OWNER)]
        rs["status"] = calculate_status(rs, mine, None)
        pods[name] = cache(controller.pods, mine)
    cache(controller.owners, sets)
    await controller.sync("ns/rs-0")
    assert all(p.reads for p in pods["rs-0"])  # it did look at its own pods
    others = {n: sum(p.reads for p in ps) for n, ps in pods.items() if n != "rs-0"}
    assert not any(others.values()), f"the sync of rs-0 read other ReplicaSets' pods: {others}"


def test_orphans_of_the_namespace_stay_candidates_for_adoption() -> None:
    rs = owner("ReplicaSet", "rs-0")
    informer = Informer(KubeClient(ClusterConfig(server="http://127.0.0.1:9")), "/api/v1/pods")
    informer.add_indexers(CLAIM_INDEXERS)
    orphan = ready_pod("orphan", "n1", None, {"app": "rs-0"})
    elsewhere = {**orphan, "metadata": {**orphan["metadata"], "name": "elsewhere", "namespace": "other"}}
    mine = ready_pod("mine", "n1", rs, {"app": "relabelled"})  # owned, no longer matching: to release
    theirs = ready_pod("theirs", "n1", owner("ReplicaSet", "rs-1"), {"app": "rs-0"})
    for pod in (orphan, elsewhere, mine, theirs):
        informer._put(key_of(pod), pod)
    assert sorted(p["metadata"]["name"] for p in claim_candidates(informer, rs)) == ["mine", "orphan"]
    informer._put(key_of(orphan), ready_pod("orphan", "n1", rs, {"app": "rs-0"}))  # adopted
    assert sorted(p["metadata"]["name"] for p in claim_candidates(informer, rs)) == ["mine", "orphan"]
    assert informer.by_index("orphans", "ns") == []


async def test_a_deployment_claims_from_its_own_replicasets(ctx: ControllerContext) -> None:
    controller = DeploymentController(ctx)
    deployments = [owner("Deployment", f"d-{i}") for i in range(OWNERS)]
    sets = {
        d["metadata"]["name"]: cache(
            controller.replicasets, [owner("ReplicaSet", f"{d['metadata']['name']}-rs", d)]
        )
        for d in deployments
    }
    d0 = deployments[0]
    claimed = await controller._claim_replica_sets(d0, from_label_selector(d0["spec"]["selector"]))
    assert [rs["metadata"]["name"] for rs in claimed] == ["d-0-rs"]
    others = {n: sum(rs.reads for rs in s) for n, s in sets.items() if n != "d-0"}
    assert not any(others.values()), f"d-0's claim read other Deployments' ReplicaSets: {others}"


async def test_an_attach_detach_sync_reads_only_its_nodes_pods(ctx: ControllerContext) -> None:
    controller = AttachDetachController(ctx)
    pods = {
        f"n{i}": cache(
            controller.pods, [ready_pod(f"p{i}-{j}", f"n{i}", None, {"app": "x"}) for j in range(PER_OWNER)]
        )
        for i in range(OWNERS)
    }
    await controller.sync("n0")
    assert all(p.reads for p in pods["n0"])
    others = {n: sum(p.reads for p in ps) for n, ps in pods.items() if n != "n0"}
    assert not any(others.values()), f"the sync of node n0 read other nodes' pods: {others}"


def with_volumes(pod: Obj, *volumes: Obj) -> Obj:
    return {**pod, "spec": {**pod["spec"], "volumes": list(volumes)}}


async def test_only_a_pod_with_claims_wakes_its_nodes_attach_detach_sync(ctx: ControllerContext) -> None:
    """Upstream's attach/detach pod handlers process the pod's own volumes only; a pod without a claim
    can need no attachment, so its events must not cost a sync of its node (every pod event did)."""
    controller = AttachDetachController(ctx)
    plain = with_volumes(ready_pod("plain", "n1", None, {"app": "x"}), {"name": "tmp", "emptyDir": {}})
    claiming = with_volumes(
        ready_pod("claiming", "n2", None, {"app": "x"}),
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
    )
    ephemeral = with_volumes(
        ready_pod("ephemeral", "n3", None, {"app": "x"}),
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
    )
    for pod in (plain, claiming, ephemeral):
        controller.pods._apply({"type": "ADDED", "object": pod})
        controller.pods._apply({"type": "MODIFIED", "object": pod})
        controller.pods._apply({"type": "DELETED", "object": pod})
    woken = []
    while len(controller.queue):
        key = await controller.queue.get()
        woken.append(key)
        controller.queue.done(key)
    assert sorted(woken) == ["n2", "n3"]
