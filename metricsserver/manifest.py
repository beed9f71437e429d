"""The objects metrics-server's components.yaml installs beside the process, as dicts: its
ServiceAccount, upstream's RBAC (system:metrics-server, system:aggregated-metrics-reader aggregated to
view/edit/admin, the auth-delegator and extension-apiserver-authentication-reader bindings), the
kube-system/metrics-server Service and the v1beta1.metrics.k8s.io APIService. Where the process runs
outside a pod (the single-machine stack), the Service has no selector and `endpoints` names the address
it listens on; with a `ca_bundle` the aggregation layer verifies its serving certificate instead of
skipping verification as components.yaml does."""

from __future__ import annotations

import base64
from typing import Any

Obj = dict[str, Any]
NAMESPACE = "kube-system"
NAME = "metrics-server"
USER = f"system:serviceaccount:{NAMESPACE}:{NAME}"
GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}")
LABELS = {"k8s-app": NAME}
SUBJECT = {"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}


def _meta(name: str, namespace: str = "", **labels: str) -> Obj:
    meta: Obj = {"name": name, "labels": {**LABELS, **labels}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def rbac() -> list[Obj]:
    rbac_v1 = "rbac.authorization.k8s.io/v1"
    aggregate = {f"rbac.authorization.k8s.io/aggregate-to-{r}": "true" for r in ("admin", "edit", "view")}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME, NAMESPACE)},
        {
            "apiVersion": rbac_v1,
            "kind": "ClusterRole",
            "metadata": _meta("system:aggregated-metrics-reader", **aggregate),
            "rules": [
                {
                    "apiGroups": ["metrics.k8s.io"],
                    "resources": ["pods", "nodes"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        },
        {
            "apiVersion": rbac_v1,
            "kind": "ClusterRole",
            "metadata": _meta("system:metrics-server"),
            "rules": [
                {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]},
            ],
        },
        {
            "apiVersion": rbac_v1,
            "kind": "RoleBinding",
            "metadata": _meta("metrics-server-auth-reader", NAMESPACE),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "extension-apiserver-authentication-reader",
            },
            "subjects": [SUBJECT],
        },
        {
            "apiVersion": rbac_v1,
            "kind": "ClusterRoleBinding",
            "metadata": _meta("metrics-server:system:auth-delegator"),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:auth-delegator",
            },
            "subjects": [SUBJECT],
        },
        {
            "apiVersion": rbac_v1,
            "kind": "ClusterRoleBinding",
            "metadata": _meta("system:metrics-server"),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:metrics-server",
            },
            "subjects": [SUBJECT],
        },
    ]


def service(address: str, port: int) -> list[Obj]:
    """The Service (443 -> the process's port) and, for a process outside any pod, its Endpoints."""
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(NAME, NAMESPACE),
        "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]},
    }
    endpoints = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": _meta(NAME, NAMESPACE),
        "subsets": [
            {"addresses": [{"ip": address}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}
        ],
    }
    return [svc, endpoints]


def apiservice(ca_bundle: bytes | None = None) -> Obj:
    spec: Obj = {
        "group": "metrics.k8s.io",
        "groupPriorityMinimum": 100,
        "service": {"name": NAME, "namespace": NAMESPACE, "port": 443},
        "version": "v1beta1",
        "versionPriority": 100,
    }
    if ca_bundle:
        spec["caBundle"] = base64.b64encode(ca_bundle).decode()
    else:
        spec["insecureSkipTLSVerify"] = True
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": _meta("v1beta1.metrics.k8s.io"),
        "spec": spec,
    }
