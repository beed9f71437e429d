"""The served resource types: group, version, kind, scope, short names, verbs and subresources.

This table drives discovery, routing and storage keys, so `kubectl api-resources` is derived from it
rather than written twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
NO_COLLECTION = ["create", "delete", "get", "list", "patch", "update", "watch"]
STATUS_VERBS = ["get", "patch", "update"]


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = tuple(ALL_VERBS)
    subresources: dict[str, tuple[str, str, str, tuple[str, ...]]] = field(default_factory=dict)
    # Objects of this resource live in another resource's storage (events.k8s.io/v1 events are core
    # events seen through a conversion), named here by that resource's bucket.
    storage_bucket: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def bucket(self) -> str:
        if self.storage_bucket:
            return self.storage_bucket
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def key(self, namespace: str, name: str) -> str:
        return f"/{self.bucket}/{namespace}/{name}" if self.namespaced else f"/{self.bucket}/{name}"

    def prefix(self, namespace: str) -> str:
        if self.namespaced and namespace:
            return f"/{self.bucket}/{namespace}/"
        return f"/{self.bucket}/"


def _status(kind: str, group: str = "", version: str = "v1") -> tuple[str, str, str, tuple[str, ...]]:
    return (group, version, kind, tuple(STATUS_VERBS))


_SCALE = ("autoscaling", "v1", "Scale", ("get", "patch", "update"))

RESOURCES: list[Resource] = [
    Resource("", "v1", "Namespace", "namespaces", "namespace", False, ("ns",), verbs=tuple(NO_COLLECTION),
             subresources={"status": _status("Namespace"), "finalize": ("", "v1", "Namespace", ("update",))}),
    Resource("", "v1", "Node", "nodes", "node", False, ("no",), subresources={"status": _status("Node")}),
    Resource("", "v1", "Pod", "pods", "pod", True, ("po",), ("all",),
             subresources={"status": _status("Pod"), "binding": ("", "v1", "Binding", ("create",)),
                           "log": ("", "v1", "Pod", ("get",))}),
    Resource("", "v1", "Binding", "bindings", "binding", True, verbs=("create",)),
    Resource("", "v1", "Event", "events", "event", True, ("ev",)),
    Resource("", "v1", "ConfigMap", "configmaps", "configmap", True, ("cm",)),
    Resource("", "v1", "Secret", "secrets", "secret", True),
    Resource("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", True, ("sa",)),
    Resource("", "v1", "Service", "services", "service", True, ("svc",), ("all",), verbs=tuple(NO_COLLECTION),
             subresources={"status": _status("Service")}),
    Resource("", "v1", "Endpoints", "endpoints", "endpoints", True, ("ep",)),
    Resource("coordination.k8s.io", "v1", "Lease", "leases", "lease", True),
    Resource("events.k8s.io", "v1", "Event", "events", "event", True, ("ev",), storage_bucket="events"),
    Resource("apps", "v1", "Deployment", "deployments", "deployment", True, ("deploy",), ("all",),
             subresources={"status": _status("Deployment", "apps"), "scale": _SCALE}),
    # Not stored: answers "who am I" for the caller (kubectl auth whoami).
    Resource("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews", "selfsubjectreview", False,
             verbs=("create",)),
    Resource("apps", "v1", "ReplicaSet", "replicasets", "replicaset", True, ("rs",), ("all",),
             subresources={"status": _status("ReplicaSet", "apps"), "scale": _SCALE}),
]

# Upstream lists preferred versions per group in this order.
GROUPS: list[tuple[str, str]] = [
    ("apps", "v1"), ("events.k8s.io", "v1"), ("authentication.k8s.io", "v1"), ("coordination.k8s.io", "v1"),
]


def by_path(group: str, version: str, plural: str) -> Resource | None:
    for r in RESOURCES:
        if r.group == group and r.version == version and r.plural == plural:
            return r
    return None


def by_group_version(group: str, version: str) -> list[Resource]:
    return [r for r in RESOURCES if r.group == group and r.version == version]


def core(plural: str) -> Resource:
    r = by_path("", "v1", plural)
    assert r is not None
    return r
