"""Strategic-merge facts for the served types: which lists merge by which key (upstream's
`patchMergeKey`/`patchStrategy` struct tags). Lists not named here are atomic (replaced whole).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ListSpec:
    """A list merged by `merge_key` (None: a primitive list merged as a set); `item` is its schema."""

    merge_key: str | None
    item: dict[str, Any] | None = None


# field -> nested struct schema (a dict) or a ListSpec
Schema = dict[str, Any]

META: Schema = {"finalizers": ListSpec(None), "ownerReferences": ListSpec("uid")}
CONTAINER: Schema = {
    "ports": ListSpec("containerPort"),
    "env": ListSpec("name"),
    "volumeMounts": ListSpec("mountPath"),
    "volumeDevices": ListSpec("devicePath"),
    "resources": {"claims": ListSpec("name")},
}
POD_SPEC: Schema = {
    "containers": ListSpec("name", CONTAINER),
    "initContainers": ListSpec("name", CONTAINER),
    "ephemeralContainers": ListSpec("name", CONTAINER),
    "volumes": ListSpec("name"),
    "imagePullSecrets": ListSpec("name"),
    "hostAliases": ListSpec("ip"),
    "topologySpreadConstraints": ListSpec("topologyKey"),
    "resourceClaims": ListSpec("name"),
    "schedulingGates": ListSpec("name"),
}
POD_STATUS: Schema = {
    "conditions": ListSpec("type"),
    "podIPs": ListSpec("ip"),
    "hostIPs": ListSpec("ip"),
    "resourceClaimStatuses": ListSpec("name"),
}
TEMPLATE: Schema = {"metadata": META, "spec": POD_SPEC}
CONDITIONS: Schema = {"conditions": ListSpec("type")}

SCHEMAS: dict[str, Schema] = {
    "Pod": {"metadata": META, "spec": POD_SPEC, "status": POD_STATUS},
    "Deployment": {"metadata": META, "spec": {"template": TEMPLATE}, "status": CONDITIONS},
    "ReplicaSet": {"metadata": META, "spec": {"template": TEMPLATE}, "status": CONDITIONS},
    "Node": {
        "metadata": META,
        "spec": {"podCIDRs": ListSpec(None)},
        "status": {"conditions": ListSpec("type"), "addresses": ListSpec("type")},
    },
    "Service": {"metadata": META, "spec": {"ports": ListSpec("port")}, "status": CONDITIONS},
    "Namespace": {"metadata": META, "status": CONDITIONS},
    "ServiceAccount": {"metadata": META, "secrets": ListSpec("name"), "imagePullSecrets": ListSpec("name")},
}


def schema_for(kind: str) -> Schema:
    return SCHEMAS.get(kind, {"metadata": META})

