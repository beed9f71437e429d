"""Mirror pods: the API's copy of each static pod, so that kubectl, the scheduler and the controllers see
it (upstream's pkg/kubelet/pod/mirror_client.go and the mirror-pod steps of SyncPod and
HandlePodCleanups).

One reconcile compares the static pods with the mirror pods the pod informer holds (pods with the
`kubernetes.io/config.mirror` annotation):

- a mirror pod with no static pod of its name (manifest deleted), an outdated one (its config.mirror
  hash is not the static pod's config.hash: the manifest was edited) or one being deleted (someone ran
  `kubectl delete` on it) is deleted with grace period 0 and a UID precondition;
- a static pod without a current mirror pod gets one: the static pod with `kubernetes.io/config.mirror`
  set to its hash and one controller owner reference to the Node, as upstream's CreateMirrorPod writes
  it (the NodeRestriction admission plugin insists on exactly that).

Reconciles run when a static pod or a mirror pod changes and every RESYNC seconds besides; nothing is
created before the informer has listed (so no duplicate is attempted) nor before the Node exists (its
UID is the owner). API errors are logged and left to the next pass: the static pods run regardless.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable
from typing import Any

from agent.staticpods.keys import CONFIG_MIRROR, full_name, is_mirror, mirror_hash, static_hash
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.eventwait import wait_event

log = logging.getLogger("agent.staticpods.mirror")

RESYNC = 10.0
Pods = Callable[[], list[dict[str, Any]]]


def mirror_body(static: dict[str, Any], node_name: str, node_uid: str) -> dict[str, Any]:
    """What CreateMirrorPod posts: the static pod, marked with its hash, owned by the Node."""
    body = copy.deepcopy(static)
    meta = body["metadata"]
    meta.pop("uid", None)
    meta["annotations"] = {**(meta.get("annotations") or {}), CONFIG_MIRROR: static_hash(static)}
    meta["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
    ]
    body.pop("status", None)
    return body


def current(mirror: dict[str, Any], static: dict[str, Any] | None) -> bool:
    """upstream's IsMirrorPodOf, and not being deleted."""
    return (
        static is not None
        and not (mirror.get("metadata") or {}).get("deletionTimestamp")
        and mirror_hash(mirror) == static_hash(static)
    )


class MirrorPods:
    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        node_uid: Callable[[], str],
        statics: Pods,
        api_pods: Pods,
        synced: Callable[[], bool],
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.node_uid = node_uid
        self.statics = statics
        self.api_pods = api_pods
        self.synced = synced
        self._wake = asyncio.Event()
        self.created = 0
        self.deleted = 0

    def wake(self) -> None:
        self._wake.set()

    async def reconcile(self) -> None:
        if not self.synced() or not self.node_uid():
            return
        statics = {full_name(p): p for p in self.statics()}
        shown: set[str] = set()
        for mirror in [p for p in self.api_pods() if is_mirror(p)]:
            name = full_name(mirror)
            if current(mirror, statics.get(name)):
                shown.add(name)
            else:
                await self._delete(mirror, "outdated" if name in statics else "orphaned")
        for name, static in statics.items():
            if name not in shown:
                await self._create(static)

    async def _delete(self, mirror: dict[str, Any], why: str) -> None:
        meta = mirror["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": meta["uid"]},
        }
        try:
            await self.client.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body)
        except ApiError as err:
            if not (err.not_found or err.conflict):
                log.warning("mirror pod not deleted pod=%s error=%r", full_name(mirror), str(err))
            return
        self.deleted += 1
        log.info("mirror pod deleted pod=%s uid=%s reason=%s", full_name(mirror), meta["uid"], why)

    async def _create(self, static: dict[str, Any]) -> None:
        namespace = static["metadata"]["namespace"]
        body = mirror_body(static, self.node_name, self.node_uid())
        try:
            created = await self.client.create(f"/api/v1/namespaces/{namespace}/pods", body)
        except ApiError as err:
            if not err.conflict:  # AlreadyExists: the informer has not shown it yet
                log.warning("mirror pod not created pod=%s error=%r", full_name(static), str(err))
            return
        self.created += 1
        log.info("mirror pod created pod=%s uid=%s", full_name(static), created["metadata"]["uid"])

    async def run(self) -> None:
        while True:
            try:
                await wait_event(self._wake, RESYNC)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.reconcile()
            except (ApiError, OSError, TimeoutError) as err:
                log.warning("mirror pods not reconciled error=%r", str(err))
