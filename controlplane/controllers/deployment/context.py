"""One sync of one Deployment: the working copy the rollout steps change, and every write they make.

Upstream's steps take the Deployment `d`, change it (status, the revision annotation, on a rollback the
template) and write it with UpdateStatus or Update. `SyncContext` holds that working copy beside the
object as the API server last returned it, so each write sends only what changed and carries the latest
resourceVersion (upstream discards the returned object and its next write of the same sync conflicts; we
keep it and do not pay that 409 and retry).

A /status write carries the revision annotation too: upstream's status strategy resets only the spec
and the labels, and the controller relies on that to publish the revision in the same write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

from controlplane.controllers.deployment.ownwrites import OwnWrites
from controlplane.controllers.deployment.util import annotations, meta
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.events import EventRecorder
from kubeclient.informer import Informer
from kubeclient.objcopy import deep_copy

log = logging.getLogger("controlplane.controllers.deployment")

Obj = dict[str, Any]

DEPLOYMENTS = "/apis/apps/v1/namespaces/{ns}/deployments"
REPLICASETS = "/apis/apps/v1/namespaces/{ns}/replicasets"


def deployment_path(ns: str, name: str = "") -> str:
    base = DEPLOYMENTS.format(ns=quote(ns))
    return f"{base}/{quote(name)}" if name else base


def replicaset_path(ns: str, name: str = "") -> str:
    base = REPLICASETS.format(ns=quote(ns))
    return f"{base}/{quote(name)}" if name else base


def significant(status: Obj) -> Obj:
    """A status as upstream's JSON renders it: zero counts omitted (omitempty), collisionCount kept (a
    pointer), for comparing what we computed with what is stored."""
    return {k: v for k, v in status.items() if k == "collisionCount" or v not in (0, None, [], {})}


def terminating_namespace(err: ApiError) -> bool:
    """The namespace is being deleted: every create fails and nothing is to be done (NamespaceTerminatingCause)."""
    return err.forbidden and "being terminated" in (err.message or "")


@dataclass
class SyncContext:
    client: KubeClient
    recorder: EventRecorder
    replicasets: Informer
    d: Obj  # the working copy
    stored: Obj  # the Deployment as the API server last returned it
    now: Callable[[], datetime]
    enqueue_after: Callable[[float], None]
    enqueue_rate_limited: Callable[[], None]
    own_deployments: OwnWrites = field(default_factory=OwnWrites)
    own_replicasets: OwnWrites = field(default_factory=OwnWrites)
    writes: int = field(default=0)

    @property
    def namespace(self) -> str:
        return str(meta(self.d).get("namespace", ""))

    @property
    def name(self) -> str:
        return str(meta(self.d).get("name", ""))

    def event(self, type_: str, reason: str, message: str) -> None:
        self.recorder.event(self.d, type_, reason, message)

    def cached_replicaset(self, name: str) -> Obj | None:
        key = f"{self.namespace}/{name}"
        return self.own_replicasets.view(key, self.replicasets.get(key))

    # --- the Deployment ------------------------------------------------------------------------------

    def _stored(self, fresh: Obj) -> None:
        fresh.setdefault("apiVersion", "apps/v1")
        fresh.setdefault("kind", "Deployment")
        self.own_deployments.wrote(
            f"{self.namespace}/{self.name}", str(meta(self.stored).get("resourceVersion")), fresh
        )
        self.stored = fresh
        self.d.setdefault("metadata", {})["resourceVersion"] = meta(fresh).get("resourceVersion")
        self.writes += 1

    async def update_status(self) -> None:
        """Store the working copy's status and annotations (one /status write) if they changed."""
        path = deployment_path(self.namespace, self.name)
        status = self.d.get("status") or {}
        changed_annotations = annotations(self.d) != annotations(self.stored)
        if changed_annotations or significant(status) != significant(self.stored.get("status") or {}):
            body = deep_copy(self.stored)
            body["metadata"]["annotations"] = dict(annotations(self.d))
            body["status"] = status
            self._stored(await self.client.replace(f"{path}/status", body))

    async def update(self) -> None:
        """Store the working copy's spec and metadata (a rollback)."""
        body = deep_copy(self.d)
        body.pop("status", None)
        self._stored(await self.client.replace(deployment_path(self.namespace, self.name), body))

    # --- its ReplicaSets -----------------------------------------------------------------------------

    async def update_replicaset(self, rs: Obj) -> Obj:
        self.writes += 1
        updated = await self.client.replace(replicaset_path(self.namespace, meta(rs)["name"]), rs)
        updated.setdefault("apiVersion", "apps/v1")
        updated.setdefault("kind", "ReplicaSet")
        self.own_replicasets.wrote(
            f"{self.namespace}/{meta(rs)['name']}", str(meta(rs).get("resourceVersion")), updated
        )
        return updated

    async def create_replicaset(self, rs: Obj) -> Obj:
        self.writes += 1
        created = await self.client.create(replicaset_path(self.namespace), rs)
        created.setdefault("apiVersion", "apps/v1")
        created.setdefault("kind", "ReplicaSet")
        self.own_replicasets.created(f"{self.namespace}/{meta(created)['name']}", created)
        return created

    async def delete_replicaset(self, rs: Obj) -> None:
        self.writes += 1
        try:
            await self.client.delete(replicaset_path(self.namespace, meta(rs)["name"]))
        except ApiError as err:
            if not err.not_found:
                raise
