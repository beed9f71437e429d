"""The objects ingress-nginx's deploy manifest installs beside its controller, as dicts: the
ingress-nginx namespace and ServiceAccount, upstream's RBAC for it (the cluster-wide ClusterRole its
informers and status writes need, the namespaced Role for its leader-election Lease and events), and
the IngressClass naming our controller, marked default when asked (as `up` does)."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
NAMESPACE = "ingress-nginx"
NAME = "ingress-nginx"
USER = f"system:serviceaccount:{NAMESPACE}:{NAME}"
GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}")
CONTROLLER = "pykubelet.io/ingress-nginx"
GATEWAY_CONTROLLER = "pykubelet.io/gateway-controller"  # the GatewayClass controllerName it serves
CLASS = "nginx"
LEASE = "ingress-nginx-leader"
_RBAC = "rbac.authorization.k8s.io/v1"
_LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "controller"}
_SUBJECT = {"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}


def _meta(name: str, namespace: str = "") -> Obj:
    meta: Obj = {"name": name, "labels": dict(_LABELS)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _rule(groups: list[str], resources: list[str], verbs: list[str], names: list[str] | None = None) -> Obj:
    rule: Obj = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


def rbac() -> list[Obj]:
    ref = {"apiGroup": "rbac.authorization.k8s.io"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": dict(_LABELS)}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME, NAMESPACE)},
        {
            "apiVersion": _RBAC,
            "kind": "ClusterRole",
            "metadata": _meta(NAME),
            "rules": [
                _rule(
                    [""],
                    ["configmaps", "endpoints", "nodes", "pods", "secrets", "namespaces"],
                    ["list", "watch"],
                ),
                _rule(["coordination.k8s.io"], ["leases"], ["list", "watch"]),
                _rule([""], ["nodes"], ["get"]),
                _rule([""], ["services"], ["get", "list", "watch"]),
                _rule(["networking.k8s.io"], ["ingresses"], ["get", "list", "watch"]),
                _rule([""], ["events"], ["create", "patch"]),
                _rule(["networking.k8s.io"], ["ingresses/status"], ["update"]),
                _rule(["networking.k8s.io"], ["ingressclasses"], ["get", "list", "watch"]),
                _rule(["discovery.k8s.io"], ["endpointslices"], ["list", "watch", "get"]),
                # The Gateway API, served when its CRDs are installed (as ingress-nginx's successors ask).
                _rule(
                    ["gateway.networking.k8s.io"],
                    ["gatewayclasses", "gateways", "httproutes", "referencegrants"],
                    ["get", "list", "watch"],
                ),
                _rule(
                    ["gateway.networking.k8s.io"],
                    ["gatewayclasses/status", "gateways/status", "httproutes/status"],
                    ["update"],
                ),
                # Its GatewayClass made once the CRDs are there; the CRDs watched to know when they are.
                _rule(["gateway.networking.k8s.io"], ["gatewayclasses"], ["create"]),
                _rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], ["get", "list", "watch"]),
            ],
        },
        {
            "apiVersion": _RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": _meta(NAME),
            "roleRef": {**ref, "kind": "ClusterRole", "name": NAME},
            "subjects": [_SUBJECT],
        },
        {
            "apiVersion": _RBAC,
            "kind": "Role",
            "metadata": _meta(NAME, NAMESPACE),
            "rules": [
                _rule(["coordination.k8s.io"], ["leases"], ["get", "update"], [LEASE]),
                _rule(["coordination.k8s.io"], ["leases"], ["create"]),
                _rule([""], ["events"], ["create", "patch"]),
            ],
        },
        {
            "apiVersion": _RBAC,
            "kind": "RoleBinding",
            "metadata": _meta(NAME, NAMESPACE),
            "roleRef": {**ref, "kind": "Role", "name": NAME},
            "subjects": [_SUBJECT],
        },
    ]


def gateway_class(name: str = "pykubelet") -> Obj:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": _meta(name),
        "spec": {"controllerName": GATEWAY_CONTROLLER},
    }


def ingress_class(default: bool = True, name: str = CLASS, controller: str = CONTROLLER) -> Obj:
    meta = _meta(name)
    if default:
        meta["annotations"] = {"ingressclass.kubernetes.io/is-default-class": "true"}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": meta,
        "spec": {"controller": controller},
    }
