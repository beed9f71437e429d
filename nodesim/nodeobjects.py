"""A simulated node's Node object and Lease, as a kubelet registers and renews them.

The Node carries the labels, capacity, conditions (with the kubelet's reasons and messages) and node
info a scheduler and a dashboard read; its annotation names the simulation that owns it, so a second
simulation (or a restart of this one) adopts only its own nodes and never a real one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubeclient.version import KUBERNETES_VERSION
from nodesim.settings import SimSettings

OWNER_ANNOTATION = "nodesim.pykubelet.io/simulation"
SIMULATED_LABEL = "nodesim.pykubelet.io/simulated"
LEASE_NAMESPACE = "kube-node-lease"

# The kubelet's condition texts (pkg/kubelet/nodestatus/setters.go), in the order it writes them.
_CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_status(settings: SimSettings, name: str, ip: str, since: str) -> dict[str, Any]:
    """The status a healthy node reports: `since` is when its conditions last changed (registration)."""
    stamp = now()
    resources = {
        "cpu": settings.cpu,
        "memory": settings.memory,
        "pods": str(settings.pods),
        "ephemeral-storage": settings.ephemeral_storage,
    }
    return {
        "capacity": dict(resources),
        "allocatable": dict(resources),
        "conditions": [
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": since,
            }
            for kind, status, reason, message in _CONDITIONS
        ],
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
            "kernelVersion": "simulated",
            "osImage": "pykubelet simulated node",
            "containerRuntimeVersion": "simulated://1.0",
            "kubeletVersion": f"v{KUBERNETES_VERSION}",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def node_object(settings: SimSettings, name: str, ip: str, pod_cidr: str, simulation: str) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        SIMULATED_LABEL: "true",
        **settings.labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {OWNER_ANNOTATION: simulation, "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
        "status": node_status(settings, name, ip, now()),
    }


def lease_object(name: str, node_uid: str, duration: int) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}],
        },
        "spec": {"holderIdentity": name, "leaseDurationSeconds": duration, "renewTime": micro_now()},
    }


def lease_path(name: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{name}"
