"""One timeline from a journey's objects: every write the API still shows, in causal order, each with
its writer and the gap since the write it reacted to.

Where the times come from, and how exact they are:
- creationTimestamp, managedFields[].time, conditions' lastTransitionTime, deletionTimestamp and core/v1
  events' firstTimestamp are RFC 3339 with 1 s resolution: steps and gaps built on them are approximate
  (a gap between two stamps of the same second reads "< 1 s");
- an events.k8s.io eventTime (MicroTime) is exact to the microsecond: used where present;
- managedFields keep one entry per (manager, operation, subresource) with that manager's *last* write,
  so earlier writes by the same manager are not visible from the API alone (an audit log would show them).

Order: by the second, then by the stage a write belongs to in the chain every explanation of Kubernetes
draws (owner created -> owned created -> scheduled -> pulled -> started -> ready -> endpoints -> the
owners' status), then by the exact time. Where the API says more than the stage can, it wins inside the
second: steps whose write's resourceVersion is known (every audit-log write; an object's latest
managedFields entry, which made the object's resourceVersion; an event written once) keep the order of
their resourceVersions, and exact times keep their chronological order, so no step is ever placed after
a step that happened later (a status patch is never "0 ms after" what it preceded). A reaction's cause is the latest earlier step its rule names
(a ReplicaSet's creation reacts to its Deployment's last spec write; a pod's kubelet steps react to its
scheduling; an EndpointSlice update to the last pod that became Ready...).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from journey import writers
from journey.auditlog import AuditIndex, Write, condition_times
from journey.graph import Journey, Obj, label, meta, uid_of
from journey.kinds import BY_KIND

# Event reason -> stage. Node-side steps follow the kubelet's order.
EVENT_STAGE = {
    "ScalingReplicaSet": 1,
    "SuccessfulCreate": 2,
    "SuccessfulDelete": 2,
    "FailedCreate": 2,
    "Scheduled": 3,
    "FailedScheduling": 3,
    "Pulling": 5,
    "Pulled": 5,
    "Failed": 5,
    "BackOff": 7,
    "Created": 6,
    "Started": 7,
    "Unhealthy": 8,
    "Killing": 11,
    "FailedCreatePodSandBox": 4,
    "SandboxChanged": 4,
}
CONDITION_STAGE = {
    "PodScheduled": 3,
    "PodReadyToStartContainers": 4,
    "Initialized": 4,
    "ContainersReady": 7.5,
    "Ready": 8,
}
# A pod's node-side step -> the steps it reacts to (the latest of them is its cause; the kubelet's order).
POD_REACTS_TO: dict[str, tuple[str, ...]] = {
    "Scheduled": ("created",),
    "PodScheduled=True": ("created",),
    "PodReadyToStartContainers=True": ("Scheduled", "PodScheduled=True"),
    "Initialized=True": ("Scheduled", "PodScheduled=True"),
    "FailedCreatePodSandBox": ("Scheduled", "PodScheduled=True"),
    "Pulling": ("Scheduled", "PodScheduled=True"),
    "Pulled": ("Pulling", "Scheduled", "PodScheduled=True"),
    "Failed": ("Pulling", "Scheduled"),
    "BackOff": ("Failed", "Started", "Pulling"),
    "Created": ("Pulled",),
    "Started": ("Created",),
    "ContainersReady=True": ("Started",),
    "Ready=True": ("ContainersReady=True", "Started"),
    "Unhealthy": ("Started",),
}
ROOT_KINDS = ("Deployment", "CronJob", "DaemonSet", "StatefulSet", "Service")
OWNER_STATUS = 10  # a controller reporting its owned objects' progress


@dataclass
class Step:
    time: dt.datetime
    exact: bool  # False: a 1 s stamp
    obj: str  # "Pod web-7d9c-abcde"
    uid: str
    kind: str
    action: str  # created, updated, status, condition, event, deleting
    what: str  # "created", "Ready=True", "Pulled", "status (f:conditions, f:replicas)"
    writer: str  # the lane: kube-controller-manager, kubelet, user...
    manager: str  # the raw field manager or event reporter
    stage: float
    detail: str = ""
    user: str = ""  # the authenticated writer, where the audit log names it
    cause: int | None = None  # index into the timeline
    gap_ms: float | None = None
    gap_exact: bool = False
    seq: int = 0
    rv: int | None = None  # the resourceVersion the write made, where known

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": stamp(self.time, self.exact),
            "exact": self.exact,
            "object": self.obj,
            "kind": self.kind,
            "action": self.action,
            "what": self.what,
            "writer": self.writer,
            "manager": self.manager,
            "user": self.user or None,
            "detail": self.detail,
            "cause": self.cause,
            "gapMs": None if self.gap_ms is None else round(self.gap_ms, 3),
            "gapExact": self.gap_exact,
        }

    @property
    def key(self) -> tuple:
        """What makes a step the same step across two reads (for --follow)."""
        return (self.uid, self.action, self.what, self.time, self.manager)


def parse_time(value: Any) -> tuple[dt.datetime, bool] | None:
    """RFC 3339 (1 s) or MicroTime -> (aware datetime, exact)."""
    if not value or not isinstance(value, str):
        return None
    text = value.replace("Z", "+00:00")
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when, "." in value


def stamp(when: dt.datetime, exact: bool) -> str:
    if exact:
        return when.astimezone(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    return when.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _fields(entry: dict[str, Any]) -> str:
    """The field sets an entry owns, two levels deep: `f:spec.f:replicas, f:status`."""
    out: list[str] = []
    for top, sub in (entry.get("fieldsV1") or {}).items():
        if isinstance(sub, dict) and sub and top in ("f:spec", "f:status", "f:metadata"):
            out.extend(f"{top[2:]}.{k[2:]}" for k in sub if k.startswith("f:"))
        elif top.startswith("f:"):
            out.append(top[2:])
    return ", ".join(out[:6]) + (", ..." if len(out) > 6 else "")


def _creation_stage(obj: Obj) -> int:
    kind = obj.get("kind")
    if kind in ROOT_KINDS:
        return 0
    if kind == "Pod":
        return 2
    return 1  # ReplicaSet, Job, EndpointSlice (published as soon as its Service exists)


def _creator(obj: Obj) -> tuple[str, dict[str, Any] | None]:
    """The manager that created the object: the earliest non-subresource entry at creationTimestamp."""
    created = parse_time(meta(obj).get("creationTimestamp"))
    entries = [e for e in meta(obj).get("managedFields") or () if not e.get("subresource")]
    at = [e for e in entries if created and parse_time(e.get("time")) == created]
    pick = (at or sorted(entries, key=lambda e: str(e.get("time") or "")) or [None])[0]
    return (str(pick.get("manager") or "") if pick else ""), pick


def object_steps(obj: Obj) -> list[Step]:
    """Creation, each managedFields entry, each condition's transition, deletion."""
    m = meta(obj)
    kind, name, uid = str(obj.get("kind") or ""), label(obj), uid_of(obj)
    steps: list[Step] = []
    created = parse_time(m.get("creationTimestamp"))
    creator, creating = _creator(obj)
    if created:
        detail = f"generation {m['generation']}" if m.get("generation") else ""
        owners = [
            f"{r.get('kind')} {r.get('name')}" for r in m.get("ownerReferences") or () if r.get("controller")
        ]
        if owners:
            detail = ", ".join(filter(None, [detail, f"owned by {owners[0]}"]))
        steps.append(
            Step(
                created[0],
                created[1],
                name,
                uid,
                kind,
                "created",
                "created",
                writers.component(creator),
                creator,
                _creation_stage(obj),
                detail,
            )
        )
    latest = _latest_entry(m)
    for entry in m.get("managedFields") or ():
        when = parse_time(entry.get("time"))
        if when and kind == "EndpointSlice" and "f:endpoints" in (entry.get("fieldsV1") or {}):
            steps.append(_published(obj, entry, when))
            steps[-1].rv = _rv(m.get("resourceVersion")) if entry is latest else None
            continue
        if not when or (entry is creating and when == created):
            continue
        sub = str(entry.get("subresource") or "")
        manager = str(entry.get("manager") or "")
        action = "status" if sub == "status" else ("binding" if sub == "binding" else "updated")
        stage = _write_stage(kind, action)
        steps.append(
            Step(
                when[0],
                when[1],
                name,
                uid,
                kind,
                action,
                f"{action} ({_fields(entry)})" if _fields(entry) else action,
                writers.component(manager),
                manager,
                stage,
                f"{entry.get('operation', '')} {sub}".strip(),
                rv=_rv(m.get("resourceVersion")) if entry is latest else None,
            )
        )
    for cond in (obj.get("status") or {}).get("conditions") or ():
        when = parse_time(cond.get("lastTransitionTime"))
        if not when:
            continue
        ctype = str(cond.get("type") or "")
        writer = _condition_writer(kind, ctype)
        text = " - ".join(filter(None, [cond.get("reason"), cond.get("message")]))
        stage = CONDITION_STAGE.get(ctype, 8) if kind == "Pod" else OWNER_STATUS
        steps.append(
            Step(
                when[0],
                when[1],
                name,
                uid,
                kind,
                "condition",
                f"{ctype}={cond.get('status')}",
                writer,
                writer,
                stage,
                text,
            )
        )
    deleting = parse_time(m.get("deletionTimestamp"))
    if deleting:
        steps.append(
            Step(
                deleting[0],
                deleting[1],
                name,
                uid,
                kind,
                "deleting",
                "deletion requested",
                "unknown",
                "",
                11,
                f"grace {m.get('deletionGracePeriodSeconds')} s",
            )
        )
    return steps


def _rv(value: Any) -> int | None:
    """A resourceVersion as a number to order by (etcd's revisions, which every server here and
    upstream's etcd3 store hand out), None for anything else."""
    text = str(value or "")
    return int(text) if text.isdigit() else None


def _latest_entry(m: dict[str, Any]) -> dict[str, Any] | None:
    """The managedFields entry of the object's last write (whose resourceVersion the object carries):
    the one with the latest time, when no other entry shares that second (then which was last is
    unknown). A write that changed no managed field leaves no entry: also unknown, unless the object was
    updated no later than that entry (its deletion or a finalizer removal would be later)."""
    timed = [(parse_time(e.get("time")), e) for e in m.get("managedFields") or ()]
    timed = [(t[0], e) for t, e in timed if t]
    if not timed or m.get("deletionTimestamp"):
        return None
    newest = max(t for t, _ in timed)
    at = [e for t, e in timed if t == newest]
    return at[0] if len(at) == 1 else None


def _published(obj: Obj, entry: dict[str, Any], when: tuple[dt.datetime, bool]) -> Step:
    """An EndpointSlice's endpoints as last written. Its writer's one managedFields entry holds the time
    of its last write, which may be the creation's second too: the slice is created when the Service is,
    and rewritten as the pods become Ready, so this is a step of its own."""
    endpoints = obj.get("endpoints") or []
    ready = sum(1 for e in endpoints if (e.get("conditions") or {}).get("ready"))
    manager = str(entry.get("manager") or "")
    return Step(
        when[0],
        when[1],
        label(obj),
        uid_of(obj),
        "EndpointSlice",
        "updated",
        f"endpoints published ({ready}/{len(endpoints)} ready)",
        writers.component(manager),
        manager,
        9,
        "the last write of the endpoints (managedFields)",
    )


def _write_stage(kind: str, action: str) -> int:
    if kind == "Pod":
        return 8 if action == "status" else 3
    if kind == "EndpointSlice":
        return 9
    if action == "status":
        return OWNER_STATUS
    return _creation_stage({"kind": kind})


def _condition_writer(kind: str, ctype: str) -> str:
    if kind == "Pod":
        return writers.SCHEDULER if ctype == "PodScheduled" else writers.KUBELET
    return writers.CONTROLLER_MANAGER


def event_steps(events: Iterable[Obj], names: dict[str, str], audit: AuditIndex | None = None) -> list[Step]:
    steps: list[Step] = []
    for ev in events:
        involved = ev.get("involvedObject") or {}
        micro = parse_time(ev.get("eventTime"))
        created = audit.first_create("events", str(meta(ev).get("name") or "")) if audit else None
        if created is not None and not (micro and micro[1]):
            micro = (created.time, True)  # the audit log's time of the event's first write
        when = micro or parse_time(ev.get("firstTimestamp")) or parse_time(meta(ev).get("creationTimestamp"))
        if not when:
            continue
        reason = str(ev.get("reason") or "")
        reporter = writers.event_reporter(ev)
        series = ev.get("series") or {}
        count = int(ev.get("count") or series.get("count") or 1)
        detail = str(ev.get("message") or ev.get("note") or "")
        if count > 1:
            detail += f" (x{count}, last {ev.get('lastTimestamp') or (ev.get('series') or {}).get('lastObservedTime')})"
        uid = str(involved.get("uid") or "")
        obj = names.get(uid) or f"{involved.get('kind')} {involved.get('name')}"
        steps.append(
            Step(
                when[0],
                bool(micro and micro[1]),
                obj,
                uid,
                str(involved.get("kind") or ""),
                "event",
                reason,
                writers.component(reporter),
                reporter,
                EVENT_STAGE.get(reason, 8),
                detail,
                # An event written once carries the resourceVersion of its creation; a series' later
                # occurrences rewrote it since.
                rv=_rv(meta(ev).get("resourceVersion")) if count == 1 and not series else None,
            )
        )
    return steps


def _second(when: dt.datetime) -> dt.datetime:
    return when.replace(microsecond=0)


def order(steps: list[Step]) -> list[Step]:
    """Causal order: by second and stage, then within each second the slots of the steps whose order
    the API knows go to them in that order (resourceVersions, then exact times)."""
    for i, s in enumerate(steps):
        s.seq = i
    arranged = sorted(steps, key=lambda s: (_second(s.time), s.stage, s.time, s.seq))
    _in_known_order(arranged, lambda s: s.rv is not None, lambda s: (s.rv, s.seq))
    _in_known_order(arranged, lambda s: s.exact, lambda s: (s.time, s.rv or 0, s.seq))
    return arranged


def _in_known_order(
    arranged: list[Step], known: Callable[[Step], bool], key: Callable[[Step], tuple[Any, ...]]
) -> None:
    """Within each second, hand the positions the `known` steps hold to them sorted by `key` (in place;
    the other steps keep their places)."""
    slots: dict[dt.datetime, list[int]] = {}
    for pos, step in enumerate(arranged):
        if known(step):
            slots.setdefault(_second(step.time), []).append(pos)
    for positions in slots.values():
        for pos, step in zip(positions, sorted((arranged[p] for p in positions), key=key), strict=True):
            arranged[pos] = step


@dataclass
class _Links:
    """Who owns whom, by uid, for the cause rules."""

    owner: dict[str, str] = field(default_factory=dict)
    kind: dict[str, str] = field(default_factory=dict)


def _links(journey: Journey) -> _Links:
    links = _Links()
    for o in journey.objects:
        links.kind[uid_of(o)] = str(o.get("kind") or "")
        ref = next((r for r in meta(o).get("ownerReferences") or () if r.get("controller")), None)
        if ref:
            links.owner[uid_of(o)] = str(ref.get("uid") or "")
    return links


@dataclass(frozen=True)
class _Rule:
    """Which earlier steps a step reacts to: those `matches` accepts, all of them the steps of the
    object `scope` (a uid) when it is set, so only that object's steps need looking at."""

    matches: Callable[[Step], bool]
    scope: str | None = None


def _cause_rule(step: Step, links: _Links) -> _Rule | None:
    """Which earlier steps this one reacts to (the latest of them is its cause)."""
    owner = links.owner.get(step.uid)
    spec_write = ("created", "updated")
    if step.kind == "Pod" and step.what in POD_REACTS_TO:
        wanted = POD_REACTS_TO[step.what]
        return _Rule(lambda s: s.what in wanted, step.uid)
    if step.action == "created" and step.kind == "EndpointSlice":
        return _Rule(lambda s: s.kind == "Service" and s.action == "created")
    if step.action == "created" and owner:
        return _Rule(lambda s: s.action in spec_write, owner)
    if step.action == "event" and step.what in ("SuccessfulCreate", "ScalingReplicaSet", "FailedCreate"):
        return _Rule(lambda s: s.action in spec_write, step.uid)
    if step.kind == "Pod" and 3 <= step.stage <= 8:
        return _Rule(lambda s: s.stage < step.stage, step.uid)
    if step.kind == "EndpointSlice":
        return _Rule(
            lambda s: s.kind == "Pod" and (s.what == "Ready=True" or s.stage == 8 or s.action == "deleting")
        )
    if step.stage == OWNER_STATUS:
        return _Rule(lambda s: links.owner.get(s.uid) == step.uid or (s.uid != step.uid and s.stage >= 8))
    return None


def link(steps: list[Step], journey: Journey) -> None:
    """Fill each step's cause and gap (in place; `steps` in causal order). A rule scoped to one object
    looks only at that object's earlier steps (kept per uid as the walk goes), so a hundred pods'
    interleaved steps cost each step its own pod's few, not every step before it."""
    links = _links(journey)
    earlier: dict[str, list[int]] = {}  # uid -> positions of its steps so far, in order
    for i, step in enumerate(steps):
        rule = _cause_rule(step, links)
        if rule is not None:
            candidates = (
                reversed(earlier.get(rule.scope, ())) if rule.scope is not None else range(i - 1, -1, -1)
            )
            for j in candidates:
                if rule.matches(steps[j]):
                    cause = steps[j]
                    step.cause = j
                    step.gap_ms = max(0.0, (step.time - cause.time).total_seconds() * 1000)
                    step.gap_exact = step.exact and cause.exact
                    break
        earlier.setdefault(step.uid, []).append(i)


# The steps managedFields, creationTimestamp and deletionTimestamp give, which an audit log replaces.
_WRITE_ACTIONS = ("created", "updated", "status", "binding", "deleting")


def object_writes(obj: Obj, audit: AuditIndex) -> list[Write]:
    """The audit log's writes of one object (from its creation on, when the log has it)."""
    kind = BY_KIND.get(str(obj.get("kind") or ""))
    if kind is None:
        return []
    writes = audit.of(kind.plural, str(meta(obj).get("name") or ""), uid_of(obj))
    created = next(
        (w for w in writes if w.verb == "create" and not w.subresource and w.uid == uid_of(obj)), None
    )
    return [w for w in writes if created is None or w.time >= created.time]


def audit_step(obj: Obj, write: Write) -> Step:
    """One write from the audit log: exact time, the user who made it, the resourceVersion it made."""
    kind = str(obj.get("kind") or "")
    action = write.action
    if action == "created":
        stage: float = _creation_stage(obj)
        what = "created"
    elif action == "binding":
        stage, what = 3, "bound (binding)"
    elif action in ("deleted", "eviction"):
        stage, what = 11, "deleted" if action == "deleted" else "evicted"
        action = "deleting"
    else:
        stage = _write_stage(kind, "status" if action == "status" else "updated")
        what = f"{action} ({write.verb})"
        endpoints = (write.response or {}).get("endpoints")
        if kind == "EndpointSlice" and isinstance(endpoints, list):
            ready = sum(1 for e in endpoints if (e.get("conditions") or {}).get("ready"))
            what = f"endpoints published ({ready}/{len(endpoints)} ready)"
    rv = f"rv {write.resource_version}" if write.resource_version else ""
    return Step(
        write.time,
        True,
        label(obj),
        uid_of(obj),
        kind,
        action,
        what,
        writers.of_user(write.user),
        write.manager,
        stage,
        ", ".join(filter(None, [f"as {write.user}", rv, "audit log"])),
        user=write.user,
        rv=_rv(write.resource_version),
    )


def _exact_from_audit(obj: Obj, steps: list[Step], writes: list[Write]) -> list[Step]:
    """`steps` of one object with its writes from the audit log in place of what managedFields and the
    1 s stamps say, and its conditions' transitions at the time of the write that made them."""
    if not writes:
        return steps
    transitions = condition_times(writes)
    out = [audit_step(obj, w) for w in writes]
    for step in steps:
        if step.action in _WRITE_ACTIONS:  # the log has each of them, exactly
            continue
        if step.action == "condition":
            ctype, _, status = step.what.partition("=")
            when = transitions.get((ctype, status))
            if when is not None:
                step.time, step.exact = when, True
        out.append(step)
    return out


def timeline(journey: Journey, audit: AuditIndex | None = None) -> list[Step]:
    """The journey's steps in causal order; with `audit`, every write the log holds, at exact times."""
    names = {uid_of(o): label(o) for o in journey.objects}
    steps: list[Step] = []
    for obj in journey.objects:
        own = object_steps(obj)
        steps.extend(_exact_from_audit(obj, own, object_writes(obj, audit)) if audit else own)
    steps.extend(event_steps(journey.events, names, audit))
    ordered = order(steps)
    link(ordered, journey)
    return ordered


def gap_text(step: Step, cause: Step) -> str:
    if step.gap_ms is None:
        return ""
    if step.gap_exact:
        amount = f"{step.gap_ms:.0f} ms"
    elif step.gap_ms < 1000:
        amount = "< 1 s (1 s stamps)"
    else:
        amount = f"~{step.gap_ms / 1000:.0f} s"
    return f"{amount} after {cause.obj} {cause.what}"


def render(steps: list[Step], audit_path: str | None = None) -> str:
    """Human text: one line per step, the reaction gaps, and the note on precision."""
    if not steps:
        return "no steps recorded\n"
    start = steps[0].time
    lines = []
    for step in steps:
        offset = (step.time - start).total_seconds()
        mark = " " if step.exact else "~"
        who = step.writer if step.manager in ("", step.writer) else f"{step.writer} ({step.manager})"
        line = f"{mark}+{offset:7.3f}s  {step.obj} {step.what} by {who}"
        if step.cause is not None:
            line += f", {gap_text(step, steps[step.cause])}"
        if step.detail:
            line += f"  [{step.detail}]"
        lines.append(line)
    lines.append(precision_note(audit_path))
    return "\n".join(lines) + "\n"


def precision_note(audit_path: str | None) -> str:
    """Which times are exact and which approximate, for the text and JSON outputs."""
    if audit_path:
        return (
            f"times without ~ are exact: each write from the audit log ({audit_path}, the server's "
            "microsecond stageTimestamp and the user who wrote it) or an events.k8s.io eventTime; ~ marks "
            "1 s timestamps the log does not cover (creationTimestamp, managedFields, conditions, core/v1 "
            "events): those times and gaps are approximate."
        )
    return (
        "~ marks 1 s timestamps (creationTimestamp, managedFields, conditions, core/v1 events): those times "
        "and gaps are approximate; managedFields keep only each manager's last write."
    )
