"""The rollout arithmetic of a Deployment, pure (upstream's pkg/controller/deployment/util).

Everything a rollout decides is computed here from the Deployment and its ReplicaSets as the API shows
them (JSON dicts), with no I/O: how far maxSurge and maxUnavailable reach (surge rounds up, unavailable
rounds down, both zero means one unavailable), how many replicas the new ReplicaSet may have, which
ReplicaSet is new and which are old, revisions and the annotations that carry them, the proportions of
a scaling event, and when a rollout is complete, progressing or out of time. The modules that write
(sync, rolling, recreate, progress) call these and act on the answers, so the answers can be tested
against upstream's worked examples in milliseconds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from functools import cmp_to_key
from typing import Any

from controlplane.controllers.deployment.conditions import (
    NEW_RS_AVAILABLE,
    PROGRESSING,
    TIMED_OUT,
    get_condition,
)
from controlplane.controllers.podutil import parse_time
from kubeclient.objcopy import deep_copy

Obj = dict[str, Any]

UNIQUE_LABEL_KEY = "pod-template-hash"  # apps/v1 DefaultDeploymentUniqueLabelKey
REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
ROLLBACK_TO = "deprecated.deployment.rollback.to"  # apps/v1 DeprecatedRollbackTo
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# Never copied from a Deployment to its ReplicaSets (nor back on a rollback).
ANNOTATIONS_TO_SKIP = frozenset(
    {LAST_APPLIED, REVISION, REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS, ROLLBACK_TO}
)
MAX_REVISION_HISTORY_CHARS = 2000  # sync.go maxRevHistoryLengthInChars
MAX_INT32 = 2**31 - 1
_NEVER = datetime.min.replace(tzinfo=UTC)

ROLLING_UPDATE = "RollingUpdate"
RECREATE = "Recreate"


class InvalidIntOrPercent(ValueError):
    """An intstr that is neither an integer nor a percentage (apimachinery's error texts)."""


# --- reading the objects ------------------------------------------------------------------------------


def meta(obj: Obj | None) -> Obj:
    return (obj or {}).get("metadata") or {}


def spec(obj: Obj | None) -> Obj:
    return (obj or {}).get("spec") or {}


def status(obj: Obj | None) -> Obj:
    return (obj or {}).get("status") or {}


def annotations(obj: Obj) -> dict[str, str]:
    return meta(obj).get("annotations") or {}


def replicas(obj: Obj | None) -> int:
    """spec.replicas of a Deployment or ReplicaSet (the API server defaults it to 1)."""
    value = spec(obj).get("replicas")
    return 1 if value is None else int(value)


def set_replicas(rs: Obj, value: int) -> None:
    rs.setdefault("spec", {})["replicas"] = value


def strategy_type(d: Obj) -> str:
    return str((spec(d).get("strategy") or {}).get("type") or ROLLING_UPDATE)


def is_rolling_update(d: Obj) -> bool:
    return strategy_type(d) == ROLLING_UPDATE


def rolling_params(d: Obj) -> tuple[Any, Any]:
    rolling = (spec(d).get("strategy") or {}).get("rollingUpdate") or {}
    return rolling.get("maxSurge"), rolling.get("maxUnavailable")


def progress_deadline(d: Obj) -> int | None:
    """progressDeadlineSeconds, or None when there is none (unset or MaxInt32, as HasProgressDeadline)."""
    value = spec(d).get("progressDeadlineSeconds")
    return None if value is None or int(value) == MAX_INT32 else int(value)


def revision_history_limit(d: Obj) -> int | None:
    """revisionHistoryLimit, or None when every revision is kept (unset or MaxInt32)."""
    value = spec(d).get("revisionHistoryLimit")
    return None if value is None or int(value) == MAX_INT32 else int(value)


# --- maxSurge and maxUnavailable -----------------------------------------------------------------------


def scaled_value(value: Any, total: int, round_up: bool) -> int:
    """apimachinery's GetScaledValueFromIntOrPercent: an int as is, "N%" of total rounded up or down."""
    if isinstance(value, bool) or value is None:
        raise InvalidIntOrPercent("nil value for IntOrString")
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise InvalidIntOrPercent("invalid value for IntOrString: invalid type: neither int nor percentage")
    if not value.endswith("%"):
        raise InvalidIntOrPercent("invalid value for IntOrString: invalid type: string is not a percentage")
    digits = value[:-1]
    if not re.fullmatch(r"[+-]?\d+", digits):
        raise InvalidIntOrPercent(
            f'invalid value for IntOrString: invalid value "{value}": '
            f'strconv.Atoi: parsing "{digits}": invalid syntax'
        )
    scaled = int(digits) * total / 100
    return math.ceil(scaled) if round_up else math.floor(scaled)


def resolve_fenceposts(max_surge: Any, max_unavailable: Any, desired: int) -> tuple[int, int]:
    """(surge, unavailable) for `desired` replicas; an unset value counts as 0. When both come to zero
    (rounding down can do that) one replica may be unavailable, since surging might be impossible (quota)."""
    surge = scaled_value(0 if max_surge is None else max_surge, desired, True)
    unavailable = scaled_value(0 if max_unavailable is None else max_unavailable, desired, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def max_surge(d: Obj) -> int:
    if not is_rolling_update(d):
        return 0
    try:
        return resolve_fenceposts(*rolling_params(d), replicas(d))[0]
    except InvalidIntOrPercent:
        return 0  # validation's to catch


def max_unavailable(d: Obj) -> int:
    if not is_rolling_update(d) or replicas(d) == 0:
        return 0
    try:
        unavailable = resolve_fenceposts(*rolling_params(d), replicas(d))[1]
    except InvalidIntOrPercent:
        return 0
    return min(unavailable, replicas(d))


def min_available(d: Obj) -> int:
    return replicas(d) - max_unavailable(d) if is_rolling_update(d) else 0


# --- counting ------------------------------------------------------------------------------------------


def total_replicas(rss: Iterable[Obj | None]) -> int:
    """GetReplicaCountForReplicaSets: the sum of spec.replicas."""
    return sum(replicas(rs) for rs in rss if rs is not None)


def _status_sum(rss: Iterable[Obj | None], field: str) -> int:
    return sum(int(status(rs).get(field) or 0) for rs in rss if rs is not None)


def actual_replicas(rss: Iterable[Obj | None]) -> int:
    return _status_sum(rss, "replicas")


def ready_replicas(rss: Iterable[Obj | None]) -> int:
    return _status_sum(rss, "readyReplicas")


def available_replicas(rss: Iterable[Obj | None]) -> int:
    return _status_sum(rss, "availableReplicas")


def active(rss: Iterable[Obj | None]) -> list[Obj]:
    """controller.FilterActiveReplicaSets: those asked for at least one replica."""
    return [rs for rs in rss if rs is not None and replicas(rs) > 0]


# --- ordering (controller_utils.go) -------------------------------------------------------------------


def _created(rs: Obj) -> datetime:
    return parse_time(meta(rs).get("creationTimestamp")) or _NEVER


def _by_creation(a: Obj, b: Obj) -> int:
    ta, tb = _created(a), _created(b)
    if ta == tb:
        na, nb = meta(a).get("name", ""), meta(b).get("name", "")
        return (na > nb) - (na < nb)
    return -1 if ta < tb else 1


def by_creation(rss: Iterable[Obj]) -> list[Obj]:
    """Oldest first, name breaking ties (ReplicaSetsByCreationTimestamp)."""
    return sorted(rss, key=cmp_to_key(_by_creation))


def by_size_older(rss: Iterable[Obj]) -> list[Obj]:
    """Largest first; among equals the older first (ReplicaSetsBySizeOlder: scale-downs hit old ones)."""

    def cmp(a: Obj, b: Obj) -> int:
        if replicas(a) == replicas(b):
            return _by_creation(a, b)
        return -1 if replicas(a) > replicas(b) else 1

    return sorted(rss, key=cmp_to_key(cmp))


def by_size_newer(rss: Iterable[Obj]) -> list[Obj]:
    """Largest first; among equals the newer first (ReplicaSetsBySizeNewer: scale-ups favour new ones)."""

    def cmp(a: Obj, b: Obj) -> int:
        if replicas(a) == replicas(b):
            return _by_creation(b, a)
        return -1 if replicas(a) > replicas(b) else 1

    return sorted(rss, key=cmp_to_key(cmp))


def revision(obj: Obj) -> int:
    """The revision annotation (0 when absent); ValueError when it is not a number."""
    value = annotations(obj).get(REVISION)
    if value is None:
        return 0
    if not re.fullmatch(r"[+-]?\d+", value):
        raise ValueError(f'strconv.ParseInt: parsing "{value}": invalid syntax')
    return int(value)


def by_revision(rss: Iterable[Obj]) -> list[Obj]:
    """Lowest revision first; creation time breaks ties and stands in for unreadable revisions."""

    def cmp(a: Obj, b: Obj) -> int:
        try:
            ra, rb = revision(a), revision(b)
        except ValueError:
            return _by_creation(a, b)
        if ra == rb:
            return _by_creation(a, b)
        return -1 if ra < rb else 1

    return sorted(rss, key=cmp_to_key(cmp))


def max_revision(rss: Iterable[Obj]) -> int:
    best = 0
    for rs in rss:
        try:
            best = max(best, revision(rs))
        except ValueError:
            continue  # unparsable: skipped, as upstream
    return best


def last_revision(rss: Iterable[Obj | None]) -> int:
    """The second highest revision: what `rollout undo` without --to-revision goes back to."""
    top = second = 0
    for rs in rss:
        if rs is None:
            continue
        try:
            v = revision(rs)
        except ValueError:
            continue
        if v >= top:
            top, second = v, top
        elif v > second:
            second = v
    return second


# --- which ReplicaSet is new ---------------------------------------------------------------------------


def _prune(value: Any) -> Any:
    """JSON with nulls and empty maps and lists dropped: Go's semantic equality treats nil and empty
    alike, and a template that went through a Go client comes back with `creationTimestamp: null`."""
    if isinstance(value, dict):
        out = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def _without_hash(template: Obj | None) -> Obj:
    t = deep_copy(template or {})
    labels = (t.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(UNIQUE_LABEL_KEY, None)
    return _prune(t)


def equal_ignore_hash(a: Obj | None, b: Obj | None) -> bool:
    """Two pod templates are the same apart from the pod-template-hash label (EqualIgnoreHash)."""
    return _without_hash(a) == _without_hash(b)


def template(obj: Obj) -> Obj:
    return spec(obj).get("template") or {}


def find_new(d: Obj, rss: Sequence[Obj]) -> Obj | None:
    """The ReplicaSet whose template is the Deployment's; the oldest when several are (#40415)."""
    for rs in by_creation(rss):
        if equal_ignore_hash(template(rs), template(d)):
            return rs
    return None


def find_old(d: Obj, rss: Sequence[Obj]) -> tuple[list[Obj], list[Obj]]:
    """(old ones with replicas, all old ones)."""
    new = find_new(d, rss)
    new_uid = meta(new).get("uid") if new is not None else None
    everything = [rs for rs in rss if new is None or meta(rs).get("uid") != new_uid]
    return [rs for rs in everything if replicas(rs) != 0], everything


def find_active_or_latest(new: Obj | None, olds: Sequence[Obj]) -> Obj | None:
    """The only active ReplicaSet, or the newest when none is; None when several are active."""
    if new is None and not olds:
        return None
    newest_first = list(reversed(by_creation(olds)))
    actives = active([*newest_first, new])
    if not actives:
        return new if new is not None else newest_first[0]
    return actives[0] if len(actives) == 1 else None


# --- replicas the new ReplicaSet gets ------------------------------------------------------------------


def new_rs_new_replicas(d: Obj, all_rss: Sequence[Obj | None], new: Obj) -> int:
    """NewRSNewReplicas: rolling, as many as maxSurge leaves room for, never past spec.replicas;
    Recreate, all of them."""
    kind = strategy_type(d)
    if kind == ROLLING_UPDATE:
        surge = scaled_value(rolling_params(d)[0], replicas(d), True)
        current = total_replicas(all_rss)
        most = replicas(d) + surge
        if current >= most:
            return replicas(new)
        return replicas(new) + min(most - current, replicas(d) - replicas(new))
    if kind == RECREATE:
        return replicas(d)
    raise ValueError(f"deployment type {kind} isn't supported")


def is_saturated(d: Obj, rs: Obj | None) -> bool:
    """The ReplicaSet holds, wants and has available every replica of the Deployment."""
    if rs is None:
        return False
    desired = annotation_int(rs, DESIRED_REPLICAS)
    return (
        desired is not None
        and replicas(rs) == replicas(d)
        and desired == replicas(d)
        and int(status(rs).get("availableReplicas") or 0) == replicas(d)
    )


# --- annotations ---------------------------------------------------------------------------------------


def annotation_int(rs: Obj, key: str) -> int | None:
    """A non-negative int32 annotation; None when absent or invalid (getNonNegativeInt32FromAnnotation)."""
    value = annotations(rs).get(key)
    if value is None or not re.fullmatch(r"\+?\d+", value):
        return None
    number = int(value)
    return number if number <= MAX_INT32 else None


def replicas_annotations_need_update(rs: Obj, desired: int, most: int) -> bool:
    notes = annotations(rs)
    return notes.get(DESIRED_REPLICAS) != str(desired) or notes.get(MAX_REPLICAS) != str(most)


def set_replicas_annotations(rs: Obj, desired: int, most: int) -> bool:
    notes = rs.setdefault("metadata", {}).setdefault("annotations", {})
    changed = False
    for key, value in ((DESIRED_REPLICAS, str(desired)), (MAX_REPLICAS, str(most))):
        if notes.get(key) != value:
            notes[key] = value
            changed = True
    return changed


def copy_annotations_to_rs(d: Obj, rs: Obj) -> bool:
    """The Deployment's annotations (but the skipped ones) onto the ReplicaSet; never removes any."""
    notes = rs.setdefault("metadata", {}).setdefault("annotations", {})
    changed = False
    for key, value in annotations(d).items():
        if key in ANNOTATIONS_TO_SKIP or notes.get(key) == value:
            continue
        notes[key] = value
        changed = True
    return changed


def set_new_rs_annotations(
    d: Obj, rs: Obj, new_revision: str, exists: bool, history_limit: int = MAX_REVISION_HISTORY_CHARS
) -> bool:
    """SetNewReplicaSetAnnotations: copy the Deployment's annotations, raise the revision to
    `new_revision` when it is lower (a rollback back to this ReplicaSet then records the revisions it
    served in revision-history, at most `history_limit` characters), and for a ReplicaSet about to be
    created the desired/max replicas. True when anything changed."""
    changed = copy_annotations_to_rs(d, rs)
    notes = rs["metadata"]["annotations"]
    old = notes.get(REVISION)
    if old is not None and not re.fullmatch(r"[+-]?\d+", old):
        return False
    if not re.fullmatch(r"[+-]?\d+", new_revision):
        return False
    old_int, new_int = int(old or 0), int(new_revision)
    if old_int < new_int:
        notes[REVISION] = new_revision
        changed = True
    if old is not None and old_int < new_int:
        history = notes.get(REVISION_HISTORY, "")
        revisions = history.split(",")
        if not revisions[0]:
            notes[REVISION_HISTORY] = old
        else:
            total, start = len(history) + len(old) + 1, 0
            while total > history_limit and start < len(revisions):
                total -= len(revisions[start]) + 1
                start += 1
            if total <= history_limit:
                notes[REVISION_HISTORY] = ",".join([*revisions[start:], old])
    if not exists and set_replicas_annotations(rs, replicas(d), replicas(d) + max_surge(d)):
        changed = True
    return changed


def set_deployment_revision(d: Obj, value: str) -> bool:
    notes = d.setdefault("metadata", {}).setdefault("annotations", {})
    if notes.get(REVISION) == value:
        return False
    notes[REVISION] = value
    return True


def set_annotations_from_rs(d: Obj, rs: Obj) -> None:
    """A rollback takes the ReplicaSet's annotations (but the skipped ones keep the Deployment's)."""
    kept = {k: v for k, v in annotations(d).items() if k in ANNOTATIONS_TO_SKIP}
    kept.update({k: v for k, v in annotations(rs).items() if k not in ANNOTATIONS_TO_SKIP})
    d.setdefault("metadata", {})["annotations"] = kept


def rollback_to(d: Obj) -> int | None:
    """The revision the deprecated rollbackTo annotation asks for (0: the previous one); None when
    absent or not a number."""
    value = annotations(d).get(ROLLBACK_TO)
    if value is None or not re.fullmatch(r"[+-]?\d+", value):
        return None
    return int(value)


def template_without_hash(rs_template: Obj) -> Obj:
    t = deep_copy(rs_template)
    labels = (t.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(UNIQUE_LABEL_KEY, None)
    return t


# --- proportions of a scaling event --------------------------------------------------------------------


def round_half_away(value: float) -> int:
    """k8s.io/utils/integer RoundToInt32."""
    return int(value - 0.5) if value < 0 else int(value + 0.5)


def replica_set_fraction(rs: Obj, d: Obj) -> int:
    """How many replicas `rs` gains (or loses) when the Deployment grows to spec.replicas + maxSurge,
    in proportion to the size the max-replicas annotation says it was scaled for."""
    if replicas(d) == 0:
        return -replicas(rs)
    wanted = replicas(d) + max_surge(d)
    annotated = annotation_int(rs, MAX_REPLICAS) or 0
    if annotated == 0:
        # Annotation missing or zeroed by someone: fall back to the Deployment's current size.
        annotated = int(status(d).get("replicas") or 0)
        if annotated == 0:
            return 0
    return round_half_away(replicas(rs) * wanted / annotated) - replicas(rs)


def proportion(rs: Obj | None, d: Obj, to_add: int, added: int) -> int:
    """GetProportion: the fraction, capped by what is still to be added (or removed)."""
    if rs is None or replicas(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    fraction = replica_set_fraction(rs, d)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


# --- completion, progress, time ------------------------------------------------------------------------


def complete(d: Obj, new_status: Obj) -> bool:
    """Every desired replica updated and available, no old one left, the latest generation observed."""
    want = replicas(d)
    return (
        int(new_status.get("updatedReplicas") or 0) == want
        and int(new_status.get("replicas") or 0) == want
        and int(new_status.get("availableReplicas") or 0) == want
        and int(new_status.get("observedGeneration") or 0) >= int(meta(d).get("generation") or 0)
    )


def progressing(d: Obj, new_status: Obj) -> bool:
    """More updated, ready or available replicas than before, or fewer old ones."""
    old = status(d)

    def get(s: Obj, key: str) -> int:
        return int(s.get(key) or 0)

    old_old = get(old, "replicas") - get(old, "updatedReplicas")
    new_old = get(new_status, "replicas") - get(new_status, "updatedReplicas")
    return (
        get(new_status, "updatedReplicas") > get(old, "updatedReplicas")
        or new_old < old_old
        or get(new_status, "readyReplicas") > get(old, "readyReplicas")
        or get(new_status, "availableReplicas") > get(old, "availableReplicas")
    )


def timed_out(d: Obj, new_status: Obj, now: datetime) -> bool:
    """The Progressing condition last moved more than progressDeadlineSeconds ago (or already says so)."""
    deadline = progress_deadline(d)
    if deadline is None:
        return False
    cond = get_condition(new_status, PROGRESSING)
    if cond is None or cond.get("reason") == NEW_RS_AVAILABLE:
        return False
    if cond.get("reason") == TIMED_OUT:
        return True
    since = parse_time(cond.get("lastUpdateTime"))
    return since is not None and since + timedelta(seconds=deadline) < now
