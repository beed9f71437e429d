"""Writing the Gateway API statuses `gateway.build` decided: each object's status subresource replaced
(PUT, ingress-nginx's `update` verb) only when what it says changed, conditions keeping their
lastTransitionTime while their status stays, and an HTTPRoute's `parents` entries of other controllers
kept as they are. What was written is remembered so an object whose stored form differs in a detail
(a default the server fills in) is not rewritten on every sync."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from ingresscontroller.gateway import GROUP, VERSION, Statuses, with_transition_times
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.informer import Informer

log = logging.getLogger("ingresscontroller.gateway")

Obj = dict[str, Any]
KINDS = {"gatewayclasses": "GatewayClass", "gateways": "Gateway", "httproutes": "HTTPRoute"}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _times(new: list[Obj], old: list[Obj] | None, now: str) -> list[Obj]:
    return with_transition_times(new, old or [], now)


def merged(plural: str, wanted: Obj, old: Obj, controller: str, now: str) -> Obj:
    """The whole status to write: `wanted` with transition times, others' route parents kept."""
    if plural == "httproutes":
        before = {
            json.dumps(p.get("parentRef"), sort_keys=True): p
            for p in old.get("parents") or []
            if p.get("controllerName") == controller
        }
        others = [p for p in old.get("parents") or [] if p.get("controllerName") != controller]
        ours = []
        for parent in wanted["parents"]:
            prior = before.get(json.dumps(parent["parentRef"], sort_keys=True)) or {}
            ours.append({**parent, "conditions": _times(parent["conditions"], prior.get("conditions"), now)})
        return {**old, "parents": others + ours}
    status = {**wanted, "conditions": _times(wanted["conditions"], old.get("conditions"), now)}
    if plural == "gateways":
        before = {entry.get("name"): entry for entry in old.get("listeners") or []}
        status["listeners"] = [
            {
                **entry,
                "conditions": _times(
                    entry["conditions"], (before.get(entry["name"]) or {}).get("conditions"), now
                ),
            }
            for entry in wanted["listeners"]
        ]
    return status


class StatusWriter:
    def __init__(self, client: KubeClient, caches: dict[str, Informer], controller: str) -> None:
        self.client = client
        self.caches = caches
        self.controller = controller
        self._written: dict[tuple[str, str], str] = {}

    async def write(self, statuses: Statuses) -> None:
        now = _now()
        for plural, wanted in (
            ("gatewayclasses", statuses.classes),
            ("gateways", statuses.gateways),
            ("httproutes", statuses.routes),
        ):
            for key, status in wanted.items():
                obj = self.caches[plural].get(key)
                if obj is None:
                    continue
                said = json.dumps(status, sort_keys=True)
                if self._written.get((plural, key)) == said:
                    continue
                old = obj.get("status") or {}
                new = merged(plural, status, old, self.controller, now)
                if new == old:
                    self._written[(plural, key)] = said
                    continue
                meta = obj["metadata"]
                where = f"namespaces/{meta['namespace']}/" if meta.get("namespace") else ""
                path = f"/apis/{GROUP}/{VERSION}/{where}{plural}/{meta['name']}/status"
                body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KINDS[plural], **obj, "status": new}
                try:
                    await self.client.replace(path, body)
                    self._written[(plural, key)] = said
                except ApiError as err:
                    log.info(
                        "status not written %s=%s error=%r (retried on the next change)",
                        plural,
                        key,
                        str(err),
                    )
