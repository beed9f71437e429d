"""The ClusterRole aggregation controller (upstream's pkg/controller/clusterroleaggregation): a ClusterRole
with an aggregationRule gets, as its rules, the rules of every other ClusterRole its selectors match
(in name order, each rule once). The bootstrap policy's admin, edit and view are built so from the
system:aggregate-to-* roles; a role labelled `rbac.authorization.k8s.io/aggregate-to-view: "true"`
extends view (and, through it, edit and admin) as soon as it exists.

Any ClusterRole change enqueues every aggregated role, as upstream (the set is small and the
dependencies between aggregated roles are not known); the rules are written by server-side apply with
the field manager `clusterrole-aggregation-controller`, forced.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from controlplane.controllers.base import Controller, ControllerContext
from kubeclient.client import APPLY_PATCH
from kubeclient.errors import ApiError
from kubeclient.informer import meta
from kubeclient.selectors import SelectorError, from_label_selector

Obj = dict[str, Any]
PATH = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
FIELD_MANAGER = "clusterrole-aggregation-controller"


def aggregated_rules(role: Obj, roles: list[Obj]) -> list[Obj]:
    """The rules the aggregation rule of `role` gathers from `roles` (selector by selector, roles in
    name order, each rule once)."""
    out: list[Obj] = []
    selectors = ((role.get("aggregationRule") or {}).get("clusterRoleSelectors")) or []
    ordered = sorted(roles, key=lambda r: meta(r).get("name", ""))
    for raw in selectors:
        selector = from_label_selector(raw)
        for other in ordered:
            if meta(other).get("name") == meta(role).get("name") or not selector.matches(
                meta(other).get("labels") or {}
            ):
                continue
            for rule in other.get("rules") or []:
                if rule not in out:
                    out.append(rule)
    return out


class ClusterRoleAggregationController(Controller):
    name = "clusterrole-aggregation"
    account = "clusterrole-aggregation-controller"
    workers = 1

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.roles = ctx.informers.get(PATH)
        self.roles.add_handler(
            on_add=lambda _r: self._enqueue_all(),
            on_update=lambda _o, _n: self._enqueue_all(),
            on_delete=lambda _r: self._enqueue_all(),
        )

    def _enqueue_all(self) -> None:
        for role in self.roles.list():
            if role.get("aggregationRule") is not None:
                self.enqueue(role)

    async def sync(self, key: str) -> None:
        role = self.roles.get(key)
        if role is None or role.get("aggregationRule") is None:
            return
        try:
            rules = aggregated_rules(role, self.roles.list())
        except SelectorError:
            return  # validation refuses such selectors; nothing to aggregate
        if rules == (role.get("rules") or []):
            return
        name = meta(role)["name"]
        body = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": rules,
        }
        try:
            await self.client.patch(
                f"{PATH}/{quote(name)}",
                json.dumps(body).encode(),
                content_type=APPLY_PATCH,
                fieldManager=FIELD_MANAGER,
                force="true",
            )
        except ApiError as err:
            if not err.not_found:
                raise


__all__ = ["ClusterRoleAggregationController", "aggregated_rules"]
