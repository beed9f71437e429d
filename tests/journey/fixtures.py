"""Recorded API objects, as dicts, of one Deployment's journey (3 fields trimmed to what the API shows
for `kubectl apply` of a 1-replica Deployment + Service on a cluster): times chosen so that every stage
shares a second with another, which is what the ordering must survive."""

from __future__ import annotations

import copy
from typing import Any

NS = "demo"
T0 = "2026-12-01T10:00:00Z"
T1 = "2026-12-01T10:00:01Z"
T2 = "2026-12-01T10:00:02Z"


def mf(manager: str, operation: str, time: str, subresource: str = "", fields: dict | None = None) -> dict:
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": time,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields or {"f:spec": {"f:replicas": {}}},
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def deployment(**status: Any) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": NS,
            "uid": "d1",
            "generation": 1,
            "creationTimestamp": T0,
            "managedFields": [
                mf("kubectl-client-side-apply", "Update", T0),
                mf(
                    "kube-controller-manager",
                    "Update",
                    T2,
                    "status",
                    {"f:status": {"f:availableReplicas": {}, "f:conditions": {}}},
                ),
            ],
        },
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}},
        "status": {
            "observedGeneration": 1,
            "replicas": 1,
            "readyReplicas": 1,
            "availableReplicas": 1,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True",
                    "lastTransitionTime": T2,
                    "reason": "MinimumReplicasAvailable",
                },
                {
                    "type": "Progressing",
                    "status": "True",
                    "lastTransitionTime": T0,
                    "reason": "NewReplicaSetAvailable",
                },
            ],
            **status,
        },
    }


def replicaset() -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "web-7d9c",
            "namespace": NS,
            "uid": "r1",
            "generation": 1,
            "creationTimestamp": T0,
            "labels": {"app": "web"},
            "ownerReferences": [{"kind": "Deployment", "name": "web", "uid": "d1", "controller": True}],
            "managedFields": [
                mf("kube-controller-manager", "Update", T0),
                mf("kube-controller-manager", "Update", T2, "status", {"f:status": {"f:readyReplicas": {}}}),
            ],
        },
        "spec": {"replicas": 1},
        "status": {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1},
    }


def pod(name: str = "web-7d9c-a", uid: str = "p1", ready: bool = True) -> dict:
    conds = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": T0},
        {"type": "Initialized", "status": "True", "lastTransitionTime": T0},
        {"type": "ContainersReady", "status": "True" if ready else "False", "lastTransitionTime": T1},
        {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": T1},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid,
            "creationTimestamp": T0,
            "labels": {"app": "web"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web-7d9c", "uid": "r1", "controller": True}],
            "managedFields": [
                mf(
                    "kube-controller-manager",
                    "Update",
                    T0,
                    fields={"f:metadata": {"f:labels": {}}, "f:spec": {"f:containers": {}}},
                ),
                mf("kubelet", "Update", T1, "status", {"f:status": {"f:conditions": {}}}),
            ],
        },
        "spec": {
            "nodeName": "node-1",
            "containers": [
                {"name": "main", "image": "busybox", "ports": [{"name": "http", "containerPort": 8080}]}
            ],
        },
        "status": {
            "phase": "Running",
            "conditions": conds,
            "containerStatuses": [
                {"name": "main", "ready": ready, "restartCount": 0, "state": {"running": {"startedAt": T1}}}
            ],
        },
    }


def service(selector: dict | None = None, target_port: Any = 8080) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "web",
            "namespace": NS,
            "uid": "s1",
            "creationTimestamp": T0,
            "managedFields": [mf("kubectl-client-side-apply", "Update", T0)],
        },
        "spec": {
            "selector": {"app": "web"} if selector is None else selector,
            "ports": [{"port": 80, "targetPort": target_port}],
        },
    }


def endpointslice(ready: bool = True) -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "web-abc",
            "namespace": NS,
            "uid": "e1",
            "creationTimestamp": T0,
            "labels": {"kubernetes.io/service-name": "web"},
            "ownerReferences": [{"kind": "Service", "name": "web", "uid": "s1", "controller": True}],
            "managedFields": [
                mf("kube-controller-manager", "Update", T1, fields={"f:metadata": {}, "f:endpoints": {}})
            ],
        },
        "endpoints": [
            {
                "addresses": ["10.0.0.5"],
                "conditions": {"ready": ready},
                "targetRef": {"kind": "Pod", "name": "web-7d9c-a", "uid": "p1"},
            }
        ],
    }


def event(
    uid: str,
    kind: str,
    name: str,
    reason: str,
    component: str,
    time: str,
    message: str = "",
    event_time: str | None = None,
    count: int = 1,
    etype: str = "Normal",
) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{name}.{reason}",
            "namespace": NS,
            "uid": f"ev-{name}-{reason}",
            "creationTimestamp": time,
        },
        "involvedObject": {"kind": kind, "name": name, "uid": uid, "namespace": NS},
        "reason": reason,
        "message": message,
        "type": etype,
        "source": {"component": component},
        "firstTimestamp": time,
        "lastTimestamp": time,
        "count": count,
        **({"eventTime": event_time} if event_time else {}),
    }


def events() -> list[dict]:
    return [
        event(
            "d1",
            "Deployment",
            "web",
            "ScalingReplicaSet",
            "deployment-controller",
            T0,
            "Scaled up replica set web-7d9c from 0 to 1",
        ),
        event(
            "r1",
            "ReplicaSet",
            "web-7d9c",
            "SuccessfulCreate",
            "replicaset-controller",
            T0,
            "Created pod: web-7d9c-a",
        ),
        event(
            "p1",
            "Pod",
            "web-7d9c-a",
            "Scheduled",
            "default-scheduler",
            T0,
            "Successfully assigned demo/web-7d9c-a to node-1",
            event_time="2026-12-01T10:00:00.412000Z",
        ),
        event(
            "p1", "Pod", "web-7d9c-a", "Pulled", "kubelet", T1, 'Container image "busybox" already present'
        ),
        event("p1", "Pod", "web-7d9c-a", "Created", "kubelet", T1, "Created container main"),
        event("p1", "Pod", "web-7d9c-a", "Started", "kubelet", T1, "Started container main"),
    ]


def pools(**over: Any) -> dict[str, list[dict]]:
    base = {
        "ReplicaSet": [replicaset()],
        "Job": [],
        "Pod": [pod()],
        "Service": [service()],
        "EndpointSlice": [endpointslice()],
        "Event": events(),
    }
    base.update(over)
    return copy.deepcopy(base)


def node(ready: str = "True", renew: str = "2026-12-01T10:00:05.000000Z", **extra: Any) -> dict:
    conds = [
        {
            "type": "Ready",
            "status": ready,
            "message": "kubelet is posting ready status"
            if ready == "True"
            else "Kubelet stopped posting node status.",
        }
    ]
    conds += [{"type": t, "status": s, "message": f"{t} says so"} for t, s in extra.items()]
    return {"kind": "Node", "metadata": {"name": "node-1"}, "spec": {}, "status": {"conditions": conds}}


def lease(renew: str = "2026-12-01T10:00:05.000000Z") -> dict:
    return {
        "kind": "Lease",
        "metadata": {"name": "node-1"},
        "spec": {"renewTime": renew, "leaseDurationSeconds": 40},
    }
