"""The bootstrap policy's cluster roles and cluster role bindings (upstream's bootstrappolicy/policy.go,
as its testdata records them): the user-facing roles (cluster-admin, admin, edit, view, aggregated from
the system:aggregate-to-* roles), what every user may do (discovery, basic-user, public-info-viewer),
and the roles of the components (kube-scheduler, kube-controller-manager, node, node-proxier, ...).

Every object carries the `kubernetes.io/bootstrapping: rbac-defaults` label and the
`rbac.authorization.kubernetes.io/autoupdate: "true"` annotation; the server reconciles them at every
start (reconcile.py). The controllers' roles are in controller_policy.py, the namespaced ones in
namespace_policy.py.
"""

from __future__ import annotations

from typing import Any

from controlplane.apiserver.rbac.rules import PolicyRule, rule

Obj = dict[str, Any]

GROUP = "rbac.authorization.k8s.io"
API_VERSION = f"{GROUP}/v1"
AUTOUPDATE = "rbac.authorization.kubernetes.io/autoupdate"
BOOTSTRAP_LABEL = {"kubernetes.io/bootstrapping": "rbac-defaults"}

READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete", "deletecollection")
READ_WRITE = READ + WRITE
READ_UPDATE = ("get", "list", "watch", "update", "patch")

CORE, APPS, AUTHN, AUTHZ = "", "apps", "authentication.k8s.io", "authorization.k8s.io"
AUTOSCALING, BATCH, CERTS, EXTENSIONS = "autoscaling", "batch", "certificates.k8s.io", "extensions"
POLICY, STORAGE, NETWORKING, EVENTS = "policy", "storage.k8s.io", "networking.k8s.io", "events.k8s.io"
COORDINATION, DISCOVERY, NODE = "coordination.k8s.io", "discovery.k8s.io", "node.k8s.io"

AGGREGATE_TO_ADMIN = "rbac.authorization.k8s.io/aggregate-to-admin"
AGGREGATE_TO_EDIT = "rbac.authorization.k8s.io/aggregate-to-edit"
AGGREGATE_TO_VIEW = "rbac.authorization.k8s.io/aggregate-to-view"

SYSTEM_MASTERS, AUTHENTICATED, UNAUTHENTICATED = (
    "system:masters",
    "system:authenticated",
    "system:unauthenticated",
)
NODES_GROUP, MONITORING_GROUP, SERVICE_ACCOUNTS = (
    "system:nodes",
    "system:monitoring",
    "system:serviceaccounts",
)
KUBE_SCHEDULER, KUBE_CONTROLLER_MANAGER, KUBE_PROXY = (
    "system:kube-scheduler",
    "system:kube-controller-manager",
    "system:kube-proxy",
)


def events_rule() -> PolicyRule:
    return rule(("create", "update", "patch"), (CORE, EVENTS), ("events",))


def metadata(name: str, namespace: str = "", labels: dict[str, str] | None = None) -> Obj:
    meta: Obj = {
        "name": name,
        "labels": {**BOOTSTRAP_LABEL, **(labels or {})},
        "annotations": {AUTOUPDATE: "true"},
    }
    if namespace:
        meta["namespace"] = namespace
    return meta


def cluster_role(
    name: str, rules: list[PolicyRule], labels: dict[str, str] | None = None, aggregate: str = ""
) -> Obj:
    obj: Obj = {
        "apiVersion": API_VERSION,
        "kind": "ClusterRole",
        "metadata": metadata(name, labels=labels),
        "rules": [r.to_dict() for r in rules] or None,
    }
    if aggregate:
        obj["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {aggregate: "true"}}]}
    return obj


def subject(kind: str, name: str, namespace: str = "") -> Obj:
    if kind == "ServiceAccount":
        return {"kind": kind, "name": name, "namespace": namespace}
    return {"kind": kind, "apiGroup": GROUP, "name": name}


def binding(kind: str, name: str, role_kind: str, role: str, subjects: list[Obj], namespace: str = "") -> Obj:
    obj: Obj = {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": metadata(name, namespace),
        "roleRef": {"apiGroup": GROUP, "kind": role_kind, "name": role},
    }
    if subjects:
        obj["subjects"] = subjects
    return obj


def cluster_binding(role: str, *subjects: Obj, name: str = "") -> Obj:
    return binding("ClusterRoleBinding", name or role, "ClusterRole", role, list(subjects))


def groups(*names: str) -> list[Obj]:
    return [subject("Group", n) for n in names]


def users(*names: str) -> list[Obj]:
    return [subject("User", n) for n in names]


# The rules of system:node, which the Node authorizer also applies to what it does not subdivide.
NODE_RULES: list[PolicyRule] = [
    rule(("create",), (AUTHN,), ("tokenreviews",)),
    rule(("create",), (AUTHZ,), ("subjectaccessreviews", "localsubjectaccessreviews")),
    rule(READ, (CORE,), ("services",)),
    rule(("create", "get", "list", "watch"), (CORE,), ("nodes",)),
    rule(("update", "patch"), (CORE,), ("nodes/status",)),
    rule(("update", "patch"), (CORE,), ("nodes",)),
    rule(("create", "update", "patch"), (CORE,), ("events",)),
    rule(READ, (CORE,), ("pods",)),
    rule(("create", "delete"), (CORE,), ("pods",)),
    rule(("update", "patch"), (CORE,), ("pods/status",)),
    rule(("create",), (CORE,), ("pods/eviction",)),
    rule(READ, (CORE,), ("secrets", "configmaps")),
    rule(("get",), (CORE,), ("persistentvolumeclaims", "persistentvolumes")),
    rule(("get",), (CORE,), ("endpoints",)),
    rule(("create", "get", "list", "watch"), (CERTS,), ("certificatesigningrequests",)),
    rule(("get", "create", "update", "patch", "delete"), (COORDINATION,), ("leases",)),
    rule(("get",), (STORAGE,), ("volumeattachments",)),
    rule(("create",), (CORE,), ("serviceaccounts/token",)),
    rule(("get", "update", "patch"), (CORE,), ("persistentvolumeclaims/status",)),
    rule(READ, (STORAGE,), ("csidrivers",)),
    rule(("get", "create", "update", "patch", "delete"), (STORAGE,), ("csinodes",)),
    rule(READ, (NODE,), ("runtimeclasses",)),
]


def _aggregated_user_roles() -> list[Obj]:
    return [
        cluster_role("admin", [], aggregate=AGGREGATE_TO_ADMIN),
        cluster_role("edit", [], {AGGREGATE_TO_ADMIN: "true"}, aggregate=AGGREGATE_TO_EDIT),
        cluster_role("view", [], {AGGREGATE_TO_EDIT: "true"}, aggregate=AGGREGATE_TO_VIEW),
        cluster_role(
            "system:aggregate-to-admin",
            [
                rule(("create",), (AUTHZ,), ("localsubjectaccessreviews",)),
                rule(READ_WRITE, (GROUP,), ("roles", "rolebindings")),
            ],
            {AGGREGATE_TO_ADMIN: "true"},
        ),
        cluster_role(
            "system:aggregate-to-edit",
            [
                rule(
                    READ,
                    (CORE,),
                    (
                        "pods/attach",
                        "pods/proxy",
                        "pods/exec",
                        "pods/portforward",
                        "secrets",
                        "services/proxy",
                    ),
                ),
                rule(("impersonate",), (CORE,), ("serviceaccounts",)),
                rule(WRITE, (CORE,), ("pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward")),
                rule(("create",), (CORE,), ("pods/eviction",)),
                rule(
                    WRITE,
                    (CORE,),
                    (
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                        "persistentvolumeclaims",
                        "configmaps",
                        "secrets",
                        "events",
                    ),
                ),
                rule(("create",), (CORE,), ("serviceaccounts/token",)),
                rule(
                    WRITE,
                    (APPS,),
                    (
                        "statefulsets",
                        "statefulsets/scale",
                        "daemonsets",
                        "deployments",
                        "deployments/scale",
                        "deployments/rollback",
                        "replicasets",
                        "replicasets/scale",
                    ),
                ),
                rule(WRITE, (AUTOSCALING,), ("horizontalpodautoscalers",)),
                rule(WRITE, (BATCH,), ("jobs", "cronjobs")),
                rule(
                    WRITE,
                    (EXTENSIONS,),
                    (
                        "daemonsets",
                        "deployments",
                        "deployments/scale",
                        "deployments/rollback",
                        "ingresses",
                        "replicasets",
                        "replicasets/scale",
                        "replicationcontrollers/scale",
                        "networkpolicies",
                    ),
                ),
                rule(WRITE, (POLICY,), ("poddisruptionbudgets",)),
                rule(WRITE, (NETWORKING,), ("ingresses", "networkpolicies")),
                rule(READ_WRITE, (COORDINATION,), ("leases",)),
            ],
            {AGGREGATE_TO_EDIT: "true"},
        ),
        cluster_role(
            "system:aggregate-to-view",
            [
                rule(
                    READ,
                    (CORE,),
                    (
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "configmaps",
                    ),
                ),
                rule(
                    READ,
                    (CORE,),
                    (
                        "limitranges",
                        "resourcequotas",
                        "bindings",
                        "events",
                        "pods/status",
                        "resourcequotas/status",
                        "namespaces/status",
                        "replicationcontrollers/status",
                        "pods/log",
                    ),
                ),
                rule(READ, (CORE,), ("namespaces",)),
                rule(READ, (DISCOVERY,), ("endpointslices",)),
                rule(
                    READ,
                    (APPS,),
                    (
                        "controllerrevisions",
                        "statefulsets",
                        "statefulsets/status",
                        "statefulsets/scale",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/status",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/status",
                        "replicasets/scale",
                    ),
                ),
                rule(READ, (AUTOSCALING,), ("horizontalpodautoscalers", "horizontalpodautoscalers/status")),
                rule(READ, (BATCH,), ("jobs", "cronjobs", "cronjobs/status", "jobs/status")),
                rule(
                    READ,
                    (EXTENSIONS,),
                    (
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "ingresses",
                        "ingresses/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "replicationcontrollers/scale",
                        "networkpolicies",
                    ),
                ),
                rule(READ, (POLICY,), ("poddisruptionbudgets", "poddisruptionbudgets/status")),
                rule(READ, (NETWORKING,), ("ingresses", "ingresses/status", "networkpolicies")),
            ],
            {AGGREGATE_TO_VIEW: "true"},
        ),
    ]


def _signer_approver(name: str, signer: str) -> Obj:
    return cluster_role(
        f"system:certificates.k8s.io:{name}", [rule(("approve",), (CERTS,), ("signers",), (signer,))]
    )


def _component_roles() -> list[Obj]:
    return [
        cluster_role(
            "system:kube-controller-manager",
            [
                events_rule(),
                rule(("create",), (COORDINATION,), ("leases",)),
                rule(("get", "update"), (COORDINATION,), ("leases",), ("kube-controller-manager",)),
                rule(("create",), (CORE,), ("secrets", "serviceaccounts")),
                rule(("delete",), (CORE,), ("secrets",)),
                rule(("get",), (CORE,), ("configmaps", "namespaces", "secrets", "serviceaccounts")),
                rule(("update",), (CORE,), ("secrets", "serviceaccounts")),
                rule(("create",), (AUTHN,), ("tokenreviews",)),
                rule(("create",), (AUTHZ,), ("subjectaccessreviews",)),
                rule(("list", "watch"), ("*",), ("*",)),
                rule(("create",), (CORE,), ("serviceaccounts/token",)),
            ],
        ),
        cluster_role(
            "system:kube-scheduler",
            [
                events_rule(),
                rule(("create",), (COORDINATION,), ("leases",)),
                rule(("get", "update"), (COORDINATION,), ("leases",), ("kube-scheduler",)),
                rule(READ, (CORE,), ("nodes",)),
                rule(("get", "list", "watch", "delete"), (CORE,), ("pods",)),
                rule(("create",), (CORE,), ("pods/binding", "bindings")),
                rule(("patch", "update"), (CORE,), ("pods/status",)),
                rule(READ, (CORE,), ("replicationcontrollers", "services")),
                rule(READ, (APPS, EXTENSIONS), ("replicasets",)),
                rule(READ, (APPS,), ("statefulsets",)),
                rule(READ, (POLICY,), ("poddisruptionbudgets",)),
                rule(READ, (CORE,), ("persistentvolumeclaims", "persistentvolumes")),
                rule(("create",), (AUTHN,), ("tokenreviews",)),
                rule(("create",), (AUTHZ,), ("subjectaccessreviews",)),
                rule(READ, (STORAGE,), ("csinodes",)),
                rule(READ, (CORE,), ("namespaces",)),
                rule(READ, (STORAGE,), ("csidrivers",)),
                rule(READ, (STORAGE,), ("csistoragecapacities",)),
            ],
        ),
        cluster_role(
            "system:volume-scheduler",
            [
                rule(READ_UPDATE, (CORE,), ("persistentvolumes",)),
                rule(READ, (STORAGE,), ("storageclasses",)),
                rule(READ_UPDATE, (CORE,), ("persistentvolumeclaims",)),
            ],
        ),
        cluster_role("system:node", NODE_RULES),
        cluster_role(
            "system:node-proxier",
            [
                rule(("list", "watch"), (CORE,), ("services", "endpoints")),
                rule(READ, (CORE,), ("nodes",)),
                events_rule(),
                rule(("list", "watch"), (DISCOVERY,), ("endpointslices",)),
            ],
        ),
        # kubeadm's CoreDNS role (its addon, not the API server's bootstrap policy upstream): what the
        # cluster DNS (dns/) reads, bound to kube-system/coredns as kubeadm binds it.
        cluster_role(
            "system:coredns",
            [
                rule(("list", "watch"), (CORE,), ("endpoints", "services", "pods", "namespaces")),
                rule(("list", "watch"), (DISCOVERY,), ("endpointslices",)),
            ],
        ),
        cluster_role(
            "system:node-bootstrapper",
            [
                rule(("create", "get", "list", "watch"), (CERTS,), ("certificatesigningrequests",)),
            ],
        ),
        cluster_role(
            "system:node-problem-detector",
            [
                rule(("get",), (CORE,), ("nodes",)),
                rule(("patch",), (CORE,), ("nodes/status",)),
                events_rule(),
            ],
        ),
        cluster_role(
            "system:kubelet-api-admin",
            [
                rule(READ, (CORE,), ("nodes",)),
                rule(("proxy",), (CORE,), ("nodes",)),
                rule(("*",), (CORE,), ("nodes/proxy", "nodes/metrics", "nodes/stats", "nodes/log")),
            ],
        ),
        cluster_role("system:kube-dns", [rule(("list", "watch"), (CORE,), ("endpoints", "services"))]),
        cluster_role("system:kube-aggregator", [rule(READ, (CORE,), ("services", "endpoints"))]),
        cluster_role(
            "system:heapster",
            [
                rule(READ, (CORE,), ("events", "pods", "nodes", "namespaces")),
                rule(READ, (EXTENSIONS,), ("deployments",)),
            ],
        ),
        cluster_role(
            "system:persistent-volume-provisioner",
            [
                rule(("get", "list", "watch", "create", "delete"), (CORE,), ("persistentvolumes",)),
                rule(("get", "list", "watch", "update"), (CORE,), ("persistentvolumeclaims",)),
                rule(READ, (STORAGE,), ("storageclasses",)),
                rule(("watch",), (CORE,), ("events",)),
                events_rule(),
            ],
        ),
    ]


def cluster_roles() -> list[Obj]:
    """ClusterRoles(): every bootstrap cluster role but the controllers'."""
    return [
        cluster_role("cluster-admin", [rule(("*",), ("*",), ("*",)), rule(("*",), urls=("*",))]),
        cluster_role(
            "system:discovery",
            [
                rule(
                    ("get",),
                    urls=(
                        "/healthz",
                        "/livez",
                        "/readyz",
                        "/version",
                        "/version/",
                        "/api",
                        "/api/*",
                        "/apis",
                        "/apis/*",
                        "/openapi",
                        "/openapi/*",
                    ),
                )
            ],
        ),
        cluster_role(
            "system:monitoring",
            [
                rule(
                    ("get",),
                    urls=(
                        "/metrics",
                        "/metrics/slis",
                        "/livez",
                        "/readyz",
                        "/healthz",
                        "/livez/*",
                        "/readyz/*",
                        "/healthz/*",
                    ),
                )
            ],
        ),
        cluster_role(
            "system:basic-user",
            [
                rule(("create",), (AUTHZ,), ("selfsubjectaccessreviews", "selfsubjectrulesreviews")),
                rule(("create",), (AUTHN,), ("selfsubjectreviews",)),
            ],
        ),
        cluster_role(
            "system:public-info-viewer",
            [rule(("get",), urls=("/healthz", "/livez", "/readyz", "/version", "/version/"))],
        ),
        *_aggregated_user_roles(),
        cluster_role(
            "system:auth-delegator",
            [
                rule(("create",), (AUTHN,), ("tokenreviews",)),
                rule(("create",), (AUTHZ,), ("subjectaccessreviews",)),
            ],
        ),
        *_component_roles(),
        _signer_approver("kube-apiserver-client-approver", "kubernetes.io/kube-apiserver-client"),
        _signer_approver(
            "kube-apiserver-client-kubelet-approver", "kubernetes.io/kube-apiserver-client-kubelet"
        ),
        _signer_approver("kubelet-serving-approver", "kubernetes.io/kubelet-serving"),
        _signer_approver("legacy-unknown-approver", "kubernetes.io/legacy-unknown"),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            [rule(("create",), (CERTS,), ("certificatesigningrequests/nodeclient",))],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            [rule(("create",), (CERTS,), ("certificatesigningrequests/selfnodeclient",))],
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            [rule(("get",), urls=("/.well-known/openid-configuration", "/openid/v1/jwks"))],
        ),
    ]


def cluster_role_bindings() -> list[Obj]:
    """ClusterRoleBindings(): who holds the roles above."""
    return [
        cluster_binding("cluster-admin", *groups(SYSTEM_MASTERS)),
        cluster_binding("system:monitoring", *groups(MONITORING_GROUP)),
        cluster_binding("system:discovery", *groups(AUTHENTICATED)),
        cluster_binding("system:basic-user", *groups(AUTHENTICATED)),
        cluster_binding("system:public-info-viewer", *groups(AUTHENTICATED, UNAUTHENTICATED)),
        cluster_binding("system:node-proxier", *users(KUBE_PROXY)),
        cluster_binding("system:kube-controller-manager", *users(KUBE_CONTROLLER_MANAGER)),
        cluster_binding("system:kube-dns", subject("ServiceAccount", "kube-dns", "kube-system")),
        cluster_binding("system:coredns", subject("ServiceAccount", "coredns", "kube-system")),
        cluster_binding("system:kube-scheduler", *users(KUBE_SCHEDULER)),
        cluster_binding("system:volume-scheduler", *users(KUBE_SCHEDULER)),
        cluster_binding("system:service-account-issuer-discovery", *groups(SERVICE_ACCOUNTS)),
        # Kept without subjects, as upstream: nodes are authorized by the Node authorizer.
        cluster_binding("system:node"),
    ]


KUBELET_CLIENT = "kube-apiserver-kubelet-client"


def server_cluster_role_bindings() -> list[Obj]:
    """This server's own: its kubelet-client identity may use the kubelet API (logs, exec, metrics), as
    deployments bind it to system:kubelet-api-admin instead of making it a cluster administrator."""
    return [
        cluster_binding(
            "system:kubelet-api-admin", *users(KUBELET_CLIENT), name="kube-apiserver:kubelet-apis"
        )
    ]


__all__ = [
    "API_VERSION",
    "AUTOUPDATE",
    "KUBELET_CLIENT",
    "BOOTSTRAP_LABEL",
    "GROUP",
    "NODE_RULES",
    "READ",
    "READ_WRITE",
    "WRITE",
    "binding",
    "cluster_binding",
    "cluster_role",
    "cluster_role_bindings",
    "cluster_roles",
    "events_rule",
    "groups",
    "metadata",
    "server_cluster_role_bindings",
    "subject",
    "users",
]
