"""The ownership graph, built from every watched object's ownerReferences (upstream's GraphBuilder).

Each object is a node keyed by UID with its owners and dependents. An owner named by a reference but not
(yet) seen is a *virtual* node: the collector must ask the API whether it exists, because a dependent
whose owner is gone is garbage. The graph decides nothing by itself; each change returns what the
collector should look at: `("delete", uid)` to check whether an object is garbage (or, for an owner in
foreground deletion, whether it may go now), `("orphan", uid)` to release an owner's dependents.

Pure: no I/O, so its rules are tested without a server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
Work = tuple[str, str]  # ("delete" | "orphan", uid)

ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"


@dataclass(frozen=True)
class Identity:
    api_version: str
    kind: str
    namespace: str
    name: str


@dataclass
class Node:
    uid: str
    identity: Identity
    owners: dict[str, Obj] = field(default_factory=dict)  # owner uid -> ownerReference
    dependents: set[str] = field(default_factory=set)
    being_deleted: bool = False
    deleting_dependents: bool = False
    virtual: bool = False

    def blocking_dependents(self, graph: Graph) -> list[Node]:
        """Dependents whose reference to this node has blockOwnerDeletion (they hold a foreground delete)."""
        out = []
        for uid in self.dependents:
            dep = graph.nodes.get(uid)
            if dep is not None and dep.owners.get(self.uid, {}).get("blockOwnerDeletion"):
                out.append(dep)
        return out


def _identity(obj: Obj) -> Identity:
    meta = obj.get("metadata") or {}
    return Identity(
        str(obj.get("apiVersion", "")),
        str(obj.get("kind", "")),
        str(meta.get("namespace") or ""),
        str(meta.get("name", "")),
    )


class Graph:
    def __init__(self, namespaced: Any) -> None:
        """`namespaced(api_version, kind)` says whether an owner kind lives in a namespace (discovery)."""
        self.nodes: dict[str, Node] = {}
        self.namespaced = namespaced

    def _owner_identity(self, ref: Obj, dependent: Identity) -> Identity:
        ns = (
            dependent.namespace
            if self.namespaced(str(ref.get("apiVersion", "")), str(ref.get("kind", "")))
            else ""
        )
        return Identity(
            str(ref.get("apiVersion", "")), str(ref.get("kind", "")), ns, str(ref.get("name", ""))
        )

    def _link(self, node: Node, ref: Obj, work: list[Work]) -> None:
        owner_uid = str(ref.get("uid", ""))
        owner = self.nodes.get(owner_uid)
        if owner is None:
            owner = Node(owner_uid, self._owner_identity(ref, node.identity), virtual=True)
            self.nodes[owner_uid] = owner
            work.append(("delete", owner_uid))  # does this owner exist at all?
        owner.dependents.add(node.uid)

    def _unlink(self, node: Node, owner_uid: str, work: list[Work]) -> None:
        owner = self.nodes.get(owner_uid)
        if owner is None:
            return
        owner.dependents.discard(node.uid)
        if owner.deleting_dependents:
            work.append(("delete", owner_uid))  # one fewer to wait for
        if owner.virtual and not owner.dependents:
            del self.nodes[owner_uid]

    def observe(self, obj: Obj) -> list[Work]:
        """An object was added or changed."""
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if not uid:
            return []
        work: list[Work] = []
        refs = {
            str(r.get("uid", "")): r
            for r in meta.get("ownerReferences") or []
            if isinstance(r, dict) and r.get("uid")
        }
        node = self.nodes.get(uid)
        if node is None or node.virtual:
            dependents = node.dependents if node is not None else set()
            node = Node(uid, _identity(obj), dependents=dependents)
            self.nodes[uid] = node
            for ref in refs.values():
                self._link(node, ref, work)
        else:
            for owner_uid in set(node.owners) - set(refs):
                self._unlink(node, owner_uid, work)
            for owner_uid, ref in refs.items():
                old = node.owners.get(owner_uid)
                if old is None:
                    self._link(node, ref, work)
                elif old.get("blockOwnerDeletion") and not ref.get("blockOwnerDeletion"):
                    owner = self.nodes.get(owner_uid)
                    if owner is not None and owner.deleting_dependents:
                        work.append(("delete", owner_uid))
        node.owners = refs
        node.identity = _identity(obj)
        deleting = bool(meta.get("deletionTimestamp"))
        finalizers = meta.get("finalizers") or []
        was_deleting_dependents = node.deleting_dependents
        node.being_deleted = deleting
        node.deleting_dependents = deleting and FOREGROUND in finalizers
        if deleting and ORPHAN in finalizers:
            work.append(("orphan", uid))
        if node.deleting_dependents:
            if not was_deleting_dependents:
                work.extend(("delete", dep) for dep in node.dependents)
            work.append(("delete", uid))
        return work

    def forget(self, obj: Obj) -> list[Work]:
        """An object was deleted."""
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        node = self.nodes.get(uid)
        if node is None or node.virtual:
            return []
        work: list[Work] = []
        for owner_uid in list(node.owners):
            self._unlink(node, owner_uid, work)
        if node.dependents:
            # Its dependents outlive it: each is now garbage unless it has another owner. The node stays
            # as a virtual one until they are gone, so a late dependent finds its owner known-missing.
            node.virtual = True
            node.owners = {}
            node.being_deleted = node.deleting_dependents = False
            work.extend(("delete", dep) for dep in node.dependents)
        else:
            del self.nodes[uid]
        return work

    def drop_virtual(self, uid: str) -> list[Work]:
        """A virtual owner turned out not to exist: its dependents are to be checked."""
        node = self.nodes.get(uid)
        if node is None or not node.virtual:
            return []
        return [("delete", dep) for dep in node.dependents]
