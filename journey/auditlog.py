"""The audit log as trace's source of exact times (issue 21 on our API server, issue 20's log).

Each completed write (create, update, patch, delete) of a journey object becomes a step with the
microsecond stageTimestamp at which the server answered it (the write was committed just before), the
writer (the authenticated user: `system:serviceaccount:kube-system:replicaset-controller`, `system:node:n1`,
`system:kube-scheduler`, a person), and, where the policy kept the response body, the resourceVersion
it made and the conditions it set. An object's creation, every status write (not only each manager's
last, as managedFields keep) and each condition's transition are then exact; what the log does not
cover stays approximate, and says so.

The log is JSON lines (`audit.k8s.io/v1` Events). Lines of other namespaces are skipped before they are
parsed, so a large log costs a substring scan, not a JSON decode per line."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

WRITE_VERBS = {"create": "created", "update": "updated", "patch": "updated", "delete": "deleted"}
AUDIT_LOG = "audit.log"


@dataclass(frozen=True)
class Write:
    time: dt.datetime  # stageTimestamp of ResponseComplete
    received: dt.datetime
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    uid: str
    user: str
    manager: str  # the field manager: ?fieldManager=, else the User-Agent before its "/" (upstream's default)
    resource_version: str
    audit_id: str
    response: dict[str, Any] | None = field(default=None, compare=False, hash=False)

    @property
    def action(self) -> str:
        if self.subresource in ("status", "binding", "eviction", "scale"):
            return self.subresource
        return WRITE_VERBS[self.verb]


def _time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def parse_event(ev: dict[str, Any]) -> Write | None:
    """A successful write's ResponseComplete event -> Write; anything else -> None."""
    if ev.get("stage") != "ResponseComplete" or ev.get("verb") not in WRITE_VERBS:
        return None
    ref = ev.get("objectRef") or {}
    code = (ev.get("responseStatus") or {}).get("code") or 0
    if not ref.get("resource") or not 200 <= int(code) < 300:
        return None
    response = ev.get("responseObject") if isinstance(ev.get("responseObject"), dict) else None
    meta = (response or {}).get("metadata") or {}
    # A subresource's answer (a Binding, an Eviction's Status) is not the object: keep its name only.
    same_object = response is not None and response.get("kind") not in (
        "Status",
        "Binding",
        "Eviction",
        "Scale",
    )
    when, received = _time(ev.get("stageTimestamp")), _time(ev.get("requestReceivedTimestamp"))
    if when is None or received is None:
        return None
    resource, subresource = str(ref.get("resource") or ""), str(ref.get("subresource") or "")
    if resource == "bindings":  # the older POST namespaces/NS/bindings: the pod's binding all the same
        resource, subresource = "pods", "binding"
    return Write(
        when,
        received,
        str(ev["verb"]),
        resource,
        subresource,
        str(ref.get("namespace") or ""),
        str(ref.get("name") or (meta.get("name") if same_object else "") or ""),
        str(ref.get("uid") or (meta.get("uid") if same_object else "") or ""),
        str((ev.get("user") or {}).get("username") or ""),
        field_manager(str(ev.get("requestURI") or ""), str(ev.get("userAgent") or "")),
        str(meta.get("resourceVersion") or "") if same_object else "",
        str(ev.get("auditID") or ""),
        response if same_object else None,
    )


def field_manager(request_uri: str, user_agent: str) -> str:
    """The manager upstream records for a write: its fieldManager parameter, else the User-Agent up to
    its first "/"."""
    named = parse_qs(urlsplit(request_uri).query).get("fieldManager")
    if named and named[0]:
        return named[0][:128]
    return user_agent.split("/", 1)[0][:128] or "unknown"


def log_files(path: Path) -> list[Path]:
    """The log and its rotated backups (`audit-<time>.log`), oldest first."""
    backups = sorted(p for p in path.parent.glob(f"{path.stem}-*{path.suffix}") if p.is_file() and p != path)
    return [*backups, path] if path.exists() else backups


def read_writes(path: Path, namespace: str, since: dt.datetime | None = None) -> list[Write]:
    """Every successful write in `namespace` (and cluster-scoped ones are not journey objects), oldest
    first, from the log and the backups that can hold writes after `since`."""
    needle = f'"namespace":"{namespace}"'.encode()
    files = log_files(path)
    if since is not None:
        # Backups older than `since` (their mtime is their last write) hold nothing of this journey.
        cutoff = since.timestamp() - 1
        files = [p for p in files if p == path or os.path.getmtime(p) >= cutoff]
    writes: list[Write] = []
    for file in files:
        try:
            with open(file, "rb") as fh:
                for line in fh:
                    if needle not in line or b'"ResponseComplete"' not in line:
                        continue
                    try:
                        write = parse_event(json.loads(line))
                    except ValueError:
                        continue
                    if write is not None and write.namespace == namespace:
                        writes.append(write)
        except OSError:
            continue
    writes.sort(key=lambda w: w.time)
    return writes


@dataclass
class AuditIndex:
    """The writes of one namespace, by (resource, name), for the timeline to look up."""

    path: str
    writes: list[Write]
    by_name: dict[tuple[str, str], list[Write]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for w in self.writes:
            self.by_name.setdefault((w.resource, w.name), []).append(w)

    def of(self, resource: str, name: str, uid: str) -> list[Write]:
        """The writes of one object: by name, and by uid where both know it (a name reused after a
        delete is another object). A write whose uid is unknown (an update naming none) belongs to
        whichever object of that name lived at its time: the caller's created..deleted window."""
        return [w for w in self.by_name.get((resource, name), ()) if not (w.uid and uid and w.uid != uid)]

    def first_create(self, resource: str, name: str) -> Write | None:
        return next(
            (w for w in self.by_name.get((resource, name), ()) if w.verb == "create" and not w.subresource),
            None,
        )


def load(path: Path, namespace: str, since: dt.datetime | None = None) -> AuditIndex:
    return AuditIndex(str(path), read_writes(path, namespace, since))


def find_stack_log(kubeconfig: str) -> Path | None:
    """`pykubelet up`'s stack keeps the admin kubeconfig and the audit log side by side
    (<state>/apiserver/admin.kubeconfig, <state>/apiserver/audit.log): the log, if it is there and ours
    to read."""
    first = str(kubeconfig).split(os.pathsep)[0]
    if not first:
        return None
    candidate = Path(first).resolve().parent / AUDIT_LOG
    return candidate if candidate.is_file() and os.access(candidate, os.R_OK) else None


def condition_times(writes: Iterable[Write]) -> dict[tuple[str, str], dt.datetime]:
    """(type, status) -> the time of the first write whose answer shows the condition at that status
    with the transition time it still has (the write that made the transition)."""
    out: dict[tuple[str, str], dt.datetime] = {}
    seen: dict[str, tuple[str, str]] = {}
    for w in writes:
        conds = ((w.response or {}).get("status") or {}).get("conditions") or ()
        for cond in conds:
            ctype, status = str(cond.get("type") or ""), str(cond.get("status") or "")
            transition = str(cond.get("lastTransitionTime") or "")
            if seen.get(ctype) != (status, transition):
                seen[ctype] = (status, transition)
                out[(ctype, status)] = w.time
    return out


# Texts of upstream's admission refusals (webhooks, ValidatingAdmissionPolicy, ResourceQuota,
# LimitRanger, PodSecurity, the ServiceAccount plugin): "is forbidden:" without RBAC's `User "x" cannot`.
ADMISSION_MARKS = (
    "admission webhook",
    "failed calling webhook",
    "ValidatingAdmissionPolicy",
    "exceeded quota",
    "violates PodSecurity",
    "is forbidden:",
)


def is_rbac_denial(message: str) -> bool:
    return "is forbidden: User " in message and " cannot " in message


def is_admission_denial(message: str) -> bool:
    return any(mark in message for mark in ADMISSION_MARKS) and not is_rbac_denial(message)


@dataclass(frozen=True)
class Rejection:
    """A write the API server refused in admission, from the log's ResponseComplete event."""

    time: dt.datetime
    user: str
    verb: str
    resource: str
    name: str
    code: int
    message: str

    def describe(self) -> str:
        what = f"{self.verb} {self.resource}{'/' + self.name if self.name else ''}"
        return f"{what} by {self.user} refused ({self.code}): {self.message}"


def read_rejections(path: Path, namespace: str, since: dt.datetime | None = None) -> list[Rejection]:
    """The admission refusals of writes in `namespace` (after `since`), oldest first."""
    needle = f'"namespace":"{namespace}"'.encode()
    out: list[Rejection] = []
    for file in log_files(path):
        try:
            with open(file, "rb") as fh:
                for line in fh:
                    if needle not in line or b'"ResponseComplete"' not in line or b'"Failure"' not in line:
                        continue
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        continue
                    rejection = _rejection(ev, namespace)
                    if rejection is not None and (since is None or rejection.time >= since):
                        out.append(rejection)
        except OSError:
            continue
    return sorted(out, key=lambda r: r.time)


def _rejection(ev: dict[str, Any], namespace: str) -> Rejection | None:
    if ev.get("stage") != "ResponseComplete" or ev.get("verb") not in WRITE_VERBS:
        return None
    ref, status = ev.get("objectRef") or {}, ev.get("responseStatus") or {}
    message = str(status.get("message") or "")
    if ref.get("namespace") != namespace or not 400 <= int(status.get("code") or 0) < 500:
        return None
    if not is_admission_denial(message):
        return None
    when = _time(ev.get("stageTimestamp"))
    if when is None:
        return None
    return Rejection(
        when,
        str((ev.get("user") or {}).get("username") or ""),
        str(ev["verb"]),
        str(ref.get("resource") or ""),
        str(ref.get("name") or ""),
        int(status.get("code") or 0),
        message,
    )
