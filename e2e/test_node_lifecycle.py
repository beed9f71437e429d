"""A node whose kubelet went silent, through the API only: the test writes a Node (Ready) and its Lease,
then stops renewing them, as a killed kubelet would. The cluster's node lifecycle controller must set
it Unknown within its grace period (upstream 1.32: 50 s; E2E_NODE_MONITOR_GRACE_PERIOD for another
cluster) and taint it node.kubernetes.io/unreachable:NoExecute; its pods go not Ready, and the taint
eviction controller deletes a pod tolerating the taint for 5 s about 5 s later, never one tolerating it
forever. The Node is removed at the end.

A real agent stopped with its Deployment's pods replaced on another node needs a second node, which the
project's single-machine stack does not have yet.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from datetime import UTC, datetime

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.waiting import wait_for

pytestmark = pytest.mark.integration

GRACE = float(os.environ.get("E2E_NODE_MONITOR_GRACE_PERIOD", "50"))
MARGIN = 30.0  # two monitor periods (5 s each), the tainting pass, API latency
UNREACHABLE = "node.kubernetes.io/unreachable"
# Keeps schedulers off the stand-in node; not a taint the node lifecycle controller manages.
UNMANAGED = {"key": "e2e.pykubelet.dev/stand-in", "value": "true", "effect": "NoSchedule"}


def stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def ready_status() -> dict:
    now = stamp()
    conditions = [
        {
            "type": t,
            "status": "False",
            "reason": r,
            "message": "ok",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for t, r in (
            ("MemoryPressure", "KubeletHasSufficientMemory"),
            ("DiskPressure", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "KubeletHasSufficientPID"),
        )
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
    )
    capacity = {"cpu": "1", "memory": "1Gi", "pods": "110"}
    return {"conditions": conditions, "capacity": capacity, "allocatable": capacity}


def condition(obj, type_: str):
    return next((c for c in obj.status.conditions or [] if c.type == type_), None)


def sleeper(name: str, node: str, image: str, tolerations: list[dict]) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "tolerations": tolerations,
            "containers": [{"name": "main", "image": image, "command": ["sleep", "3600"]}],
        },
    }


def read_pod(kube, namespace: str, name: str):
    try:
        return kube.read_namespaced_pod(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def test_a_silent_node_goes_unknown_is_tainted_and_its_pods_evicted(kube, api_client, namespace, image):
    coord = client.CoordinationV1Api(api_client)
    name = f"e2e-stand-in-{uuid.uuid4().hex[:6]}"
    unreachable = {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}
    try:
        kube.create_node(
            {
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "spec": {"taints": [UNMANAGED]},
            }
        )
        kube.patch_node_status(name, {"status": ready_status()})
        coord.create_namespaced_lease(
            "kube-node-lease",
            {
                "metadata": {"name": name},
                "spec": {
                    "holderIdentity": name,
                    "leaseDurationSeconds": 40,
                    "renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                },
            },
        )
        silent_since = time.monotonic()
        for pod, tolerations in (
            ("short", [{**unreachable, "tolerationSeconds": 5}]),
            ("forever", [unreachable]),
        ):
            kube.create_namespaced_pod(namespace, sleeper(pod, name, image, tolerations))
            kube.patch_namespaced_pod_status(
                pod,
                namespace,
                {
                    "status": {
                        "phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": stamp()}],
                    }
                },
            )

        node = wait_for(
            lambda: (n := kube.read_node(name)) and condition(n, "Ready").status == "Unknown" and n,
            timeout=GRACE + MARGIN,
            interval=1,
            what=f"{name} Ready=Unknown",
        )
        assert time.monotonic() - silent_since >= 0.75 * GRACE
        ready = condition(node, "Ready")
        assert (ready.reason, ready.message) == ("NodeStatusUnknown", "Kubelet stopped posting node status.")

        node = wait_for(
            lambda: (
                (n := kube.read_node(name))
                and any(t.key == UNREACHABLE and t.effect == "NoExecute" for t in n.spec.taints or [])
                and n
            ),
            timeout=MARGIN,
            interval=0.5,
            what="unreachable:NoExecute taint",
        )
        taint = next(t for t in node.spec.taints if t.key == UNREACHABLE and t.effect == "NoExecute")
        assert taint.time_added is not None

        def short_deleted():
            pod = read_pod(kube, namespace, "short")
            return "gone" if pod is None else (pod if pod.metadata.deletion_timestamp else None)

        pod = wait_for(short_deleted, timeout=MARGIN, interval=0.25, what="short pod deleted")
        if pod != "gone":  # still there (no kubelet confirms the deletion): it was marked before
            target = condition(pod, "DisruptionTarget")
            assert (target.status, target.reason) == ("True", "DeletionByTaintManager")
            waited = (target.last_transition_time - taint.time_added).total_seconds()
            assert 3 <= waited <= 10, waited
        forever = kube.read_namespaced_pod("forever", namespace)
        assert forever.metadata.deletion_timestamp is None
        assert condition(forever, "Ready").status == "False"  # MarkPodsNotReady
    finally:
        for pod in ("short", "forever"):
            with contextlib.suppress(ApiException):
                kube.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            coord.delete_namespaced_lease(name, "kube-node-lease")
        with contextlib.suppress(ApiException):
            kube.delete_node(name)
    wait_for(
        lambda: not any(n.metadata.name == name for n in kube.list_node().items),
        timeout=30,
        what=f"{name} removed",
    )
