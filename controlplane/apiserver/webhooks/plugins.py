"""The MutatingAdmissionWebhook and ValidatingAdmissionWebhook admission plugins (upstream's
webhook/mutating and webhook/validating dispatchers). For each write: the webhooks whose rules,
selectors and match conditions select it (dispatch.py), then the calls. Mutating webhooks run one after
another, each seeing the previous one's patch, and those with reinvocationPolicy IfNeeded run once more
when a later webhook changed the object; validating webhooks run concurrently and the first refusal, in
their order, wins. failurePolicy decides what a failed call means; a dry run reaches only webhooks
without side effects. Logs name the webhook, never the object (it may be a Secret)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from controlplane.apiserver import admissionmetrics, errors, latencytrackers, typed
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.patch import json_patch
from controlplane.apiserver.webhooks import context, review
from controlplane.apiserver.webhooks.client import CallError, Reply, WebhookClient
from controlplane.apiserver.webhooks.dispatch import Invocation, invocation, relevant, to_storage
from controlplane.apiserver.webhooks.source import MUTATING_BUCKET, VALIDATING_BUCKET, Webhook, WebhookSource

if TYPE_CHECKING:
    from controlplane.apiserver.admission import AdmissionRequest
    from controlplane.apiserver.kinds.base import Kind
    from controlplane.storage.cache import WatchCache

log = logging.getLogger("controlplane.apiserver.webhooks")
Obj = dict[str, Any]

CLIENT = WebhookClient()


class CallingError(Exception):
    """upstream's ErrCallingWebhook: failurePolicy decides whether it refuses the request."""

    def __init__(self, webhook: str, reason: str) -> None:
        super().__init__(f'failed calling webhook "{webhook}": {reason}')
        self.webhook = webhook


def _dry_run_check(hook: Webhook, dry_run: bool) -> None:
    if dry_run and hook.side_effects not in ("None", "NoneOnDryRun"):
        raise errors.bad_request(f'admission webhook "{hook.name}" does not support dry run')


async def call(hook: Webhook, kind: Kind, inv: Invocation, mutating: bool, dry_run: bool) -> review.Response:
    """One review round trip, the request shown in `kind`'s version; CallingError for anything
    failurePolicy judges, ApiError for a refusal. Timed into apiserver_admission_webhook_*."""
    started = time.perf_counter()
    # A refusal, or a failed call that failurePolicy Fail turns into one, counts as rejected; upstream's
    # step type is "admit" for mutating webhooks and "validating" for validating ones.
    rejected = True
    try:
        result = await _round_trip(hook, kind, inv, mutating, dry_run)
        rejected = False
        return result
    except CallingError:
        rejected = not hook.fails_open
        raise
    finally:
        phase = "admit" if mutating else "validating"
        took = time.perf_counter() - started
        admissionmetrics.webhook(hook.name, phase, inv.operation, rejected, took)
        latencytrackers.webhook(mutating, took)  # left out of apiserver_request_sli_duration_seconds


async def _round_trip(
    hook: Webhook, kind: Kind, inv: Invocation, mutating: bool, dry_run: bool
) -> review.Response:
    _dry_run_check(hook, dry_run)
    view = inv.view(kind)
    uid, body = review.build(
        view.target, inv.operation, inv.namespace, inv.name, view.obj, view.old, inv.user, dry_run
    )
    try:
        reply = await CLIENT.post(hook, inv.cache, body)
    except CallError as err:
        raise CallingError(hook.name, f"failed to call webhook: {err}") from None
    if not 200 <= reply.status < 300:
        raise CallingError(hook.name, f"failed to call webhook: {_status_text(reply)}")
    try:
        doc = review.decode(reply.body)
    except review.DecodeError as err:
        raise CallingError(hook.name, f"failed to call webhook: {err}") from None
    try:
        result = review.verify(uid, mutating, doc)
    except review.InvalidResponse as err:
        raise CallingError(hook.name, f"received invalid webhook response: {err}") from None
    except review.UndecodablePatch as err:
        raise CallingError(hook.name, f"received undecodable patch in webhook response: {err}") from None
    for text in result.warnings:
        context.add_warning(text)
    if not result.allowed:
        status = review.denial_status(hook.name, result.status)
        raise ApiError(status["code"], status["reason"], status["message"], status.get("details"))
    return result


def _status_text(reply: Reply) -> str:
    try:
        doc = json.loads(reply.body)
    except (ValueError, UnicodeDecodeError):
        doc = None
    if isinstance(doc, dict) and doc.get("kind") == "Status" and doc.get("message"):
        return str(doc["message"])
    text = reply.body.decode(errors="replace").strip()
    if text:
        return f'an error on the server ("{text[:256]}") has prevented the request from succeeding'
    return f"the server responded with the status code {reply.status} but did not return more information"


def _failed(hook: Webhook, err: CallingError) -> None:
    """A failed call: a 500 under failurePolicy Fail; logged and passed over under Ignore."""
    if hook.fails_open:
        log.warning(
            "event=webhook-failed-open webhook=%s configuration=%s cause=%s",
            hook.name,
            hook.configuration,
            err,
        )
        return
    log.warning("event=webhook-failed-closed webhook=%s configuration=%s", hook.name, hook.configuration)
    raise errors.internal(str(err)) from None


# What upstream's BeforeCreate/BeforeUpdate set after mutating admission, so a webhook cannot change them.
_SYSTEM_META = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
)


def _keep_system_fields(request: AdmissionRequest, patched: Obj) -> None:
    meta = patched.get("metadata")
    if not isinstance(meta, dict):
        raise errors.internal("json: cannot unmarshal metadata of the patched object into an object")
    before = request.obj.get("metadata") or {}
    for field in _SYSTEM_META:
        if field in before:
            meta[field] = before[field]
        else:
            meta.pop(field, None)
    if not meta.get("name") and before.get("name"):  # shown without its generated name
        meta["name"] = before["name"]
    if request.kind.namespaced and meta.get("namespace", request.namespace) != request.namespace:
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )


def _replace(obj: Obj, new: Obj) -> None:
    """Put the patched object in place, keeping the dicts the registry holds (it kept `metadata`)."""
    meta = obj.get("metadata")
    new_meta = new.get("metadata")
    obj.clear()
    obj.update(new)
    if isinstance(meta, dict) and isinstance(new_meta, dict):
        meta.clear()
        meta.update(new_meta)
        obj["metadata"] = meta


class _Plugin:
    name = ""
    bucket = ""
    connects = True  # webhooks registered for CONNECT see pods/exec, attach and portforward

    def __init__(self) -> None:
        self.source = WebhookSource(self.bucket)

    def reviews_deletes(self, cache: WatchCache) -> bool:
        return bool(self.source.hooks(cache))

    def _hooks(self, request: AdmissionRequest) -> tuple[list[tuple[Webhook, Kind]], Invocation | None]:
        hooks = self.source.hooks(request.registry.cache)
        if not hooks:
            return [], None
        inv = invocation(request)
        return relevant(hooks, inv), inv


class MutatingAdmissionWebhook(_Plugin):
    name = "MutatingAdmissionWebhook"
    bucket = MUTATING_BUCKET

    async def review_delete(self, request: AdmissionRequest) -> None:
        await self.admit(request)  # a patch for a DELETE is refused in _call

    async def admit(self, request: AdmissionRequest) -> None:
        hooks = self.source.hooks(request.registry.cache)
        if not hooks:
            return
        inv = invocation(request, mutating=True)
        dry_run = context.is_dry_run()
        called: list[int] = []
        changed_at = -1
        # Each webhook is matched against the object as the ones before it left it, as upstream's.
        for i, hook in enumerate(hooks):
            for _, kind in relevant((hook,), inv):
                called.append(i)
                if await self._call(hook, kind, inv, request, dry_run):
                    changed_at = i
        # reinvocationPolicy IfNeeded: once more for those called before the last change.
        for i in called:
            if i < changed_at and hooks[i].reinvoke:
                for _, kind in relevant((hooks[i],), inv):
                    await self._call(hooks[i], kind, inv, request, dry_run)

    async def _call(
        self, hook: Webhook, kind: Kind, inv: Invocation, request: AdmissionRequest, dry_run: bool
    ) -> bool:
        try:
            result = await call(hook, kind, inv, True, dry_run)
        except CallingError as err:
            _failed(hook, err)
            return False
        shown = inv.view(kind).obj
        if not result.patch or shown is None:
            if result.patch and shown is None:
                raise errors.internal(
                    f'admission webhook "{hook.name}" attempted to modify the object, which is not supported for this operation'
                )
            return False
        try:
            patched = json_patch(shown, result.patch)
        except ApiError as err:
            raise errors.internal(err.message) from None
        if not isinstance(patched, dict):
            raise errors.internal("json: cannot unmarshal patched document into an object")
        if request.operation == "CONNECT":  # the connect options (no metadata, no defaults) as patched
            if patched == request.obj:
                return False
            request.obj.clear()
            request.obj.update(patched)
            inv.changed(request.obj)
            return True
        patched = to_storage(kind, patched)
        _keep_system_fields(request, patched)
        if request.kind.schema in typed.CUSTOM:
            # a custom resource is pruned to its schema again (upstream decodes the patched object
            # through the CRD's pruning decoder): fields a webhook adds that the schema lacks are dropped
            typed.decode(patched, request.kind.schema)
        if not request.subresource or request.operation != "CREATE":
            # a create through a subresource (a Binding, an Eviction) is an object of its own kind,
            # which the parent's defaults do not fit
            request.kind.default(patched, request.operation == "CREATE")
        if patched == request.obj:
            return False
        _replace(request.obj, patched)
        inv.changed(request.obj)
        return True


class ValidatingAdmissionWebhook(_Plugin):
    name = "ValidatingAdmissionWebhook"
    bucket = VALIDATING_BUCKET

    async def review_delete(self, request: AdmissionRequest) -> None:
        await self.validate(request)

    async def validate(self, request: AdmissionRequest) -> None:
        hooks, inv = self._hooks(request)
        if not hooks or inv is None:
            return
        dry_run = context.is_dry_run()
        results: list[Any]
        if len(hooks) == 1:  # the common case: no tasks to spawn
            try:
                results = [await call(*hooks[0], inv, False, dry_run)]
            except (CallingError, ApiError) as err:
                results = [err]
        else:
            results = await asyncio.gather(
                *(call(h, k, inv, False, dry_run) for h, k in hooks), return_exceptions=True
            )
        for (hook, _), result in zip(hooks, results, strict=True):
            if isinstance(result, CallingError):
                _failed(hook, result)
            elif isinstance(result, BaseException):
                raise result
