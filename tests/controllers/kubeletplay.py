"""Tests playing a node's kubelet through the API: a Node with a status, its Lease in kube-node-lease,
heartbeats while the test wants the node alive, silence when it wants it lost."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

LEASE_NS = "kube-node-lease"


def now_stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_status(ready: str = "True") -> dict:
    stamp = now_stamp()
    reason = "KubeletReady" if ready == "True" else "KubeletNotReady"
    kubelet = [
        ("MemoryPressure", "KubeletHasSufficientMemory"),
        ("DiskPressure", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "KubeletHasSufficientPID"),
    ]
    conditions = [
        {
            "type": t,
            "status": "False",
            "reason": r,
            "message": "ok",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        for t, r in kubelet
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": ready,
            "reason": reason,
            "message": f"{reason.lower()} status",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
    )
    capacity = {"cpu": "2", "memory": "2Gi", "pods": "110"}
    return {"conditions": conditions, "capacity": capacity, "allocatable": capacity}


def post_status(v1: client.CoreV1Api, name: str, ready: str = "True") -> None:
    v1.patch_node_status(name, {"status": node_status(ready)})


def renew_lease(coord: client.CoordinationV1Api, name: str) -> None:
    body = {
        "metadata": {"name": name, "namespace": LEASE_NS},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": micro_now()},
    }
    try:
        coord.patch_namespaced_lease(name, LEASE_NS, {"spec": {"renewTime": micro_now()}})
    except ApiException as err:
        if err.status != 404:
            raise
        coord.create_namespaced_lease(LEASE_NS, body)


def make_node(
    v1: client.CoreV1Api,
    coord: client.CoordinationV1Api | None,
    name: str,
    ready: str | None = "True",
    labels: dict[str, str] | None = None,
    taints: list[dict] | None = None,
) -> client.V1Node:
    """A Node (with a status unless ready is None, and a fresh Lease if coord is given)."""
    spec = {"taints": taints} if taints else {}
    v1.create_node({"metadata": {"name": name, "labels": labels or {}}, "spec": spec})
    if ready is not None:
        post_status(v1, name, ready)
    if coord is not None:
        renew_lease(coord, name)
    return v1.read_node(name)


def delete_node(v1: client.CoreV1Api, coord: client.CoordinationV1Api | None, name: str) -> None:
    with contextlib.suppress(ApiException):
        v1.delete_node(name)
    if coord is not None:
        with contextlib.suppress(ApiException):
            coord.delete_namespaced_lease(name, LEASE_NS)


@contextlib.asynccontextmanager
async def heartbeat(
    v1: client.CoreV1Api, coord: client.CoordinationV1Api, name: str, every: float = 0.3, status: bool = False
) -> AsyncIterator[None]:
    """Renew the node's Lease (and with status=True post a Ready status) every `every` s in the block."""

    async def beat() -> None:
        while True:
            await asyncio.to_thread(renew_lease, coord, name)
            if status:
                await asyncio.to_thread(post_status, v1, name)
            await asyncio.sleep(every)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def condition(node: client.V1Node, type_: str) -> client.V1NodeCondition | None:
    return next((c for c in node.status.conditions or [] if c.type == type_), None)


def taint_set(node: client.V1Node) -> set[tuple[str, str]]:
    return {(t.key, t.effect) for t in node.spec.taints or []}


def pod_on(
    name: str, node: str, tolerations: list[dict] | None = None, finalizers: list[str] | None = None
) -> dict:
    meta: dict = {"name": name}
    if finalizers:
        meta["finalizers"] = finalizers
    spec: dict = {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"metadata": meta, "spec": spec}


def run_ready(v1: client.CoreV1Api, namespace: str, name: str) -> None:
    """What the kubelet reports for a started pod: Running, Ready."""
    stamp = now_stamp()
    v1.patch_namespaced_pod_status(
        name,
        namespace,
        {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": stamp}],
            }
        },
    )


def pod_condition(pod: client.V1Pod, type_: str) -> client.V1PodCondition | None:
    return next((c for c in pod.status.conditions or [] if c.type == type_), None)


def read_pod(v1: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod | None:
    try:
        return v1.read_namespaced_pod(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def events(
    v1: client.CoreV1Api, namespace: str, reason: str, name: str | None = None
) -> list[client.CoreV1Event]:
    return [
        e
        for e in v1.list_namespaced_event(namespace).items
        if e.reason == reason and (name is None or e.involved_object.name == name)
    ]
