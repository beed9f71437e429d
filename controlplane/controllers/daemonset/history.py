"""A DaemonSet's history in ControllerRevisions (upstream's daemon_controller.go constructHistory and
cleanupHistory), without I/O.

Each template the DaemonSet ran is one revision named `<daemonset>-<hash>`, labelled with the template's
labels and `controller-revision-hash`, owned by the DaemonSet, whose `data` is the strategic merge patch
that puts that template back (`{"spec":{"template":{..., "$patch":"replace"}}}`): what `kubectl rollout
undo daemonset` applies. The current template's revision has the highest number; going back to an older
template renumbers its revision rather than making a new one.
"""

from __future__ import annotations

import copy
from typing import Any

from controlplane.controllers.deployment.hashing import compute_hash

Obj = dict[str, Any]

HASH_LABEL = "controller-revision-hash"
GENERATION_LABEL = "pod-template-generation"


def patch_of(ds: Obj) -> Obj:
    """getPatch: the patch that restores this DaemonSet's template."""
    template = copy.deepcopy((ds.get("spec") or {}).get("template") or {})
    template["$patch"] = "replace"
    return {"spec": {"template": template}}


def template_hash(ds: Obj) -> str:
    collisions = (ds.get("status") or {}).get("collisionCount")
    return compute_hash((ds.get("spec") or {}).get("template") or {}, collisions)


def revision_number(revision: Obj) -> int:
    return int(revision.get("revision") or 0)


def new_revision(ds: Obj, number: int, kind: str = "DaemonSet") -> Obj:
    """The ControllerRevision for the owner's current template (a DaemonSet's, or a StatefulSet's
    with `kind`: upstream builds both with history.NewControllerRevision)."""
    meta = ds["metadata"]
    digest = template_hash(ds)
    labels = dict(((ds.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {})
    labels[HASH_LABEL] = digest
    out_meta: Obj = {
        "name": f"{meta['name']}-{digest}",
        "namespace": meta["namespace"],
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": kind,
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if meta.get("annotations"):
        out_meta["annotations"] = dict(meta["annotations"])
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": out_meta,
        "data": patch_of(ds),
        "revision": number,
    }


def matches(ds: Obj, revision: Obj) -> bool:
    """Whether the revision holds the DaemonSet's current template (Match: the patch data is equal)."""
    return revision.get("data") == patch_of(ds)


def to_delete(revisions: list[Obj], in_use: set[str], current: str, limit: int) -> list[Obj]:
    """cleanupHistory: the oldest revisions no live pod runs, beyond revisionHistoryLimit."""
    idle = [
        r
        for r in revisions
        if (r["metadata"].get("labels") or {}).get(HASH_LABEL) not in in_use
        and r["metadata"]["name"] != current
    ]
    extra = len(idle) - limit
    if extra <= 0:
        return []
    return sorted(idle, key=revision_number)[:extra]
