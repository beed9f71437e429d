"""Strategic-merge facts shared by the served types: which lists merge by which key (upstream's
`patchMergeKey`/`patchStrategy` struct tags). Each kind module declares its own schema (`Kind.smp`) from
these pieces; lists not named in it are atomic (replaced whole).
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

# What a kind without lists that merge by key declares (only metadata's finalizers and owners merge).
OBJECT: Schema = {"metadata": META}
