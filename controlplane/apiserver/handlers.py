"""REST handlers: map verbs on paths to registry calls and render objects, lists, tables and watches.

Responses reuse the watch cache's encoded bytes wherever the object needs no change (lists, watch
events), which is most of the traffic.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import random
import time
from typing import Any

from aiohttp import web

from controlplane.apiserver import errors, eventsv1, ssa, tables
from controlplane.apiserver.authn import USER_KEY, UserInfo
from controlplane.apiserver.authz import Attributes, AuthorizerChain
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.fieldcheck import prune_unknown, unknown_fields
from controlplane.apiserver.kubeletproxy import KubeletClient, log_container, validate_log_query
from controlplane.apiserver.meta import timestamp
from controlplane.apiserver.patch import json_patch, merge_patch, strategic_merge
from controlplane.apiserver.registry import DeleteOptions, Registry
from controlplane.apiserver.request import MAX_BODY, RequestInfo, bool_param, decode, parse_path
from controlplane.apiserver.resources import Resource, core
from controlplane.apiserver.selectors import (
    EVENTS_V1_FIELDS,
    make_predicate,
    parse_field_selector,
    parse_label_selector,
    single_name,
    slim_view,
)
from controlplane.apiserver.smp_schema import schema_for
from controlplane.storage import CompactedError
from controlplane.storage.cache import CLOSED, CachedObject, GoneError, TooLargeResourceVersionError, encode

log = logging.getLogger("controlplane.apiserver")
Obj = dict[str, Any]

BOOKMARK_INTERVAL = 60.0
DISCONNECT_CHECK = 5.0  # how often an idle watch looks whether its client is still there
_TABLE = "as=Table"
_PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}


def json_response(obj: Obj, status: int = 200) -> web.Response:
    return web.Response(body=encode(obj), status=status, content_type="application/json")


def _is_events_v1(res: Resource) -> bool:
    return res.group == "events.k8s.io"


def _out(res: Resource, obj: Obj) -> Obj:
    return eventsv1.from_core(obj) if _is_events_v1(res) else obj


def _out_raw(res: Resource, cached: CachedObject) -> bytes:
    return encode(eventsv1.from_core(cached.obj)) if _is_events_v1(res) else cached.raw


def _wants_table(request: web.Request) -> bool:
    return _TABLE in request.headers.get("Accept", "")


def _wants_metadata(request: web.Request) -> bool:
    """Metadata-only clients (client-go's metadata informers) ask for PartialObjectMetadata(List)."""
    return "as=PartialObjectMetadata" in request.headers.get("Accept", "")


def _partial(obj: Obj) -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}


class RestHandler:
    def __init__(self, registry: Registry, authorizer: AuthorizerChain) -> None:
        self.registry = registry
        self.cache = registry.cache
        self.authorizer = authorizer
        self.active_watches = 0
        self.kubelet: KubeletClient | None = None  # set when the server has a client certificate for nodes

    # --- routing -------------------------------------------------------------------------------------

    async def core(self, request: web.Request) -> web.StreamResponse:
        return await self._dispatch(request, "", "v1", request.match_info["tail"])

    async def grouped(self, request: web.Request) -> web.StreamResponse:
        m = request.match_info
        return await self._dispatch(request, m["group"], m["version"], m["tail"])

    async def _dispatch(self, request: web.Request, group: str, version: str, tail: str) -> web.StreamResponse:
        info = parse_path(group, version, tail)
        method = request.method
        q = request.query
        watch = info.watch_path or bool_param(q, "watch")
        if not info.name:
            verb = {"GET": "watch" if watch else "list", "POST": "create", "DELETE": "deletecollection"}.get(method)
        else:
            verb = {"GET": "watch" if watch else "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete",
                    "POST": "create"}.get(method)
        if verb is None or (verb not in info.resource.verbs and not info.subresource):
            raise errors.method_not_allowed()
        if info.subresource:
            allowed = info.resource.subresources[info.subresource][3]
            if verb not in allowed:
                raise errors.method_not_allowed()
        if info.name and verb == "create" and not info.subresource:
            raise errors.method_not_allowed()
        user: UserInfo = request[USER_KEY]
        decision = self.authorizer.authorize(
            Attributes(user, verb, info.resource.group, info.resource.version, info.resource.plural,
                       info.subresource, info.namespace, info.name, request.path)
        )
        if not decision.allowed:
            raise errors.forbidden_request(
                f'{info.resource.plural} is forbidden: User "{user.name}" cannot {verb} resource '
                f'"{info.resource.plural}": {decision.reason}',
                info.resource.plural, info.resource.group, info.name,
            )
        if info.resource.namespaced and not info.namespace and verb not in ("list", "watch", "deletecollection"):
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", {})
        handler = getattr(self, f"_{verb}")
        return await handler(request, info)

    # --- reads ---------------------------------------------------------------------------------------

    async def _pod_log(self, request: web.Request, pod: Obj) -> web.StreamResponse:
        """GET pods/{name}/log: checked here, streamed from the pod's node agent."""
        container = log_container(pod, request.query.get("container", ""))
        params = validate_log_query(request.query)
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            raise errors.bad_request(f"pod {pod['metadata']['name']} does not have a host assigned")
        if self.kubelet is None:
            raise errors.internal("this server has no client certificate for node agents (serving plain HTTP)")
        node = await self.registry.get(core("nodes"), "", node_name)
        return await self.kubelet.stream_log(request, pod, node.obj, container, params)

    async def _get(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        cached = await self.registry.get(res, info.namespace, info.name)
        if info.subresource == "scale":
            return json_response(_scale_of(cached.obj))
        if info.subresource == "log":
            return await self._pod_log(request, cached.obj)
        if _wants_table(request):
            return json_response(
                tables.table(res.bucket, [cached.obj], request.query.get("includeObject", "Metadata"),
                             {"resourceVersion": str(cached.revision)})
            )
        if _wants_metadata(request):
            return json_response(_partial(cached.obj))
        if _is_events_v1(res):
            return json_response(_out(res, cached.obj))
        return web.Response(body=cached.raw, content_type="application/json")

    def _predicate(self, request: web.Request, res: Resource) -> tuple[Any, str | None]:
        q = request.query
        labels = parse_label_selector(q.get("labelSelector", ""))
        fields = parse_field_selector(
            q.get("fieldSelector", ""), res.bucket, EVENTS_V1_FIELDS if _is_events_v1(res) else None
        )
        return make_predicate(labels, fields), single_name(fields)

    async def _list(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        q = request.query
        predicate, _ = self._predicate(request, res)
        rv = q.get("resourceVersion", "")
        match = q.get("resourceVersionMatch", "")
        limit = int(q.get("limit", "0") or 0)
        token = q.get("continue", "")
        prefix = res.prefix(info.namespace)
        next_token = ""
        if token or (limit and rv == "") or match == "Exact":
            items, list_rv, next_token = await self._list_from_store(res, prefix, predicate, limit, token, rv, match)
        else:
            try:
                if rv not in ("", "0"):
                    await self.cache.wait_for(int(rv))
                elif rv == "":
                    await self.cache.wait_fresh()
            except TooLargeResourceVersionError as err:
                raise errors.ApiError(504, "Timeout", f"Too large resource version: {err.requested}, current: {err.current}",
                                      {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}) from None
            except ValueError:
                raise errors.bad_request(f"invalid resourceVersion {rv!r}") from None
            items = self.cache.list(res.bucket, prefix, predicate)
            list_rv = self.cache.revision
        list_meta: Obj = {"resourceVersion": str(list_rv)}
        if next_token:
            list_meta["continue"] = next_token
        if _wants_table(request):
            # Cells come from the stored (core) form, which the column functions read.
            objs = [c.obj for c in items]
            return json_response(tables.table(res.bucket, objs, q.get("includeObject", "Metadata"), list_meta))
        if _wants_metadata(request):
            return json_response({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                                  "metadata": list_meta, "items": [_partial(c.obj) for c in items]})
        head = encode({"kind": res.list_kind, "apiVersion": res.api_version, "metadata": list_meta})
        body = b"".join([head[:-1], b',"items":[', b",".join(_out_raw(res, c) for c in items), b"]}"])
        return web.Response(body=body, content_type="application/json")

    async def _list_from_store(
        self, res: Resource, prefix: str, predicate: Any, limit: int, token: str, rv: str, match: str
    ) -> tuple[list[CachedObject], int, str]:
        revision = 0
        start_after = ""
        if token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
                revision = int(decoded["rv"])
                start_after = prefix + decoded["start"]
            except (ValueError, KeyError, TypeError):
                raise errors.bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)") from None
        elif match == "Exact" and rv:
            revision = int(rv)
        out: list[CachedObject] = []
        try:
            while True:
                page = max(limit - len(out), 0) if limit else 0
                kvs, served, more = await self.registry.store.list(prefix, revision, start_after, page)
                revision = served
                for kv in kvs:
                    cached = CachedObject.from_value(kv.key, kv.value, kv.mod_revision, slim_view)
                    if predicate is None or predicate(cached.view):
                        out.append(cached)
                    start_after = kv.key
                if not more or (limit and len(out) >= limit):
                    break
        except CompactedError:
            if token:
                raise errors.gone(
                    "The provided continue parameter is too old to display a consistent list result. You can "
                    "start a new list without the continue parameter."
                ) from None
            raise errors.gone(f"too old resource version: {revision} ({self.registry.store.compacted_revision + 1})") from None
        next_token = ""
        if limit and more:
            payload = {"v": "meta.k8s.io/v1", "rv": revision, "start": start_after[len(prefix):]}
            next_token = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")
        return out, revision, next_token

    # --- watch ---------------------------------------------------------------------------------------

    async def _watch(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        q = request.query
        predicate, one_name = self._predicate(request, res)
        if info.name:
            one_name = info.name
            base = predicate
            predicate = (lambda o: o["metadata"].get("name") == info.name and (base is None or base(o)))  # noqa: E731
        rv = q.get("resourceVersion", "")
        bookmarks = bool_param(q, "allowWatchBookmarks")
        initial = q.get("sendInitialEvents")
        send_initial = str(initial).lower() == "true"
        if initial is not None and q.get("resourceVersionMatch") != "NotOlderThan":
            raise errors.invalid_object("ListOptions", "meta.k8s.io", "", [errors.forbidden(
                "resourceVersionMatch", "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")])
        timeout = float(q.get("timeoutSeconds") or random.uniform(1800, 3600))
        key_prefix = res.key(info.namespace, one_name) if one_name and (info.namespace or not res.namespaced) else res.prefix(info.namespace)
        from_revision: int | None
        error_status: Obj | None = None
        try:
            if send_initial:
                if rv == "":
                    await self.cache.wait_fresh()
                elif rv != "0":
                    await self.cache.wait_for(int(rv))
                from_revision = None
            elif rv in ("", "0"):
                if rv == "":
                    await self.cache.wait_fresh()
                from_revision = None
            else:
                from_revision = int(rv)
                await self.cache.wait_for(from_revision)
        except ValueError:
            raise errors.bad_request(f"invalid resourceVersion {rv!r}") from None
        except TooLargeResourceVersionError as err:
            raise errors.ApiError(504, "Timeout", f"Too large resource version: {err.requested}, current: {err.current}",
                                  {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}) from None
        watcher = None
        try:
            watcher = self.cache.watch(res.bucket, key_prefix, predicate, from_revision)
        except GoneError as err:
            error_status = errors.gone(f"too old resource version: {err.requested} ({err.oldest})").status()
        initial_count = watcher.queue.qsize() if (watcher and send_initial) else -1
        initial_rv = self.cache.revision
        mode = "table" if _wants_table(request) else "metadata" if _wants_metadata(request) else "object"
        response = web.StreamResponse(headers={"Content-Type": "application/json", "Cache-Control": "no-cache"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        self.active_watches += 1
        try:
            if error_status is not None or watcher is None:
                await response.write(encode({"type": "ERROR", "object": error_status}) + b"\n")
                return response
            await self._pump(request, response, watcher, res, mode, request.query.get("includeObject", "Metadata"),
                             bookmarks, timeout, initial_count, initial_rv)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.active_watches -= 1
            if watcher is not None:
                watcher.close()
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await response.write_eof()
        return response

    async def _pump(
        self, request: web.Request, response: web.StreamResponse, watcher: Any, res: Resource, mode: str, include: str,
        bookmarks: bool, duration: float, initial_count: int, initial_rv: int,
    ) -> None:
        deadline = time.monotonic() + duration
        next_bookmark = time.monotonic() + BOOKMARK_INTERVAL
        sent_headers = False
        sent = 0
        if initial_count == 0:
            await response.write(self._bookmark(res, initial_rv, True))
        while True:
            transport = request.transport
            if transport is None or transport.is_closing():
                return  # the client went away: release the watcher now, not at the next event
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                # Late (a busy server): still end with the bookmark the client asked for.
                if bookmarks and watcher.queue.empty():
                    await response.write(self._bookmark(res, self.cache.revision, False))
                return
            wait = min(remaining, next_bookmark - now) if bookmarks else remaining
            # Upstream sends a last bookmark shortly before a watch with timeoutSeconds ends.
            if bookmarks and remaining > 1:
                wait = min(wait, remaining - 1 if remaining > 2 else remaining)
            wait = min(wait, DISCONNECT_CHECK)
            try:
                event = await asyncio.wait_for(watcher.queue.get(), max(wait, 0.01))
            except TimeoutError:
                if bookmarks and (time.monotonic() >= next_bookmark or deadline - time.monotonic() <= 1.5):
                    if watcher.queue.empty():
                        await response.write(self._bookmark(res, self.cache.revision, False))
                    next_bookmark = time.monotonic() + BOOKMARK_INTERVAL
                    if deadline - time.monotonic() <= 1.5:
                        await asyncio.sleep(max(deadline - time.monotonic(), 0))
                        return
                continue
            if event is CLOSED:
                return
            if mode == "table":
                obj = tables.table(res.bucket, [event.obj.obj], include, headers=not sent_headers)
                sent_headers = True
                line = encode({"type": event.type, "object": obj})
            elif mode == "metadata":
                line = encode({"type": event.type, "object": _partial(event.obj.obj)})
            else:
                line = b"".join([b'{"type":"', event.type.encode(), b'","object":', _out_raw(res, event.obj), b"}"])
            await response.write(line + b"\n")
            sent += 1
            if sent == initial_count:
                await response.write(self._bookmark(res, initial_rv, True))

    @staticmethod
    def _bookmark(res: Resource, revision: int, initial_end: bool) -> bytes:
        meta: Obj = {"resourceVersion": str(revision), "creationTimestamp": None}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return encode({"type": "BOOKMARK", "object": {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta}}) + b"\n"

    # --- writes --------------------------------------------------------------------------------------

    async def _body(self, request: web.Request) -> Any:
        if request.content_length is not None and request.content_length > MAX_BODY:
            raise errors.ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_BODY}")
        raw = await request.read()
        return decode(raw, request.content_type or "application/json")

    def _check_kind(self, res: Resource, obj: Any, expected_kind: str | None = None, api_version: str | None = None) -> Obj:
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON or YAML object")
        kind = expected_kind or res.kind
        version = api_version or res.api_version
        if obj.get("apiVersion") and obj["apiVersion"] != version:
            raise errors.bad_request(
                f"the API version in the data ({obj['apiVersion']}) does not match the expected API version ({version})"
            )
        if obj.get("kind") and obj["kind"] != kind:
            raise errors.bad_request(f"the kind in the data ({obj['kind']}) does not match the expected kind ({kind})")
        obj["apiVersion"] = version
        obj["kind"] = kind
        if obj.get("metadata") is not None and not isinstance(obj.get("metadata"), dict):
            raise errors.bad_request("metadata must be an object")
        return obj

    def _strict(self, request: web.Request, res: Resource, obj: Obj) -> list[str]:
        """fieldValidation: Strict -> 400 naming each unknown field; Warn (default) -> warning headers;
        Ignore -> silence. Unknown fields are dropped before storing, as upstream's decoder does."""
        mode = request.query.get("fieldValidation", "Warn")
        kind = res.kind if not _is_events_v1(res) else "events.k8s.io/Event"
        if mode == "Strict":
            unknown = unknown_fields(kind, obj)
            if unknown:
                fields = ", ".join(f'unknown field "{f}"' for f in unknown)
                raise errors.bad_request(
                    f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
                    f"strict decoding error: {fields}"
                )
            return []
        unknown = prune_unknown(kind, obj)
        return [] if mode == "Ignore" else unknown

    @staticmethod
    def _warn(response: web.StreamResponse, unknown: list[str]) -> web.StreamResponse:
        for field in unknown:
            response.headers.add("Warning", f'299 - "unknown field \\"{field}\\""')
        return response

    def _dry_run(self, request: web.Request) -> bool:
        values = request.query.getall("dryRun", [])
        for v in values:
            if v != "All":
                raise errors.bad_request(f'unsupported dryRun value "{v}"')
        return bool(values)

    async def _create(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        if info.subresource == "binding" or res.plural == "bindings":
            return await self._bind(request, info)
        if res.kind == "SelfSubjectReview":
            user: UserInfo = request[USER_KEY]
            info_out: Obj = {"username": user.name, "groups": list(user.groups)}
            if user.uid:
                info_out["uid"] = user.uid
            return json_response({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
                                  "metadata": {"creationTimestamp": None}, "status": {"userInfo": info_out}}, 201)
        body = self._check_kind(res, await self._body(request))
        unknown = self._strict(request, res, body)
        obj = eventsv1.to_core(body) if _is_events_v1(res) else body
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            ns = meta.get("namespace")
            if ns and ns != info.namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
        created = await self.registry.create(
            res, info.namespace, obj, request[USER_KEY], self._dry_run(request), _manager(request)
        )
        return self._warn(json_response(_out(res, created), 201), unknown)

    async def _bind(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a Binding")
        pod_name = info.name or (body.get("metadata") or {}).get("name", "")
        target = body.get("target") or {}
        node = target.get("name")
        if not node:
            raise errors.invalid_object("Binding", "", pod_name, [errors.required("target.name")])
        pods = core("pods")
        # A uid in the Binding's metadata is a precondition, as upstream: a scheduler that decided for
        # a pod which has since been deleted and recreated under the same name must not bind the new one.
        want_uid = (body.get("metadata") or {}).get("uid")

        def mutate(pod: Obj) -> Obj:
            spec = pod.setdefault("spec", {})
            have_uid = pod["metadata"].get("uid")
            if want_uid and want_uid != have_uid:
                raise errors.conflict(
                    "pods/binding", "", pod_name,
                    f"Precondition failed: UID in precondition: {want_uid}, UID in object meta: {have_uid}",
                )
            if spec.get("nodeName"):
                raise errors.conflict(
                    "pods/binding", "", pod_name, f'pod {pod_name} is already assigned to node "{spec["nodeName"]}"'
                )
            if pod["metadata"].get("deletionTimestamp"):
                raise errors.conflict("pods/binding", "", pod_name, f"pod {pod_name} is being deleted, cannot be assigned to a host")
            spec["nodeName"] = node
            conditions = pod.setdefault("status", {}).setdefault("conditions", [])
            conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": timestamp()})
            return pod

        await self.registry.guaranteed_update(
            pods, info.namespace, pod_name, mutate, "binding", request[USER_KEY], False, _manager(request)
        )
        return json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)

    async def _update(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        if info.subresource == "scale":
            body = self._check_kind(res, await self._body(request), "Scale", "autoscaling/v1")
            return await self._set_scale(request, info, lambda scale: body)
        body = self._check_kind(res, await self._body(request))
        unknown = self._strict(request, res, body)
        obj = eventsv1.to_core(body) if _is_events_v1(res) else body
        meta = obj.get("metadata") or {}
        if meta.get("name") and meta["name"] != info.name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({info.name})"
            )
        updated = await self.registry.update(
            res, info.namespace, info.name, obj, info.subresource, request[USER_KEY], self._dry_run(request),
            _manager(request),
        )
        return self._warn(json_response(_out(res, updated)), unknown)

    async def _set_scale(self, request: web.Request, info: RequestInfo, change: Any) -> web.StreamResponse:
        def mutate(current: Obj) -> Obj:
            scale = change(_scale_of(current))
            if not isinstance(scale, dict):
                raise errors.bad_request("the body must be a Scale object")
            rv = (scale.get("metadata") or {}).get("resourceVersion")
            if rv and rv != current["metadata"].get("resourceVersion"):
                raise errors.conflict(info.resource.plural, info.resource.group, info.name, errors.MODIFIED)
            replicas = (scale.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or replicas < 0:
                raise errors.invalid_object("Scale", "autoscaling", info.name, [
                    errors.invalid("spec.replicas", replicas, "must be greater than or equal to 0")])
            current.setdefault("spec", {})["replicas"] = replicas
            return current

        updated = await self.registry.guaranteed_update(
            info.resource, info.namespace, info.name, mutate, "", request[USER_KEY], self._dry_run(request),
            _manager(request),
        )
        return json_response(_scale_of(updated))

    async def _patch(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        content_type = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        kind = _PATCH_TYPES.get(content_type)
        if kind is None:
            raise errors.unsupported_media(content_type)
        if kind == "apply":
            return await self._apply(request, info)
        patch = await self._body(request)
        if kind != "json" and not isinstance(patch, dict):
            raise errors.bad_request("a merge patch must be a JSON object")
        schema = schema_for(res.kind)

        def apply_patch(current: Obj) -> Obj:
            view = _out(res, current)
            if kind == "json":
                patched = json_patch(view, patch)
            elif kind == "merge":
                patched = merge_patch(view, patch)
            else:
                patched = strategic_merge(view, patch, schema)
            if not isinstance(patched, dict):
                raise errors.bad_request("the patch did not produce an object")
            return patched

        if info.subresource == "scale":
            return await self._set_scale(request, info, apply_patch)
        unknown: list[str] = []

        def mutate(current: Obj) -> Obj:
            patched = apply_patch(current)
            nonlocal unknown
            unknown = self._strict(request, res, patched)
            rv = (patched.get("metadata") or {}).get("resourceVersion")
            if rv and rv != current["metadata"].get("resourceVersion"):
                raise errors.conflict(res.plural, res.group, info.name, errors.MODIFIED)
            self._check_kind(res, patched)
            return eventsv1.to_core(patched) if _is_events_v1(res) else patched

        updated = await self.registry.guaranteed_update(
            res, info.namespace, info.name, mutate, info.subresource, request[USER_KEY], self._dry_run(request),
            _manager(request),
        )
        return self._warn(json_response(_out(res, updated)), unknown)

    async def _apply(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        manager = request.query.get("fieldManager", "")
        if not manager:
            raise errors.bad_request("PATCH, application/apply-patch+yaml requires a non-empty fieldManager")
        applied = self._check_kind(res, await self._body(request))
        unknown = self._strict(request, res, applied)
        meta = applied.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != info.name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({info.name})")
        meta["name"] = info.name
        dry_run = self._dry_run(request)
        force = bool_param(request.query, "force")
        if info.subresource == "":
            try:
                await self.registry.get(res, info.namespace, info.name)
            except ApiError as err:
                if err.code != 404:
                    raise
                obj = ssa.apply(None, applied, manager)
                obj = eventsv1.to_core(obj) if _is_events_v1(res) else obj
                created = await self.registry.create(res, info.namespace, obj, request[USER_KEY], dry_run)
                return self._warn(json_response(_out(res, created), 201), unknown)

        def mutate(current: Obj) -> Obj:
            result = ssa.apply(_out(res, current), applied, manager, force)
            return eventsv1.to_core(result) if _is_events_v1(res) else result

        updated = await self.registry.guaranteed_update(
            res, info.namespace, info.name, mutate, info.subresource, request[USER_KEY], dry_run
        )
        return self._warn(json_response(_out(res, updated)), unknown)

    @staticmethod
    async def _delete_options(request: web.Request) -> DeleteOptions:
        """DeleteOptions from the (optional) body, else from the query string."""
        body = None
        if request.can_read_body:
            raw = await request.read()
            if raw.strip():
                body = decode(raw, request.content_type or "application/json")
        return DeleteOptions.parse(body if isinstance(body, dict) else None, dict(request.query))

    async def _delete(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        options = await self._delete_options(request)
        obj, gone = await self.registry.delete(res, info.namespace, info.name, options)
        if gone and res.kind not in ("Pod",):
            details: Obj = {"name": info.name, "kind": res.plural, "uid": obj["metadata"].get("uid")}
            if res.group:
                details["group"] = res.group
            return json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
        return json_response(_out(res, obj))

    async def _deletecollection(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        predicate, _ = self._predicate(request, res)
        options = await self._delete_options(request)
        await self.cache.wait_fresh()
        items = self.cache.list(res.bucket, res.prefix(info.namespace), predicate)
        deleted = await self.registry.delete_collection(res, info.namespace, items, options)
        return json_response({"kind": res.list_kind, "apiVersion": res.api_version,
                              "metadata": {"resourceVersion": str(self.registry.store.revision)},
                              "items": [_out(res, o) for o in deleted]})


def _manager(request: web.Request) -> str:
    """The fieldManager parameter, else the User-Agent up to its first "/" (upstream's default)."""
    manager = request.query.get("fieldManager") or request.headers.get("User-Agent", "unknown").split("/", 1)[0]
    return manager[:128] or "unknown"


def _scale_of(obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    selector = spec.get("selector") or {}
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta},
        "spec": {"replicas": spec.get("replicas", 0)},
        "status": {"replicas": (obj.get("status") or {}).get("replicas", 0), "selector": ",".join(parts)},
    }


__all__ = ["RestHandler", "json_response"]
