"""Whether a ReferenceGrant lets an object refer to one in another namespace, without I/O.

The Gateway API allows a reference across namespaces (an HTTPRoute's backendRef to a Service, a
Gateway listener's certificateRef to a Secret) only when the target's namespace holds a ReferenceGrant
(gateway.networking.k8s.io/v1beta1) with a `from` entry naming the referring kind, group and namespace
and a `to` entry naming the target's group and kind, and its name when `to.name` is set. A reference
within one namespace needs none.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
GATEWAY_GROUP = "gateway.networking.k8s.io"


def permitted(
    grants: list[Obj],
    source: tuple[str, str],  # (kind, namespace) of the referring object, in the Gateway API group
    target: tuple[str, str, str, str],  # (group, kind, namespace, name)
) -> bool:
    kind, namespace = source
    group, target_kind, target_namespace, name = target
    if namespace == target_namespace:
        return True
    for grant in grants:
        if (grant.get("metadata") or {}).get("namespace") != target_namespace:
            continue
        spec = grant.get("spec") or {}
        allowed_from = any(
            f.get("group") == GATEWAY_GROUP and f.get("kind") == kind and f.get("namespace") == namespace
            for f in spec.get("from") or []
        )
        allowed_to = any(
            (t.get("group") or "") == group
            and t.get("kind") == target_kind
            and (not t.get("name") or t.get("name") == name)
            for t in spec.get("to") or []
        )
        if allowed_from and allowed_to:
            return True
    return False
