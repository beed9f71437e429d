"""Adoption and release of a controller's children (upstream's ControllerRefManager): a ReplicaSet's
pods, a Deployment's ReplicaSets.

A controller owns the children whose controller ownerReference names it. A child its selector matches
(by the child's labels) that has no controller is adopted (a patch adding the reference, guarded by the
child's UID); a child it owns whose labels no longer match is released (the reference removed).
Adoption first re-reads the owner from the API, never the cache, so a controller that is being deleted
(or was replaced under the same name) never adopts. `path_of` says where a child lives (pods by
default).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import quote

from controlplane.controllers.podcontrol import controller_ref
from kubeclient.client import STRATEGIC_PATCH, KubeClient
from kubeclient.errors import ApiError
from kubeclient.informer import Informer, by_controller_uid, meta
from kubeclient.informer import controller_ref as owner_ref_of
from kubeclient.selectors import Selector, SelectorError, from_label_selector

Obj = dict[str, Any]


def pod_path(pod: Obj) -> str:
    meta = pod["metadata"]
    return f"/api/v1/namespaces/{quote(meta['namespace'])}/pods/{quote(meta['name'])}"


def replicaset_path(rs: Obj) -> str:
    meta = rs["metadata"]
    return f"/apis/apps/v1/namespaces/{quote(meta['namespace'])}/replicasets/{quote(meta['name'])}"


def resolve_controller_ref(owners: Informer, kind: str, child: Obj) -> Obj | None:
    """The owner of `kind` in the cache that the child's controller reference names, with that UID
    (upstream's resolveControllerRef): a reference to an owner deleted and recreated under the same name
    resolves to nothing, so the new owner never counts the old one's children."""
    ref = owner_ref_of(child)
    if ref is None or ref.get("kind") != kind:
        return None
    owner = owners.get(f"{meta(child).get('namespace', '')}/{ref.get('name', '')}")
    return owner if owner is not None and meta(owner).get("uid") == ref.get("uid") else None


def orphan_in_namespace(child: Obj) -> list[str]:
    """Index function: the namespace of a child no controller owns (an orphan its owners may adopt)."""
    return [] if owner_ref_of(child) is not None else [str(meta(child).get("namespace", ""))]


# The indexes `claim_candidates` reads: children by their controller's UID, orphans by namespace.
CLAIM_INDEXERS = {"controller": by_controller_uid, "orphans": orphan_in_namespace}


def claim_candidates(children: Informer, owner: Obj) -> list[Obj]:
    """What an owner's claim looks at: the children it controls and the orphans of its namespace, as
    upstream's FilterPodsByOwner reads them from its controller-UID index. A child another controller
    owns is never claimed, so it is never read: a sync costs its own children, not its namespace's
    (a walk of the namespace made each of N owners' syncs cost N)."""
    uid, namespace = meta(owner).get("uid", ""), str(meta(owner).get("namespace", ""))
    return [*children.by_index("controller", uid), *children.by_index("orphans", namespace)]


def label_selector_of(owner: Obj) -> Selector:
    return from_label_selector((owner.get("spec") or {}).get("selector"))


def selecting_owners(
    owners: Informer, child: Obj, selector_of: Callable[[Obj], Selector] = label_selector_of
) -> list[Obj]:
    """The owners in the child's namespace whose selector matches its labels: who may adopt an orphan
    (upstream's getPodReplicaSets / getPodDaemonSets / getPodStatefulSets). An unlabelled child and an
    owner with an empty or invalid selector match nothing, as upstream."""
    labels = meta(child).get("labels") or {}
    if not labels:
        return []
    found = []
    for owner in owners.by_index("namespace", str(meta(child).get("namespace", ""))):
        try:
            selector = selector_of(owner)
        except SelectorError:
            continue
        if not selector.empty and selector.matches(labels):
            found.append(owner)
    return found


class RefManager:
    def __init__(
        self,
        client: KubeClient,
        owner: Obj,
        selector: Selector,
        can_adopt: Callable[[], Awaitable[bool]],
        path_of: Callable[[Obj], str] = pod_path,
    ) -> None:
        self.client = client
        self.owner = owner
        self.selector = selector
        self._can_adopt = can_adopt
        self._checked: bool | None = None
        self._path = path_of

    async def _adoptable(self) -> bool:
        if self._checked is None:
            self._checked = await self._can_adopt()
        return self._checked

    async def claim(self, pods: Sequence[Obj]) -> list[Obj]:
        """The children this owner controls after adopting orphans and releasing what no longer matches."""
        uid = self.owner["metadata"]["uid"]
        claimed: list[Obj] = []
        for pod in pods:
            meta = pod["metadata"]
            ref = owner_ref_of(pod)
            matches = self.selector.matches(meta.get("labels"))
            if ref is not None:
                if ref.get("uid") != uid:
                    continue  # someone else's
                if matches:
                    claimed.append(pod)
                elif not self.owner["metadata"].get("deletionTimestamp"):
                    await self._release(pod)
                continue
            if (
                not matches
                or meta.get("deletionTimestamp")
                or self.owner["metadata"].get("deletionTimestamp")
            ):
                continue
            if not await self._adoptable():
                continue
            adopted = await self._adopt(pod)
            if adopted is not None:
                claimed.append(adopted)
        return claimed

    async def _adopt(self, pod: Obj) -> Obj | None:
        patch = {"metadata": {"ownerReferences": [controller_ref(self.owner)], "uid": pod["metadata"]["uid"]}}
        try:
            return await self.client.patch(self._path(pod), patch, content_type=STRATEGIC_PATCH)
        except ApiError as err:
            if err.not_found or err.conflict or err.invalid:
                return None  # gone, replaced, or being deleted: not ours to have
            raise

    async def _release(self, pod: Obj) -> None:
        patch = {
            "metadata": {
                "ownerReferences": [{"$patch": "delete", "uid": self.owner["metadata"]["uid"]}],
                "uid": pod["metadata"]["uid"],
            }
        }
        try:
            await self.client.patch(self._path(pod), patch, content_type=STRATEGIC_PATCH)
        except ApiError as err:
            if not (err.not_found or err.conflict or err.invalid):
                raise


def recheck(client: KubeClient, path: str, uid: str) -> Callable[[], Awaitable[bool]]:
    """upstream's RecheckDeletionTimestamp: a fresh GET of the owner must show the same UID, not deleting."""

    async def check() -> bool:
        try:
            fresh = await client.get(path)
        except ApiError as err:
            if err.not_found:
                return False
            raise
        meta = fresh.get("metadata") or {}
        return meta.get("uid") == uid and not meta.get("deletionTimestamp")

    return check
