"""The controllers' roles (upstream's bootstrappolicy/controller_policy.go): one ClusterRole
`system:controller:<account>` per controller, bound to the service account kube-system/<account> the
controller manager runs that controller as. Only the roles of upstream's default set (no feature-gated
ones); the controllers this project runs use: replicaset-controller, replication-controller,
deployment-controller, generic-garbage-collector, node-controller (node lifecycle and taint eviction),
pod-garbage-collector, service-account-controller, root-ca-cert-publisher,
clusterrole-aggregation-controller, job-controller, ttl-after-finished-controller, cronjob-controller,
daemon-set-controller and statefulset-controller.
"""

from __future__ import annotations

from controlplane.apiserver.rbac.policy import (
    APPS,
    AUTHZ,
    AUTOSCALING,
    BATCH,
    CERTS,
    CORE,
    DISCOVERY,
    EXTENSIONS,
    GROUP,
    POLICY,
    READ,
    STORAGE,
    Obj,
    cluster_binding,
    cluster_role,
    events_rule,
    subject,
)
from controlplane.apiserver.rbac.rules import PolicyRule, rule

PREFIX = "system:controller:"
ADMISSION_REGISTRATION = "admissionregistration.k8s.io"


def _roles() -> dict[str, list[PolicyRule]]:
    return {
        "attachdetach-controller": [
            rule(("list", "watch"), (CORE,), ("persistentvolumes", "persistentvolumeclaims")),
            rule(READ, (CORE,), ("nodes",)),
            rule(("patch", "update"), (CORE,), ("nodes/status",)),
            rule(("list", "watch"), (CORE,), ("pods",)),
            events_rule(),
            rule(("get", "create", "delete", "list", "watch"), (STORAGE,), ("volumeattachments",)),
            rule(READ, (STORAGE,), ("csidrivers",)),
            rule(READ, (STORAGE,), ("csinodes",)),
        ],
        "clusterrole-aggregation-controller": [
            rule(("escalate", "get", "list", "watch", "update", "patch"), (GROUP,), ("clusterroles",)),
        ],
        "cronjob-controller": [
            rule(("get", "list", "watch", "update"), (BATCH,), ("cronjobs",)),
            rule(("get", "list", "watch", "create", "update", "delete", "patch"), (BATCH,), ("jobs",)),
            rule(("update",), (BATCH,), ("cronjobs/status",)),
            rule(("update",), (BATCH,), ("cronjobs/finalizers",)),
            rule(("list", "watch", "delete"), (CORE,), ("pods",)),
            events_rule(),
        ],
        "daemon-set-controller": [
            rule(READ, (EXTENSIONS, APPS), ("daemonsets",)),
            rule(("update",), (EXTENSIONS, APPS), ("daemonsets/status",)),
            rule(("update",), (EXTENSIONS, APPS), ("daemonsets/finalizers",)),
            rule(("list", "watch"), (CORE,), ("nodes",)),
            rule(("list", "watch", "create", "delete", "patch"), (CORE,), ("pods",)),
            rule(("create",), (CORE,), ("pods/binding",)),
            rule(
                ("get", "list", "watch", "create", "delete", "update", "patch"),
                (APPS,),
                ("controllerrevisions",),
            ),
            events_rule(),
        ],
        "deployment-controller": [
            rule(("get", "list", "watch", "update"), (EXTENSIONS, APPS), ("deployments",)),
            rule(("update",), (EXTENSIONS, APPS), ("deployments/status",)),
            rule(("update",), (EXTENSIONS, APPS), ("deployments/finalizers",)),
            rule(
                ("get", "list", "watch", "create", "update", "patch", "delete"),
                (APPS, EXTENSIONS),
                ("replicasets",),
            ),
            rule(("get", "list", "watch", "update"), (CORE,), ("pods",)),
            events_rule(),
        ],
        "disruption-controller": [
            rule(READ, (EXTENSIONS, APPS), ("deployments",)),
            rule(READ, (APPS, EXTENSIONS), ("replicasets",)),
            rule(READ, (CORE,), ("replicationcontrollers",)),
            rule(READ, (POLICY,), ("poddisruptionbudgets",)),
            rule(READ, (APPS,), ("statefulsets",)),
            rule(("update",), (POLICY,), ("poddisruptionbudgets/status",)),
            rule(("patch", "update"), (CORE,), ("pods/status",)),
            rule(("get",), ("*",), ("*/scale",)),
            events_rule(),
        ],
        "endpoint-controller": [
            rule(READ, (CORE,), ("services", "pods")),
            rule(("get", "list", "watch", "create", "update", "delete"), (CORE,), ("endpoints",)),
            rule(("create",), (CORE,), ("endpoints/restricted",)),
            events_rule(),
        ],
        "endpointslice-controller": [
            rule(READ, (CORE,), ("services", "pods", "nodes")),
            rule(("update",), (CORE,), ("services/finalizers",)),
            rule(("get", "list", "watch", "create", "update", "delete"), (DISCOVERY,), ("endpointslices",)),
            events_rule(),
        ],
        "endpointslicemirroring-controller": [
            rule(READ, (CORE,), ("services", "endpoints")),
            rule(("update",), (CORE,), ("services/finalizers",)),
            rule(("update",), (CORE,), ("endpoints/finalizers",)),
            rule(("get", "list", "watch", "create", "update", "delete"), (DISCOVERY,), ("endpointslices",)),
            events_rule(),
        ],
        "ephemeral-volume-controller": [
            rule(READ, (CORE,), ("pods",)),
            rule(("update",), (CORE,), ("pods/finalizers",)),
            rule(("get", "list", "watch", "create"), (CORE,), ("persistentvolumeclaims",)),
            events_rule(),
        ],
        "expand-controller": [
            rule(("get", "list", "watch", "update", "patch"), (CORE,), ("persistentvolumes",)),
            rule(("update", "patch"), (CORE,), ("persistentvolumeclaims/status",)),
            rule(READ, (CORE,), ("persistentvolumeclaims",)),
            events_rule(),
            rule(("get",), (CORE,), ("services",)),
        ],
        "generic-garbage-collector": [
            rule(("get", "list", "watch", "patch", "update", "delete"), ("*",), ("*",)),
            events_rule(),
        ],
        "horizontal-pod-autoscaler": [
            rule(READ, (AUTOSCALING,), ("horizontalpodautoscalers",)),
            rule(("update",), (AUTOSCALING,), ("horizontalpodautoscalers/status",)),
            rule(("get", "update"), ("*",), ("*/scale",)),
            rule(("list", "watch"), (CORE,), ("pods",)),
            rule(("list", "watch"), ("metrics.k8s.io",), ("pods",)),
            rule(READ, ("custom.metrics.k8s.io",), ("*",)),
            rule(READ, ("external.metrics.k8s.io",), ("*",)),
            events_rule(),
        ],
        "job-controller": [
            rule(("get", "list", "watch", "update", "patch"), (BATCH,), ("jobs",)),
            rule(("update",), (BATCH,), ("jobs/status",)),
            rule(("update",), (BATCH,), ("jobs/finalizers",)),
            rule(("list", "watch", "create", "delete", "patch"), (CORE,), ("pods",)),
            events_rule(),
        ],
        "namespace-controller": [
            rule(("get", "list", "watch", "delete"), (CORE,), ("namespaces",)),
            rule(("update",), (CORE,), ("namespaces/finalize", "namespaces/status")),
            rule(("get", "list", "watch", "delete", "deletecollection"), ("*",), ("*",)),
        ],
        "node-controller": [
            rule(("get", "list", "watch", "update", "delete", "patch"), (CORE,), ("nodes",)),
            rule(("patch", "update"), (CORE,), ("nodes/status",)),
            rule(("patch", "update"), (CORE,), ("pods/status",)),
            rule(("list", "watch", "get", "delete"), (CORE,), ("pods",)),
            events_rule(),
        ],
        "persistent-volume-binder": [
            rule(("get", "list", "watch", "update", "create", "delete"), (CORE,), ("persistentvolumes",)),
            rule(("update",), (CORE,), ("persistentvolumes/status",)),
            rule(("get", "list", "watch", "update"), (CORE,), ("persistentvolumeclaims",)),
            rule(("update",), (CORE,), ("persistentvolumeclaims/status",)),
            rule(("list", "watch", "get", "create", "delete"), (CORE,), ("pods",)),
            rule(READ, (STORAGE,), ("storageclasses",)),
            rule(("list", "watch"), (CORE,), ("nodes",)),
            events_rule(),
            rule(("watch",), (CORE,), ("events",)),
            rule(("get",), (CORE,), ("services",)),
        ],
        "pod-garbage-collector": [
            rule(("list", "watch", "delete"), (CORE,), ("pods",)),
            rule(READ, (CORE,), ("nodes",)),
            rule(("patch",), (CORE,), ("pods/status",)),
        ],
        "replicaset-controller": [
            rule(("get", "list", "watch", "update"), (APPS, EXTENSIONS), ("replicasets",)),
            rule(("update",), (APPS, EXTENSIONS), ("replicasets/status",)),
            rule(("update",), (APPS, EXTENSIONS), ("replicasets/finalizers",)),
            rule(("list", "watch", "patch", "create", "delete"), (CORE,), ("pods",)),
            events_rule(),
        ],
        "replication-controller": [
            rule(("get", "list", "watch", "update"), (CORE,), ("replicationcontrollers",)),
            rule(("update",), (CORE,), ("replicationcontrollers/status",)),
            rule(("update",), (CORE,), ("replicationcontrollers/finalizers",)),
            rule(("list", "watch", "patch", "create", "delete"), (CORE,), ("pods",)),
            events_rule(),
        ],
        "resourcequota-controller": [
            rule(("list", "watch"), ("*",), ("*",)),
            rule(("update",), (CORE,), ("resourcequotas/status",)),
            events_rule(),
        ],
        "route-controller": [
            rule(("list", "watch"), (CORE,), ("nodes",)),
            rule(("patch",), (CORE,), ("nodes/status",)),
            events_rule(),
        ],
        "service-account-controller": [
            rule(("create",), (CORE,), ("serviceaccounts",)),
            events_rule(),
        ],
        "service-controller": [
            rule(READ, (CORE,), ("services",)),
            rule(("patch", "update"), (CORE,), ("services/status",)),
            rule(("list", "watch"), (CORE,), ("nodes",)),
            events_rule(),
        ],
        "statefulset-controller": [
            rule(("list", "watch"), (CORE,), ("pods",)),
            rule(READ, (APPS,), ("statefulsets",)),
            rule(("update",), (APPS,), ("statefulsets/status",)),
            rule(("update",), (APPS,), ("statefulsets/finalizers",)),
            rule(("get", "create", "delete", "update", "patch"), (CORE,), ("pods",)),
            rule(
                ("get", "create", "delete", "update", "patch", "list", "watch"),
                (APPS,),
                ("controllerrevisions",),
            ),
            rule(("get", "create", "list", "watch"), (CORE,), ("persistentvolumeclaims",)),
            rule(("update", "delete"), (CORE,), ("persistentvolumeclaims",)),
            rule(("update",), (CORE,), ("pods/finalizers",)),
            events_rule(),
        ],
        "ttl-controller": [
            rule(("update", "patch", "list", "watch"), (CORE,), ("nodes",)),
            events_rule(),
        ],
        "certificate-controller": [
            rule(("get", "list", "watch", "delete"), (CERTS,), ("certificatesigningrequests",)),
            rule(
                ("update",),
                (CERTS,),
                ("certificatesigningrequests/status", "certificatesigningrequests/approval"),
            ),
            rule(("approve",), (CERTS,), ("signers",), ("kubernetes.io/kube-apiserver-client-kubelet",)),
            rule(
                ("sign",),
                (CERTS,),
                ("signers",),
                (
                    "kubernetes.io/legacy-unknown",
                    "kubernetes.io/kube-apiserver-client",
                    "kubernetes.io/kube-apiserver-client-kubelet",
                    "kubernetes.io/kubelet-serving",
                ),
            ),
            rule(("create",), (AUTHZ,), ("subjectaccessreviews",)),
            events_rule(),
        ],
        "pvc-protection-controller": [
            rule(("get", "list", "watch", "update"), (CORE,), ("persistentvolumeclaims",)),
            rule(("list", "watch", "get"), (CORE,), ("pods",)),
            events_rule(),
        ],
        "pv-protection-controller": [
            rule(("get", "list", "watch", "update"), (CORE,), ("persistentvolumes",)),
            events_rule(),
        ],
        "ttl-after-finished-controller": [
            rule(("get", "list", "watch", "delete"), (BATCH,), ("jobs",)),
            events_rule(),
        ],
        "root-ca-cert-publisher": [
            rule(("create", "update"), (CORE,), ("configmaps",)),
            events_rule(),
        ],
        "validatingadmissionpolicy-status-controller": [
            rule(READ, (ADMISSION_REGISTRATION,), ("validatingadmissionpolicies",)),
            rule(
                ("get", "patch", "update"), (ADMISSION_REGISTRATION,), ("validatingadmissionpolicies/status",)
            ),
            events_rule(),
        ],
        # k3s's local-path-provisioner-role (its pods rule is a Role in kube-system there).
        "local-path-provisioner-service-account": [
            rule(READ, (CORE,), ("nodes", "persistentvolumeclaims", "configmaps", "pods", "pods/log")),
            rule(
                ("get", "list", "watch", "create", "patch", "update", "delete"),
                (CORE,),
                ("persistentvolumes",),
            ),
            rule(("create", "patch"), (CORE,), ("events",)),
            rule(READ, (STORAGE,), ("storageclasses",)),
            rule(("create", "delete"), (CORE,), ("pods",)),
        ],
        "legacy-service-account-token-cleaner": [
            rule(
                ("get",), (CORE,), ("configmaps",), ("kube-apiserver-legacy-service-account-token-tracking",)
            ),
            rule(("patch", "delete"), (CORE,), ("secrets",)),
        ],
    }


def controller_roles() -> list[Obj]:
    return [cluster_role(PREFIX + account, rules) for account, rules in _roles().items()]


def controller_role_bindings() -> list[Obj]:
    """Each role to its service account in kube-system (addControllerRole)."""
    return [
        cluster_binding(PREFIX + account, subject("ServiceAccount", account, "kube-system"))
        for account in _roles()
    ]


__all__ = ["PREFIX", "controller_role_bindings", "controller_roles"]
