"""The five conditions a Terminating namespace carries about its deletion, as upstream's namespace
deleter writes them (pkg/controller/namespace/deletion/status_condition_utils.go): each is always
present, False with its "all is well" reason and message, or True with what went wrong; a condition's
lastTransitionTime moves only when its status flips.

Pure: the finalizer (`nsfinalizer.py`) hands in what its sweep found.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controlplane.apiserver.meta import timestamp

Obj = dict[str, Any]

DISCOVERY = "NamespaceDeletionDiscoveryFailure"
PARSING = "NamespaceDeletionGroupVersionParsingFailure"
CONTENT_FAILURE = "NamespaceDeletionContentFailure"
CONTENT_REMAINING = "NamespaceContentRemaining"
FINALIZERS_REMAINING = "NamespaceFinalizersRemaining"

# type -> (reason, message) when all is well, in upstream's order of the types.
_OK = {
    DISCOVERY: ("ResourcesDiscovered", "All resources successfully discovered"),
    PARSING: ("ParsedGroupVersions", "All legacy kube types successfully parsed"),
    CONTENT_FAILURE: ("ContentDeleted", "All content successfully deleted, may be waiting on finalization"),
    CONTENT_REMAINING: ("ContentRemoved", "All content successfully removed"),
    FINALIZERS_REMAINING: ("ContentRemoved", "All content successfully removed"),
}


@dataclass(frozen=True)
class ContentTotals:
    """What is left after a sweep: `resource.group` -> count, finalizer -> objects it holds; the
    group/versions discovery lists Stale (their APIService is unavailable)."""

    remaining: dict[str, int]
    finalizers: dict[str, int]
    stale: list[str] = field(default_factory=list)


def failures(totals: ContentTotals, delete_errors: list[str]) -> dict[str, tuple[str, str]]:
    """type -> (reason, message) of each condition that is True."""
    out: dict[str, tuple[str, str]] = {}
    if totals.stale:
        # client-go's ErrGroupDiscoveryFailed of StaleGroupVersionErrors, as the namespace controller
        # reports it.
        groups = ", ".join(sorted(f"{gv}: stale GroupVersion discovery: {gv}" for gv in totals.stale))
        out[DISCOVERY] = (
            "DiscoveryFailed",
            f"Discovery failed for some groups, {len(totals.stale)} failing: "
            f"unable to retrieve the complete list of server APIs: {groups}",
        )
    if delete_errors:
        out[CONTENT_FAILURE] = (
            "ContentDeletionFailed",
            f"Failed to delete all resource types, {len(delete_errors)} remaining: "
            + ", ".join(sorted(delete_errors)),
        )
    left = sorted(f"{resource} has {n} resource instances" for resource, n in totals.remaining.items() if n)
    if left:
        out[CONTENT_REMAINING] = ("SomeResourcesRemain", "Some resources are remaining: " + ", ".join(left))
    held = sorted(f"{finalizer} in {n} resource instances" for finalizer, n in totals.finalizers.items() if n)
    if held:
        out[FINALIZERS_REMAINING] = (
            "SomeFinalizerRemain",
            "Some finalizers are remaining: " + ", ".join(held),
        )
    return out


def merge_conditions(conditions: list[Obj], totals: ContentTotals, delete_errors: list[str]) -> list[Obj]:
    """The namespace's conditions with the five brought up to date (others kept as they are)."""
    bad = failures(totals, delete_errors)
    out = [dict(c) for c in conditions]
    by_type = {c.get("type"): c for c in out}
    at = timestamp()
    for kind, ok in _OK.items():
        status, (reason, message) = ("True", bad[kind]) if kind in bad else ("False", ok)
        old = by_type.get(kind)
        if old is None:
            out.append(
                {
                    "type": kind,
                    "status": status,
                    "lastTransitionTime": at,
                    "reason": reason,
                    "message": message,
                }
            )
            continue
        if old.get("status") != status:
            old["lastTransitionTime"] = at
        old.update(status=status, reason=reason, message=message)
    return out
