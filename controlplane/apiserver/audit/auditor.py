"""Auditing a request as upstream's WithAuditInit / WithAudit / WithFailedAuthenticationAudit do.

Every request gets an audit ID (its `Audit-ID` header, else a new UUID) answered in `Audit-Id`. With a
policy, once the caller is authenticated its level is decided (first matching rule), and the event goes
to the backend at each stage the policy keeps: RequestReceived; ResponseStarted (long-running requests:
watch, proxy, exec, attach, log, portforward); ResponseComplete (or Panic). Request and response bodies
appear only at Request / RequestResponse levels, so Metadata never carries a Secret's data.

The server calls the hooks below at the points of its pipeline upstream's filters stand at
(authentication, impersonation, authorization, body decoding); each is a no-op without a policy."""

from __future__ import annotations

import copy
import json
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from prometheus_client.core import CounterMetricFamily, Metric

from controlplane.apiserver.audit import policy as pol
from controlplane.apiserver.audit.backend import Backends
from controlplane.apiserver.audit.requestinfo import Attributes, request_attributes
from controlplane.apiserver.authn import UserInfo
from controlplane.apiserver.authz import Decision
from controlplane.apiserver.meta import new_uid
from controlplane.apiserver.webhooks import context as admission_context

log = logging.getLogger("controlplane.apiserver.audit")

HEADER = "Audit-Id"
DECISION_KEY = "authorization.k8s.io/decision"
REASON_KEY = "authorization.k8s.io/reason"
_MAX_USER_AGENT = 1024


def micro_time(ts: float) -> str:
    """metav1.MicroTime: RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _user(info: UserInfo) -> dict[str, Any]:
    out: dict[str, Any] = {"username": info.name}
    if info.uid:
        out["uid"] = info.uid
    if info.groups:
        out["groups"] = list(info.groups)
    if info.extra:
        out["extra"] = info.extra_dict()
    return out


def _source_ips(request: web.Request) -> list[str]:
    """utilnet.SourceIPs: X-Forwarded-For, X-Real-Ip, then the connection's peer."""
    ips = [ip.strip() for ip in request.headers.get("X-Forwarded-For", "").split(",") if ip.strip()]
    real = request.headers.get("X-Real-Ip", "").strip()
    if real and real not in ips:
        ips.append(real)
    remote = request.remote
    if remote and remote not in ips:
        ips.append(remote)
    return ips


def _without_managed_fields(obj: Any) -> Any:
    """copyWithoutManagedFields: the object, each list item, each table row's object."""
    if not isinstance(obj, dict):
        return obj
    obj = dict(obj)
    if isinstance(obj.get("metadata"), dict) and "managedFields" in obj["metadata"]:
        obj["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    if isinstance(obj.get("items"), list):
        obj["items"] = [_without_managed_fields(i) for i in obj["items"]]
    if obj.get("kind") == "Table" and isinstance(obj.get("rows"), list):
        obj["rows"] = [
            {**row, "object": _without_managed_fields(row.get("object"))} if isinstance(row, dict) else row
            for row in obj["rows"]
        ]
    return obj


@dataclass
class AuditContext:
    audit_id: str
    received: float
    auditor: Auditor
    attrs: Attributes | None = None
    config: pol.RequestAuditConfig = field(default_factory=pol.RequestAuditConfig)
    authenticated: UserInfo | None = None
    user: dict[str, Any] = field(default_factory=dict)
    impersonated: dict[str, Any] | None = None
    object_ref: dict[str, str] | None = None
    annotations: dict[str, str] = field(default_factory=dict)
    request_object: Any = None
    response_status: dict[str, Any] | None = None
    response_object: Any = None
    started: bool = False
    panic: str = ""

    @property
    def enabled(self) -> bool:
        return self.config.level != pol.NONE

    def event(self, request: web.Request, stage: str, now: float | None = None) -> dict[str, Any]:
        """The event at `stage`, in upstream's field order, empty fields left out."""
        assert self.attrs is not None
        ev: dict[str, Any] = {
            "kind": "Event",
            "apiVersion": pol.API_VERSION,
            "level": self.config.level,
            "auditID": self.audit_id,
            "stage": stage,
            "requestURI": request.raw_path,
            "verb": self.attrs.verb,
            "user": self.user,
        }
        if self.impersonated is not None:
            ev["impersonatedUser"] = self.impersonated
        ev["sourceIPs"] = _source_ips(request)
        agent = request.headers.get("User-Agent", "")
        if agent:
            ev["userAgent"] = (
                agent if len(agent) <= _MAX_USER_AGENT else agent[:_MAX_USER_AGENT] + "...TRUNCATED"
            )
        if self.object_ref is not None:
            ev["objectRef"] = {k: v for k, v in self.object_ref.items() if v}
        if self.response_status is not None:
            ev["responseStatus"] = self.response_status
        if self.request_object is not None:
            ev["requestObject"] = self.request_object
        if self.response_object is not None:
            ev["responseObject"] = self.response_object
        ev["requestReceivedTimestamp"] = micro_time(self.received)
        ev["stageTimestamp"] = micro_time(
            self.received if stage == pol.REQUEST_RECEIVED else (now or time.time())
        )
        if self.annotations:
            ev["annotations"] = dict(self.annotations)
        return ev

    def emit(self, request: web.Request, stage: str) -> None:
        """upstream's processAuditEvent: stages the policy omits are not sent."""
        if stage in self.config.omit_stages or self.auditor.backend is None:
            return
        self.auditor.events += 1
        self.auditor.backend.process(self.event(request, stage))


AUDIT_KEY = web.RequestKey("audit", AuditContext)


class Auditor:
    """The policy and the backend, and the middleware that opens and closes each request's event."""

    def __init__(self, policy: pol.Policy | None, backend: Backends | None) -> None:
        self.policy = policy
        self.backend = backend
        self.events = 0  # sent to the backend
        self.levels: dict[str, int] = {}  # requests by the level the policy gave them

    def evaluate(self, attrs: Attributes) -> pol.RequestAuditConfig:
        assert self.policy is not None
        config = self.policy.evaluate(attrs)
        self.levels[config.level] = self.levels.get(config.level, 0) + 1
        return config

    def metrics(self) -> list[Metric]:
        """upstream's apiserver_audit_event_total, apiserver_audit_error_total{plugin} (the buffer's
        drops, the log's failed writes) and apiserver_audit_level_total{level}; none without a policy."""
        if self.policy is None or self.backend is None:
            return []
        events = CounterMetricFamily(
            "apiserver_audit_event",
            "Counter of audit events generated and sent to the audit backend.",
            value=self.events,
        )
        errors = CounterMetricFamily(
            "apiserver_audit_error",
            "Counter of audit events that failed to be audited properly. Plugin identifies the plugin affected by the error.",
            labels=["plugin"],
        )
        for plugin, count in sorted(self.backend.failures().items()):
            errors.add_metric([plugin], count)
        levels = CounterMetricFamily(
            "apiserver_audit_level",
            "Counter of policy levels for audit events (1 per request).",
            labels=["level"],
        )
        for level, count in sorted(self.levels.items()):
            levels.add_metric([level], count)
        return [events, errors, levels]

    @property
    def enabled(self) -> bool:
        return self.policy is not None

    async def start(self) -> None:
        if self.backend is not None:
            await self.backend.start()

    async def stop(self) -> None:
        if self.backend is not None:
            await self.backend.stop()

    @web.middleware
    async def middleware(self, request: web.Request, handler):  # type: ignore[no-untyped-def]
        ctx = AuditContext(request.headers.get(HEADER) or new_uid(), time.time(), self)
        request[AUDIT_KEY] = ctx
        if self.policy is None:
            return await handler(request)
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            self._complete(request, ctx, exc.status, None)
            raise
        except BaseException:
            # The client went away (or the server is stopping): close the event with what was sent.
            self._complete(request, ctx, 0, None)
            raise
        self._complete(request, ctx, response.status, response)
        if self.backend is not None:
            await self.backend.room()  # blocking mode: a full buffer holds the response, never drops
        return response

    async def on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        """The `Audit-Id` header on every response; ResponseStarted as a long-running one begins."""
        ctx: AuditContext | None = request.get(AUDIT_KEY)
        if ctx is None:
            return
        response.headers[HEADER] = ctx.audit_id
        if ctx.enabled and not ctx.started and ctx.attrs is not None and ctx.attrs.long_running:
            ctx.started = True
            ctx.response_status = {"metadata": {}, "code": response.status}
            ctx.emit(request, pol.RESPONSE_STARTED)

    def _complete(
        self, request: web.Request, ctx: AuditContext, code: int, response: web.StreamResponse | None
    ) -> None:
        if ctx.attrs is None:  # authentication never finished: upstream's failed-authentication audit
            ctx.attrs = request_attributes(request.method, request.path, request.query)
            ctx.config = self.evaluate(ctx.attrs)
            if not ctx.enabled:
                return
            if code == 401:
                ctx.response_status = _status_of(response, code)
                ctx.started = True
                ctx.emit(request, pol.RESPONSE_STARTED)
                return
        if not ctx.enabled:
            return
        if ctx.panic:
            ctx.response_status = {
                "metadata": {},
                "status": "Failure",
                "message": ctx.panic,
                "reason": "InternalError",
                "code": 500,
            }
            ctx.emit(request, pol.PANIC)
            return
        if response is None and code == 0:
            # Nothing (more) was sent: upstream fakes a success, "Connection closed early".
            if ctx.response_status is None:
                ctx.response_status = {
                    "metadata": {},
                    "status": "Success",
                    "message": "Connection closed early",
                    "code": 200,
                }
        else:
            ctx.response_status = _status_of(response, code)
            if pol.at_least(ctx.config.level, pol.REQUEST_RESPONSE) and response is not None:
                body = _json_body(response)
                if body is not None:
                    ctx.response_object = (
                        _without_managed_fields(body) if ctx.config.omit_managed_fields else body
                    )
        for key, value in admission_context.audit_annotations().items():
            ctx.annotations.setdefault(key, value)
        if ctx.attrs is not None and ctx.attrs.long_running and not ctx.started:
            ctx.started = True
            ctx.emit(request, pol.RESPONSE_STARTED)
        ctx.emit(request, pol.RESPONSE_COMPLETE)


def _json_body(response: web.StreamResponse | None) -> Any:
    body = getattr(response, "body", None)
    if not isinstance(body, bytes | bytearray) or not body:
        return None
    if "json" not in (response.content_type if response is not None else ""):
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def _status_of(response: web.StreamResponse | None, code: int) -> dict[str, Any]:
    """responseStatus: the code, and a Status body's bounded fields (status, message, reason, details),
    as upstream's LogResponseObject copies them."""
    out: dict[str, Any] = {"metadata": {}, "code": code}
    body = getattr(response, "body", None)
    if isinstance(body, bytes | bytearray) and b'"kind":"Status"' in body[:200]:
        try:
            status = json.loads(body)
        except ValueError:
            return out
        out = {"metadata": {}}
        for key in ("status", "message", "reason", "details"):
            if status.get(key):
                out[key] = status[key]
        out["code"] = status.get("code") or code
    return out


# --- the hooks the server calls --------------------------------------------------------------------


def _ctx(request: web.Request) -> AuditContext | None:
    ctx: AuditContext | None = request.get(AUDIT_KEY)
    return ctx if ctx is not None and ctx.auditor.policy is not None else None


def authenticated(request: web.Request, user: UserInfo) -> None:
    """upstream's WithAudit: the caller is known, the policy decides the level, RequestReceived is sent."""
    ctx = _ctx(request)
    if ctx is None or ctx.attrs is not None:
        return
    assert ctx.auditor.policy is not None
    attrs = request_attributes(request.method, request.path, request.query)
    attrs.user = user
    ctx.attrs, ctx.authenticated = attrs, user
    ctx.config = ctx.auditor.evaluate(attrs)
    if not ctx.enabled:
        return
    ctx.user = _user(user)
    if attrs.resource_request:
        ctx.object_ref = {
            "resource": attrs.resource,
            "namespace": attrs.namespace,
            "name": attrs.name,
            "uid": "",
            "apiGroup": attrs.api_group,
            "apiVersion": attrs.api_version,
            "resourceVersion": "",
            "subresource": attrs.subresource,
        }
    ctx.emit(request, pol.REQUEST_RECEIVED)


def impersonated(request: web.Request, user: UserInfo) -> None:
    """LogImpersonatedUser, when the request acts as someone other than its caller."""
    ctx = _ctx(request)
    if ctx is not None and ctx.enabled and user is not ctx.authenticated:
        ctx.impersonated = _user(user)


def authorized(request: web.Request, decision: Decision) -> None:
    """WithAuthorization's annotations: the decision and the authorizer's reason."""
    ctx = _ctx(request)
    if ctx is None or not ctx.enabled:
        return
    ctx.annotations.setdefault(DECISION_KEY, "allow" if decision.allowed else "forbid")
    ctx.annotations.setdefault(REASON_KEY, decision.reason)


def request_object(request: web.Request, obj: Any) -> None:
    """LogRequestObject / LogRequestPatch: a create's or update's object completes objectRef (name,
    namespace, uid, resourceVersion); at Request level and above the body itself is kept (a copy, as
    upstream encodes it there and then)."""
    ctx = _ctx(request)
    if ctx is None or not ctx.enabled or ctx.attrs is None:
        return
    if ctx.object_ref is not None and ctx.attrs.verb in ("create", "update") and isinstance(obj, dict):
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            for ref_key, meta_key in (
                ("namespace", "namespace"),
                ("name", "name"),
                ("uid", "uid"),
                ("resourceVersion", "resourceVersion"),
            ):
                if not ctx.object_ref[ref_key] and isinstance(meta.get(meta_key), str):
                    ctx.object_ref[ref_key] = meta[meta_key]
    if pol.at_least(ctx.config.level, pol.REQUEST):
        kept = copy.deepcopy(obj)
        ctx.request_object = _without_managed_fields(kept) if ctx.config.omit_managed_fields else kept


def panicked(request: web.Request, exc: BaseException) -> None:
    """A handler that failed unexpectedly: the event's stage becomes Panic."""
    ctx = _ctx(request)
    if ctx is not None:
        ctx.panic = f"APIServer panic'd: {type(exc).__name__}: {exc}"
