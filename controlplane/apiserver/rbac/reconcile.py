"""The bootstrap policy at every start (upstream's storage_rbac.go PostStartHook and the reconciliation
package): a missing bootstrap role or binding is created; an existing one is reconciled unless its
`rbac.authorization.kubernetes.io/autoupdate` annotation is "false": the expected labels and
annotations are added (existing values win), rules the role lacks are added (extra rules stay),
missing aggregation selectors are added, binding subjects missing are added (extra subjects stay), and
a binding whose roleRef differs is recreated. So an upgraded server brings its new rules to an old
cluster, and an administrator's additions survive restarts.
"""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.options import DeleteOptions
from controlplane.apiserver.rbac.controller_policy import controller_role_bindings, controller_roles
from controlplane.apiserver.rbac.covers import covers
from controlplane.apiserver.rbac.namespace_policy import namespace_role_bindings, namespace_roles
from controlplane.apiserver.rbac.policy import AUTOUPDATE, cluster_role_bindings, cluster_roles
from controlplane.apiserver.rbac.rules import parse_rules

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.base import Kind
    from controlplane.apiserver.kinds.ports import Registry

log = logging.getLogger("controlplane.apiserver.rbac")
Obj = dict[str, Any]


@dataclass(frozen=True)
class PolicyKinds:
    role: Kind
    cluster_role: Kind
    role_binding: Kind
    cluster_role_binding: Kind


def bootstrap_objects(extra_cluster_role_bindings: list[Obj] | None = None) -> list[tuple[str, Obj]]:
    """(kind, object) for every bootstrap object, roles before bindings."""
    return (
        [("ClusterRole", o) for o in cluster_roles() + controller_roles()]
        + [("Role", o) for o in namespace_roles()]
        + [
            ("ClusterRoleBinding", o)
            for o in cluster_role_bindings()
            + controller_role_bindings()
            + (extra_cluster_role_bindings or [])
        ]
        + [("RoleBinding", o) for o in namespace_role_bindings()]
    )


def _merge_meta(expected: Obj, existing: Obj) -> bool:
    """Add the expected labels and annotations; the existing values win. True if anything changed."""
    changed = False
    meta = existing.setdefault("metadata", {})
    for field in ("labels", "annotations"):
        merged = {**(expected["metadata"].get(field) or {}), **(meta.get(field) or {})}
        if merged != (meta.get(field) or {}):
            meta[field] = merged
            changed = True
    return changed


def reconcile_role(expected: Obj, existing: Obj) -> Obj | None:
    """computeReconciledRole in the union mode: the object to write, or None when nothing changes."""
    result = copy.deepcopy(existing)
    changed = _merge_meta(expected, result)
    _, missing = covers(parse_rules(existing.get("rules")), parse_rules(expected.get("rules")))
    if missing:
        result["rules"] = list(existing.get("rules") or []) + [r.to_dict() for r in missing]
        changed = True
    want, have = expected.get("aggregationRule"), existing.get("aggregationRule")
    if want is None and have is not None:
        result.pop("aggregationRule", None)
        changed = True
    elif want is not None:
        have_selectors = list((have or {}).get("clusterRoleSelectors") or [])
        extra = [s for s in want.get("clusterRoleSelectors") or [] if s not in have_selectors]
        if extra:
            result["aggregationRule"] = {"clusterRoleSelectors": have_selectors + extra}
            changed = True
    return result if changed else None


def reconcile_binding(expected: Obj, existing: Obj) -> tuple[Obj | None, bool]:
    """computeReconciledRoleBinding in the union mode: (object to write or None, recreate?)."""
    if (existing.get("roleRef") or {}) != expected["roleRef"]:
        return copy.deepcopy(expected), True
    result = copy.deepcopy(existing)
    changed = _merge_meta(expected, result)
    have = list(existing.get("subjects") or [])
    missing = [s for s in expected.get("subjects") or [] if not any(_same_subject(s, h) for h in have)]
    if missing:
        result["subjects"] = have + missing
        changed = True
    return (result if changed else None), False


def _same_subject(a: Obj, b: Obj) -> bool:
    return all((a.get(k) or "") == (b.get(k) or "") for k in ("kind", "apiGroup", "name", "namespace"))


async def ensure_policy(
    registry: Registry, kinds: PolicyKinds, extra_cluster_role_bindings: list[Obj] | None = None
) -> None:
    """Create what is missing and reconcile what exists, for every bootstrap object."""
    by_kind = {
        "Role": kinds.role,
        "ClusterRole": kinds.cluster_role,
        "RoleBinding": kinds.role_binding,
        "ClusterRoleBinding": kinds.cluster_role_binding,
    }
    created = updated = 0
    for kind_name, expected in bootstrap_objects(extra_cluster_role_bindings):
        kind = by_kind[kind_name]
        meta = expected["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        cached = registry.cache.get(kind.key(namespace, name))
        try:
            if cached is None:
                await registry.create(kind, namespace, copy.deepcopy(expected))
                created += 1
                continue
            existing = json.loads(cached.raw)
            if (existing["metadata"].get("annotations") or {}).get(AUTOUPDATE) == "false":
                continue  # protected by its owner
            if kind_name.endswith("Binding"):
                result, recreate = reconcile_binding(expected, existing)
                if recreate:
                    await registry.delete(kind, namespace, name, DeleteOptions())
                    await registry.create(kind, namespace, result or copy.deepcopy(expected))
                    updated += 1
                    continue
            else:
                result = reconcile_role(expected, existing)
            if result is not None:
                await registry.update(kind, namespace, name, result)
                updated += 1
        except ApiError as err:
            # Another server (or an administrator) got there first; the next start tries again.
            log.warning("event=rbac_reconcile_failed kind=%s name=%s error=%r", kind_name, name, err.message)
    if created or updated:
        log.info("event=rbac_bootstrap created=%d reconciled=%d", created, updated)


__all__ = ["PolicyKinds", "bootstrap_objects", "ensure_policy", "reconcile_binding", "reconcile_role"]
