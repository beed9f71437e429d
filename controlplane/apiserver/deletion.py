"""What a DELETE does to one object, decided without I/O: upstream's rest.BeforeDelete (preconditions,
graceful deletion) and the generic store's Delete (deletionFinalizersForGarbageCollection,
markAsDeleting), so every kind gets cascading deletion the way a genuine API server gives it.

The outcome is one of three steps, and the registry carries it out:

- NOW: remove the object from storage (nothing holds it, no grace period runs);
- MARK: write the changed object (deletionTimestamp, a grace period, the garbage collector's
  finalizers `orphan` or `foregroundDeletion`); it stays until its finalizers are gone and, for a
  graceful kind, until a DELETE with grace period 0;
- PENDING: a graceful deletion is under way and the request shortens nothing; the object is left as it
  is (its finalizers are not touched either, as upstream).

Which finalizers a DELETE leaves, in upstream's order of precedence: the request (`orphanDependents`,
else `propagationPolicy`: Orphan -> `orphan`, Foreground -> `foregroundDeletion`, Background -> neither),
then the finalizers the object already carries, then the kind's default garbage-collection policy
(`Kind.gc_policy`: DeleteDependents = background, OrphanDependents = orphan; Unsupported kinds never get
either finalizer).
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import TYPE_CHECKING, Any

from controlplane.apiserver import errors
from controlplane.apiserver.meta import now, parse_time, timestamp

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.base import Kind
    from controlplane.apiserver.options import DeleteOptions

Obj = dict[str, Any]

ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"
GC_FINALIZERS = (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)

# upstream's rest.GarbageCollectionPolicy values
DELETE_DEPENDENTS = "DeleteDependents"
ORPHAN_DEPENDENTS = "OrphanDependents"
UNSUPPORTED = "Unsupported"


class Step(enum.Enum):
    NOW = "now"
    MARK = "mark"
    PENDING = "pending"


# --- preconditions -----------------------------------------------------------------------------------


def check_preconditions(res: Kind, obj: Obj, options: DeleteOptions) -> None:
    """BeforeDelete's early check: a 409 naming the kind (`Operation cannot be fulfilled on Pod "x": the
    UID in the precondition (...) does not match the UID in record (...). ...`)."""
    meta = obj["metadata"]
    name = meta.get("name", "")
    if options.uid is not None and options.uid != meta.get("uid"):
        raise errors.conflict(
            res.kind,
            res.group,
            name,
            f"the UID in the precondition ({options.uid}) does not match the UID in record ({meta.get('uid')}). "
            "The object might have been deleted and then recreated",
        )
    if options.resource_version is not None and options.resource_version != meta.get("resourceVersion"):
        raise errors.conflict(
            res.kind,
            res.group,
            name,
            f"the ResourceVersion in the precondition ({options.resource_version}) does not match the "
            f"ResourceVersion in record ({meta.get('resourceVersion')}). The object might have been modified",
        )


# --- the garbage collector's finalizers ------------------------------------------------------------------


def should_orphan(finalizers: list[str], options: DeleteOptions, policy: str) -> bool:
    """shouldOrphanDependents."""
    if policy == UNSUPPORTED:
        return False
    if options.orphan_dependents is not None:
        return options.orphan_dependents
    if options.propagation is not None:
        return options.propagation == "Orphan"
    for f in finalizers:
        if f == ORPHAN_FINALIZER:
            return True
        if f == FOREGROUND_FINALIZER:
            return False
    return policy == ORPHAN_DEPENDENTS


def should_delete_dependents(finalizers: list[str], options: DeleteOptions, policy: str) -> bool:
    """shouldDeleteDependents (foreground). `orphanDependents` in either sense never asks for it."""
    if policy == UNSUPPORTED or options.orphan_dependents is not None:
        return False
    if options.propagation is not None:
        return options.propagation == "Foreground"
    for f in finalizers:
        if f == FOREGROUND_FINALIZER:
            return True
        if f == ORPHAN_FINALIZER:
            return False
    return False


def with_gc_finalizers(finalizers: list[str], orphan: bool, foreground: bool) -> list[str] | None:
    """`finalizers` without both GC finalizers, then the wanted ones; None when that is the same set."""
    new = [f for f in finalizers if f not in GC_FINALIZERS]
    if orphan:
        new.append(ORPHAN_FINALIZER)
    if foreground:
        new.append(FOREGROUND_FINALIZER)
    return None if set(new) == set(finalizers) else new


def gc_finalizers(finalizers: list[str], options: DeleteOptions, policy: str) -> list[str] | None:
    """deletionFinalizersForGarbageCollection: the finalizers after the DELETE, None if unchanged."""
    return with_gc_finalizers(
        finalizers,
        should_orphan(finalizers, options, policy),
        should_delete_dependents(finalizers, options, policy),
    )


# --- graceful deletion and marking -----------------------------------------------------------------------


def _bump_generation(meta: Obj) -> None:
    if int(meta.get("generation") or 0) > 0:
        meta["generation"] = int(meta["generation"]) + 1


def before_delete(res: Kind, obj: Obj, options: DeleteOptions) -> tuple[bool, bool]:
    """rest.BeforeDelete after its checks: (graceful, pending). Sets deletionTimestamp and the grace
    period on `obj` when a graceful deletion starts or is shortened."""
    meta = obj["metadata"]
    grace = options.grace_period
    if grace is not None and grace < 0:
        grace = 1  # negative values count as 1 s on the delete path
    current = meta.get("deletionGracePeriodSeconds")
    if current is not None and current < 0:
        meta["deletionGracePeriodSeconds"] = current = 1
    if not res.graceful:
        return False, False
    if meta.get("deletionTimestamp"):
        if not current:
            return False, False  # marked without a grace period (finalizers): may go now
        if grace is None or grace >= current:
            return False, True  # only a shorter grace period changes anything
        started = (parse_time(meta["deletionTimestamp"]) or now()) - dt.timedelta(seconds=current)
        meta["deletionTimestamp"] = timestamp(started + dt.timedelta(seconds=grace))
        meta["deletionGracePeriodSeconds"] = grace
        return True, False
    period = res.deletion_grace(obj, grace)
    meta["deletionTimestamp"] = timestamp(now() + dt.timedelta(seconds=period))
    meta["deletionGracePeriodSeconds"] = period
    res.on_deleting(obj)
    _bump_generation(meta)
    return True, False


def mark_as_deleting(res: Kind, obj: Obj) -> None:
    """markAsDeleting: deletionTimestamp now (unless an earlier one is set), grace period 0."""
    meta = obj["metadata"]
    existing = parse_time(meta.get("deletionTimestamp"))
    if existing is None:
        res.on_deleting(obj)
        _bump_generation(meta)
    if existing is None or existing > now():
        meta["deletionTimestamp"] = timestamp()
    meta["deletionGracePeriodSeconds"] = 0


def plan(res: Kind, obj: Obj, options: DeleteOptions) -> Step:
    """What the DELETE does to `obj` (changed in place for MARK)."""
    graceful, pending = before_delete(res, obj, options)
    if pending:
        return Step.PENDING
    meta = obj["metadata"]
    finalizers = res.deletion_finalizers(obj, options)
    if finalizers is not None:
        if finalizers:
            meta["finalizers"] = finalizers
        else:
            meta.pop("finalizers", None)
    held = res.held(obj)
    if not graceful:
        if held:
            mark_as_deleting(res, obj)
            return Step.MARK
        return Step.NOW
    if held or meta.get("deletionGracePeriodSeconds"):
        return Step.MARK
    return Step.NOW
