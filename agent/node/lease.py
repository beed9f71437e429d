"""The node's heartbeat: Lease kube-node-lease/<node>, renewed every quarter of its duration.

A Lease write is far cheaper for the control plane than a Node status write, which is why upstream moved
the heartbeat here. The Lease is owned by the Node, so deleting the Node garbage-collects it. A failed
renewal is retried with backoff (200 ms up to 7 s), not left for the next period.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubeclient.backoff import Backoff
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError

log = logging.getLogger("agent.node.lease")

NAMESPACE = "kube-node-lease"


def micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseController:
    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        node_uid: Callable[[], str],
        duration_seconds: int = 40,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.node_uid = node_uid
        self.duration = duration_seconds
        self.interval = duration_seconds * 0.25
        self.lease: dict[str, Any] | None = None
        self.renewals = 0

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{self.node_name}"

    def _owner(self) -> list[dict[str, Any]]:
        uid = self.node_uid()
        if not uid:
            return []
        return [{"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": uid}]

    def _spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.node_name,
            "leaseDurationSeconds": self.duration,
            "renewTime": micro_time(),
        }

    async def renew(self) -> None:
        """One renewal: update the lease we hold, or create it (and its namespace) if missing."""
        if self.lease is None:
            try:
                self.lease = await self.client.get(self.path)
            except ApiError as err:
                if not err.not_found:
                    raise
                await self._create()
                return
        body = dict(self.lease)
        meta = dict(body.get("metadata") or {})
        if not meta.get("ownerReferences") and self._owner():
            meta["ownerReferences"] = self._owner()
        body["metadata"] = meta
        body["spec"] = {**(body.get("spec") or {}), **self._spec()}
        try:
            self.lease = await self.client.replace(self.path, body)
        except ApiError as err:
            self.lease = None  # re-read next time: someone else wrote it, or it was deleted
            if err.not_found:
                await self._create()
                return
            raise
        self.renewals += 1

    async def _create(self) -> None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.node_name, "namespace": NAMESPACE, "ownerReferences": self._owner()},
            "spec": self._spec(),
        }
        collection = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
        try:
            self.lease = await self.client.create(collection, body)
        except ApiError as err:
            if not err.not_found:
                raise
            # A control plane that has not made kube-node-lease yet: make it, then the Lease.
            try:
                await self.client.create(
                    "/api/v1/namespaces",
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                )
            except ApiError as ns_err:
                if not ns_err.conflict:
                    raise
            self.lease = await self.client.create(collection, body)
        self.renewals += 1
        log.info("lease created node=%s", self.node_name)

    async def run(self) -> None:
        backoff = Backoff(initial=0.2, maximum=7.0)
        while True:
            try:
                await self.renew()
                backoff.reset()
                await asyncio.sleep(self.interval * (1 + random.uniform(0, 0.04)))
            except ApiError as err:
                delay = backoff.next()
                log.warning(
                    "lease renewal failed node=%s error=%r retry_in=%.1fs", self.node_name, str(err), delay
                )
                await asyncio.sleep(delay)
