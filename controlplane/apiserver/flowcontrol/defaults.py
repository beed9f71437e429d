"""Upstream's bootstrap configuration of API priority and fairness
(k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap/default.go, v1): the mandatory objects (`exempt` and
`catch-all`, which the server keeps whatever happens) and the suggested ones (the levels and schemas for
nodes, leader election, controllers, service accounts and everyone else), as plain API objects.

The server creates them at start and keeps them (maintainer.py); the dispatcher falls back on the
mandatory ones while they are missing from the store."""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]

API_VERSION = "flowcontrol.apiserver.k8s.io/v1"
AUTOUPDATE = "apf.kubernetes.io/autoupdate-spec"
EXEMPT = "exempt"
CATCH_ALL = "catch-all"

MASTERS = "system:masters"
NODES = "system:nodes"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
SERVICE_ACCOUNTS = "system:serviceaccounts"
CONTROLLER_MANAGER = "system:kube-controller-manager"
SCHEDULER = "system:kube-scheduler"

_ALL_RESOURCES = {
    "verbs": ["*"],
    "apiGroups": ["*"],
    "resources": ["*"],
    "clusterScope": True,
    "namespaces": ["*"],
}
_ALL_NON_RESOURCES = {"verbs": ["*"], "nonResourceURLs": ["*"]}


def _group(name: str) -> Obj:
    return {"kind": "Group", "group": {"name": name}}


def _user(name: str) -> Obj:
    return {"kind": "User", "user": {"name": name}}


def _kube_system_sa(name: str) -> Obj:
    return {"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": name}}


def _rule(
    verbs: list[str], groups: list[str], resources: list[str], namespaces: list[str], cluster: bool
) -> Obj:
    rule: Obj = {"verbs": verbs, "apiGroups": groups, "resources": resources, "clusterScope": cluster}
    if namespaces:
        rule["namespaces"] = namespaces
    return rule


def _level(name: str, shares: int, lendable: int, queuing: tuple[int, int, int] | None) -> Obj:
    if queuing is None:
        response: Obj = {"type": "Reject"}
    else:
        queues, hand, length = queuing
        response = {
            "type": "Queue",
            "queuing": {"queues": queues, "handSize": hand, "queueLengthLimit": length},
        }
    return {
        "apiVersion": API_VERSION,
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name, "annotations": {AUTOUPDATE: "true"}},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": shares,
                "lendablePercent": lendable,
                "limitResponse": response,
            },
        },
    }


def _schema(name: str, level: str, precedence: int, method: str, *rules: Obj) -> Obj:
    spec: Obj = {
        "priorityLevelConfiguration": {"name": level},
        "matchingPrecedence": precedence,
        "rules": list(rules),
    }
    if method:
        spec["distinguisherMethod"] = {"type": method}
    return {
        "apiVersion": API_VERSION,
        "kind": "FlowSchema",
        "metadata": {"name": name, "annotations": {AUTOUPDATE: "true"}},
        "spec": spec,
    }


def _everything(*subjects: Obj) -> Obj:
    return {
        "subjects": list(subjects),
        "resourceRules": [dict(_ALL_RESOURCES)],
        "nonResourceRules": [dict(_ALL_NON_RESOURCES)],
    }


_LEADER_RULES = [
    _rule(["get", "create", "update"], [""], ["endpoints", "configmaps"], ["kube-system"], False),
    _rule(["get", "create", "update"], ["coordination.k8s.io"], ["leases"], ["*"], False),
]

_EXEMPT_LEVEL: Obj = {
    "apiVersion": API_VERSION,
    "kind": "PriorityLevelConfiguration",
    "metadata": {"name": EXEMPT, "annotations": {AUTOUPDATE: "true"}},
    "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}},
}

MANDATORY_LEVELS: tuple[Obj, ...] = (_EXEMPT_LEVEL, _level(CATCH_ALL, 5, 0, None))
MANDATORY_SCHEMAS: tuple[Obj, ...] = (
    _schema(EXEMPT, EXEMPT, 1, "", _everything(_group(MASTERS))),
    _schema(
        CATCH_ALL, CATCH_ALL, 10000, "ByUser", _everything(_group(UNAUTHENTICATED), _group(AUTHENTICATED))
    ),
)
SUGGESTED_LEVELS: tuple[Obj, ...] = (
    _level("system", 30, 33, (64, 6, 50)),
    _level("node-high", 40, 25, (64, 6, 50)),
    _level("leader-election", 10, 0, (16, 4, 50)),
    _level("workload-high", 40, 50, (128, 6, 50)),
    _level("workload-low", 100, 90, (128, 6, 50)),
    _level("global-default", 20, 50, (128, 6, 50)),
)
SUGGESTED_SCHEMAS: tuple[Obj, ...] = (
    _schema("system-nodes", "system", 500, "ByUser", _everything(_group(NODES))),
    _schema(
        "system-node-high",
        "node-high",
        400,
        "ByUser",
        {
            "subjects": [_group(NODES)],
            "resourceRules": [
                _rule(["*"], [""], ["nodes", "nodes/status"], ["*"], True),
                _rule(["*"], ["coordination.k8s.io"], ["leases"], ["*"], False),
            ],
        },
    ),
    _schema(
        "probes",
        EXEMPT,
        2,
        "",
        {
            "subjects": [_group(UNAUTHENTICATED), _group(AUTHENTICATED)],
            "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}],
        },
    ),
    _schema(
        "system-leader-election",
        "leader-election",
        100,
        "ByUser",
        {
            "subjects": [_user(CONTROLLER_MANAGER), _user(SCHEDULER), _kube_system_sa("*")],
            "resourceRules": copy.deepcopy(_LEADER_RULES),
        },
    ),
    _schema(
        "endpoint-controller",
        "workload-high",
        150,
        "ByUser",
        {
            "subjects": [
                _user(CONTROLLER_MANAGER),
                _kube_system_sa("endpoint-controller"),
                _kube_system_sa("endpointslicemirroring-controller"),
            ],
            "resourceRules": [_rule(["get", "create", "update"], [""], ["endpoints"], ["*"], False)],
        },
    ),
    _schema(
        "workload-leader-election",
        "leader-election",
        200,
        "ByUser",
        {
            "subjects": [_kube_system_sa("*")],
            "resourceRules": [
                _rule(["get", "create", "update"], [""], ["endpoints", "configmaps"], ["*"], False),
                _rule(["get", "create", "update"], ["coordination.k8s.io"], ["leases"], ["*"], False),
            ],
        },
    ),
    _schema(
        "kube-controller-manager", "workload-high", 800, "ByNamespace", _everything(_user(CONTROLLER_MANAGER))
    ),
    _schema("kube-scheduler", "workload-high", 800, "ByNamespace", _everything(_user(SCHEDULER))),
    _schema(
        "kube-system-service-accounts", "workload-high", 900, "ByNamespace", _everything(_kube_system_sa("*"))
    ),
    _schema("service-accounts", "workload-low", 9000, "ByUser", _everything(_group(SERVICE_ACCOUNTS))),
    _schema(
        "global-default",
        "global-default",
        9900,
        "ByUser",
        _everything(_group(UNAUTHENTICATED), _group(AUTHENTICATED)),
    ),
)


def mandatory(plural: str) -> tuple[Obj, ...]:
    return MANDATORY_SCHEMAS if plural == "flowschemas" else MANDATORY_LEVELS


def suggested(plural: str) -> tuple[Obj, ...]:
    return SUGGESTED_SCHEMAS if plural == "flowschemas" else SUGGESTED_LEVELS
