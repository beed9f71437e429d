"""REST handlers: map verbs on paths to registry calls and render objects, lists, tables and watches.

They know no kind: a kind's subresources answer their own verbs (`Subresource.get/create/update/patch`:
scale, binding, log), kinds that are not stored answer their POST (`Kind.create_virtual`), kinds stored
as another convert at the edge (`Kind.to_storage/from_storage`). Every body is decoded against its
type's schema (typed.py) before anything reads it. Responses reuse the watch cache's encoded bytes
wherever the object needs no change (lists, watch events), which is most of the traffic.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from controlplane.apiserver import (
    audit,
    errors,
    fieldselect,
    listoptions,
    metrics,
    protobufhttp,
    responses,
    ssa,
    tables,
    typed,
)
from controlplane.apiserver.admission import AdmissionRequest
from controlplane.apiserver.authn import USER_KEY, Authenticator, UserInfo
from controlplane.apiserver.authz import Attributes, AuthorizerChain, exact_field, forbidden
from controlplane.apiserver.decoding import decode_json
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.fieldselect import slim_view
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.kubeletproxy import KubeletClient
from controlplane.apiserver.options import SCHEMA as DELETE_OPTIONS
from controlplane.apiserver.options import DeleteOptions
from controlplane.apiserver.patch import json_patch, merge_patch, strategic_merge
from controlplane.apiserver.registry import Registry
from controlplane.apiserver.request import MAX_BODY, RequestInfo, bool_param, decode, int_param, parse_path
from controlplane.apiserver.responses import (
    json_response,
    list_json_response,
    out_raw,
    partial,
    raw_json_response,
    raw_object_response,
    revision,
    too_large,
    wants_metadata,
    wants_table,
)
from controlplane.apiserver.satokens import TokenIssuer
from controlplane.apiserver.watch import serve_watch
from controlplane.apiserver.webhooks.context import add_warning
from controlplane.storage import CompactedError, FutureRevisionError
from controlplane.storage.cache import CachedObject, TooLargeResourceVersionError, encode

log = logging.getLogger("controlplane.apiserver")
Obj = dict[str, Any]
DUPLICATES = "duplicate_fields"  # request key: the fields a JSON body names twice (decoding.duplicate_fields)

_PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}


class RestHandler:
    def __init__(self, registry: Registry, authorizer: AuthorizerChain) -> None:
        self.registry = registry
        self.cache = registry.cache
        self.authorizer = authorizer
        self.active_watches = 0
        self.kubelet: KubeletClient | None = None  # set when the server has a client certificate for nodes
        self.authenticator: Authenticator | None = None  # bearer-token authentication, for TokenReview
        self.token_issuer: TokenIssuer | None = None  # signs serviceaccounts/<name>/token

    # --- routing -------------------------------------------------------------------------------------

    async def core(self, request: web.Request) -> web.StreamResponse:
        return await self._dispatch(request, "", "v1", request.match_info["tail"])

    async def grouped(self, request: web.Request) -> web.StreamResponse:
        m = request.match_info
        return await self._dispatch(request, m["group"], m["version"], m["tail"])

    async def _dispatch(
        self, request: web.Request, group: str, version: str, tail: str
    ) -> web.StreamResponse:
        info = parse_path(group, version, tail, self.registry.kinds)
        method = request.method
        q = request.query
        watch = info.watch_path or bool_param(q, "watch")
        if not info.name:
            verb = {"GET": "watch" if watch else "list", "POST": "create", "DELETE": "deletecollection"}.get(
                method
            )
        else:
            verb = {
                "GET": "watch" if watch else "get",
                "PUT": "update",
                "PATCH": "patch",
                "DELETE": "delete",
                "POST": "create",
            }.get(method)
        sub = info.resource.subresource(info.subresource)
        extra_methods = getattr(sub, "methods", ()) if info.name else ()
        if verb is None and method in extra_methods:
            # A Connecter's other methods, named as upstream's RequestInfo does (HEAD is get; OPTIONS
            # and the rest have the empty verb, which only a `*` rule grants).
            verb = "get" if method == "HEAD" else ""
        elif verb is None or (verb not in info.resource.verbs and not info.subresource):
            raise errors.method_not_allowed()
        if sub is not None and verb not in sub.verbs and method not in extra_methods:
            raise errors.method_not_allowed()
        if info.name and verb == "create" and not info.subresource:
            raise errors.method_not_allowed()
        user: UserInfo = request[USER_KEY]
        self._authorize(request, info, user, verb)
        res = info.resource
        metrics.mark(
            request,
            verb,
            res.group,
            res.version,
            res.plural,
            info.subresource,
            info.namespace,
            info.name,
            sub is not None and sub.connects,
        )
        if (
            info.resource.namespaced
            and not info.namespace
            and verb not in ("list", "watch", "deletecollection")
        ):
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", {})
        if sub is not None and sub.connects:
            return await sub.connect(self, request, info)  # type: ignore[attr-defined]
        if not info.subresource and "list" not in res.verbs and not _plain_accepted(request):
            # Upstream installs no TableConvertor for a kind it cannot list (the reviews): a request that
            # accepts only the Table form has no answer it can take.
            raise errors.ApiError(
                406, "NotAcceptable", f"only the following media types are accepted: {_SERVED}"
            )
        handler = getattr(self, f"_{verb}")
        return await handler(request, info)

    def _authorize(self, request: web.Request, info: RequestInfo, user: UserInfo, verb: str) -> None:
        """Upstream's WithAuthorization: a request no authorizer allows is a 403 carrying their reasons. A
        list or watch of one object (fieldSelector metadata.name=x) is judged as that object, as upstream's
        RequestInfo names it. Deletes then pass the admission plugins that judge them (NodeRestriction)."""
        res = info.resource
        selector = request.query.get("fieldSelector", "") if verb in ("list", "watch") else ""
        name = info.name or (exact_field(selector, "metadata.name") or "" if selector else "")
        attrs = Attributes(
            user,
            verb,
            res.group,
            res.version,
            res.plural,
            info.subresource,
            info.namespace,
            name,
            request.path,
            field_selector=selector,
        )
        decision = self.authorizer.authorize(attrs)
        audit.authorized(request, decision)
        if not decision.allowed:
            raise forbidden(attrs, decision.reason)
        if verb == "delete" and self.registry.admission.deleting:
            cached = self.cache.get(res.key(info.namespace, info.name)) if res.stored else None
            if cached is not None:
                old = cached.obj
                self.registry.admission.admit_delete(
                    AdmissionRequest(
                        "DELETE",
                        res,
                        info.subresource,
                        info.namespace,
                        info.name,
                        old,
                        old,
                        user,
                        self.registry,
                    )
                )

    # --- what kinds and subresources use ---------------------------------------------------------

    json = staticmethod(json_response)

    async def served(self, res: Kind, obj: Obj) -> Obj:
        """A stored object as the request's version shows it (a CRD's conversion webhook may answer)."""
        return (await res.served_forms([obj], self.cache))[0]

    @staticmethod
    def user(request: web.Request) -> UserInfo:
        return request[USER_KEY]

    @staticmethod
    def manager(request: web.Request) -> str:
        """The fieldManager parameter, else the User-Agent up to its first "/" (upstream's default)."""
        manager = (
            request.query.get("fieldManager") or request.headers.get("User-Agent", "unknown").split("/", 1)[0]
        )
        return manager[:128] or "unknown"

    @staticmethod
    def dry_run(request: web.Request) -> bool:
        values = request.query.getall("dryRun", [])
        for v in values:
            if v != "All":
                raise errors.bad_request(f'unsupported dryRun value "{v}"')
        return bool(values)

    async def body(self, request: web.Request) -> Any:
        if request.content_length is not None and request.content_length > MAX_BODY:
            raise errors.ApiError(
                413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_BODY}"
            )
        raw = await request.read()
        if (request.content_type or "application/json") == "application/json":
            obj, request[DUPLICATES] = decode_json(raw)
        else:
            obj = decode(raw, request.content_type)
        audit.request_object(request, obj)
        return obj

    @staticmethod
    def check_kind(obj: Any, kind: str, api_version: str) -> Obj:
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON or YAML object")
        if obj.get("apiVersion") and obj["apiVersion"] != api_version:
            raise errors.bad_request(
                f"the API version in the data ({obj['apiVersion']}) does not match the expected API version ({api_version})"
            )
        if obj.get("kind") and obj["kind"] != kind:
            raise errors.bad_request(
                f"the kind in the data ({obj['kind']}) does not match the expected kind ({kind})"
            )
        obj["apiVersion"] = api_version
        obj["kind"] = kind
        return obj

    @staticmethod
    def decode(
        obj: Obj, kind: str, api_version: str, schema: str, request: web.Request, patch: bool = False
    ) -> list[str]:
        """Check `obj` against its type, as upstream decodes into Go structs. fieldValidation: Strict ->
        400 naming each unknown field; Warn (default) -> their names for Warning headers; Ignore ->
        silence. Unknown fields are dropped before storing, as upstream's decoder does. A value of the
        wrong type is a 400 (`ConfigMap in version "v1" cannot be handled as a ConfigMap: ...`), or for a
        patch's result the 422 upstream answers (`patch: Invalid value: ...`)."""
        mode = request.query.get("fieldValidation", "Warn")
        version = api_version.rpartition("/")[2]
        try:
            unknown = typed.decode(obj, schema, prune=mode != "Strict")
        except typed.DecodeError as err:
            if patch:
                raise errors.invalid_object(
                    "", "", "", [errors.invalid("patch", encode(obj).decode(), str(err))]
                ) from None
            raise errors.bad_request(
                f'{kind} in version "{version}" cannot be handled as a {kind}: {err}'
            ) from None
        duplicates = [f'duplicate field "{f}"' for f in request.get(DUPLICATES) or ()]
        if mode == "Strict" and (unknown or duplicates):
            fields = ", ".join([*duplicates, *(f'unknown field "{f}"' for f in unknown)])
            raise errors.bad_request(
                f'{kind} in version "{version}" cannot be handled as a {kind}: strict decoding error: {fields}'
            )
        if mode == "Warn":
            for text in duplicates:
                add_warning(text)
        return [] if mode == "Ignore" else unknown

    async def decode_body(
        self, request: web.Request, info: RequestInfo, kind: str, api_version: str, schema: str
    ) -> tuple[Obj, list[str]]:
        """The request's body as a checked object of `kind`, and its unknown fields (for warnings)."""
        obj = self.check_kind(await self.body(request), kind, api_version)
        return obj, self.decode(obj, kind, api_version, schema, request)

    @staticmethod
    def warn(response: web.StreamResponse, unknown: list[str]) -> web.StreamResponse:
        for field in unknown:
            # Quoted as upstream's warning header quotes its text; control characters escaped too.
            text = json.dumps(field)[1:-1]
            response.headers.add("Warning", f'299 - "unknown field \\"{text}\\""')
        return response

    # --- reads ---------------------------------------------------------------------------------------

    async def _get(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        sub = res.subresource(info.subresource)
        if sub is not None and sub.handles("get"):
            return await sub.get(self, request, info)  # type: ignore[attr-defined]
        cached = await self._read(request, res, info.namespace, info.name)
        if wants_table(request):
            return json_response(
                tables.table(
                    res,
                    await res.table_forms([cached.obj], self.cache),
                    request.query.get("includeObject", "Metadata"),
                    {"resourceVersion": str(cached.revision)},
                )
            )
        if wants_metadata(request):
            return json_response(partial(cached.obj))
        if res.converts:
            return json_response(await self.served(res, cached.obj))
        return raw_json_response(cached.raw)

    async def _read(self, request: web.Request, res: Kind, namespace: str, name: str) -> CachedObject:
        """A GET's object by its resourceVersion parameter, as upstream: "" the newest (consistent across
        API servers), "0" whatever this server's cache holds (it answers while etcd is away), N at least
        as new as N."""
        rv = request.query.get("resourceVersion", "")
        if rv == "":
            return await self.registry.get(res, namespace, name)
        if rv != "0":
            try:
                await self.cache.wait_for(revision(rv))
            except TooLargeResourceVersionError as err:
                raise too_large(err) from None
        cached = self.cache.get(res.key(namespace, name))
        if cached is None:
            raise errors.not_found(res.plural, res.group, name)
        return cached

    @staticmethod
    def predicate(request: web.Request, res: Kind) -> tuple[Any, str | None]:
        q = request.query
        return fieldselect.predicate(res, q.get("labelSelector", ""), q.get("fieldSelector", ""))

    async def _list(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        q = request.query
        listoptions.check(q, watch=False)
        predicate, _ = self.predicate(request, res)
        rv = q.get("resourceVersion", "")
        match = q.get("resourceVersionMatch", "")
        limit = int_param(q, "limit")
        token = q.get("continue", "")
        prefix = res.prefix(info.namespace)
        next_token, remaining = "", None
        if token or (limit and rv == "") or match == "Exact":
            items, list_rv, next_token, remaining = await self._list_from_store(
                res, prefix, predicate, limit, token, rv, match
            )
        else:
            try:
                if rv not in ("", "0"):
                    await self.cache.wait_for(revision(rv))
                elif rv == "":
                    await self.cache.wait_consistent()
            except TooLargeResourceVersionError as err:
                raise too_large(err) from None
            items = self.cache.list(res.bucket, prefix, predicate)
            list_rv = self.cache.revision
        list_meta: Obj = {"resourceVersion": str(list_rv)}
        if next_token:
            list_meta["continue"] = next_token
        if remaining is not None:
            list_meta["remainingItemCount"] = remaining
        if wants_table(request):
            # Cells come from the stored (core) form, which the column functions read.
            objs = await res.table_forms([c.obj for c in items], self.cache)
            return json_response(tables.table(res, objs, q.get("includeObject", "Metadata"), list_meta))
        if wants_metadata(request):
            return json_response(
                {
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": list_meta,
                    "items": [partial(c.obj) for c in items],
                }
            )
        head = encode({"kind": res.list_kind, "apiVersion": res.api_version, "metadata": list_meta})
        if res.converts:
            raws = [encode(o) for o in await res.served_forms([c.obj for c in items], self.cache, True)]
        else:
            raws = [out_raw(res, c) for c in items]
        if protobufhttp.wants_protobuf(request, res.api_version, res.kind):
            return protobufhttp.list_response(res.api_version, res.kind, res.list_kind, list_meta, raws)
        return list_json_response(head, raws)

    async def _list_from_store(
        self, res: Kind, prefix: str, predicate: Any, limit: int, token: str, rv: str, match: str
    ) -> tuple[list[CachedObject], int, str, int | None]:
        """A page from the store: its items, revision, continue token and remainingItemCount (only when
        no selector filters, as upstream, which cannot count what a selector would keep)."""
        revision = 0
        start_after = ""
        if token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
                revision = int(decoded["rv"])
                start_after = prefix + decoded["start"]
            except (ValueError, KeyError, TypeError):
                raise errors.bad_request(
                    "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
                ) from None
            if revision == -1:
                revision = 0  # the inconsistent token of an expired list: go on at the newest revision
        elif match == "Exact" and rv:
            revision = responses.revision(rv)
        elif rv == "":
            # A consistent list (a first page with a limit): at a revision covering every write made
            # anywhere before the request, which the cache has reached, so a watch from it finds it there.
            try:
                await self.cache.wait_consistent()
            except TooLargeResourceVersionError as err:
                raise too_large(err) from None
            revision = self.cache.revision
        if revision:
            # A revision this server has not seen yet (a client's token from the future, or from a write
            # through another server still on its way here): wait a little for it, then answer as upstream
            # does, 504 with ResourceVersionTooLarge, rather than list at a revision that holds nothing yet.
            try:
                await self.cache.wait_for(revision)
            except TooLargeResourceVersionError as err:
                raise too_large(err) from None
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
        except FutureRevisionError as err:
            raise too_large(TooLargeResourceVersionError(err.requested, err.current)) from None
        except CompactedError:
            if token:
                # upstream's etcd3 store: a 410 whose metadata.continue goes on from the same key at the
                # newest revision (rv -1), for a client that accepts an inconsistent list
                again = {"v": "meta.k8s.io/v1", "rv": -1, "start": start_after[len(prefix) :]}
                raise errors.ApiError(
                    410,
                    "Expired",
                    INCONSISTENT_CONTINUE,
                    metadata={"continue": _encode_token(again)},
                ) from None
            raise errors.gone(
                f"too old resource version: {revision} ({self.registry.store.compacted_revision + 1})"
            ) from None
        next_token, remaining = "", None
        if limit and more:
            payload = {"v": "meta.k8s.io/v1", "rv": revision, "start": start_after[len(prefix) :]}
            next_token = _encode_token(payload)
            if predicate is None:
                remaining = await self.registry.store.count(prefix, revision, start_after)
        return out, revision, next_token, remaining

    # --- watch ---------------------------------------------------------------------------------------

    async def _watch(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        return await serve_watch(self, request, info)

    # --- writes ---------------------------------------------------------------------------------------

    async def _create(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        if info.subresource:
            sub = res.subresource(info.subresource)
            if sub is None or not sub.handles("create"):
                raise errors.method_not_allowed()
            return await sub.create(self, request, info)  # type: ignore[attr-defined]
        if not res.stored:
            return await res.create_virtual(self, request, info)
        body, unknown = await self.decode_body(request, info, res.kind, res.api_version, res.schema)
        obj = await res.storage_form(body, self.cache)
        meta = obj.setdefault("metadata", {})
        if res.namespaced and meta.get("namespace") and meta["namespace"] != info.namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        dry_run = self.dry_run(request)
        created = await self.registry.create(
            res, info.namespace, obj, self.user(request), dry_run, self.manager(request)
        )
        served = await self.served(res, created)
        return self.warn(self._written(res, info.namespace, served, dry_run, 201), unknown)

    async def _update(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        sub = res.subresource(info.subresource)
        if sub is not None and sub.handles("update"):
            return await sub.update(self, request, info)  # type: ignore[attr-defined]
        body, unknown = await self.decode_body(request, info, res.kind, res.api_version, res.schema)
        obj = await res.storage_form(body, self.cache)
        meta = obj.get("metadata") or {}
        if meta.get("name") and meta["name"] != info.name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({info.name})"
            )
        dry_run = self.dry_run(request)
        updated = await self.registry.update(
            res,
            info.namespace,
            info.name,
            obj,
            info.subresource,
            self.user(request),
            dry_run,
            self.manager(request),
        )
        served = await self.served(res, updated)
        return self.warn(self._written(res, info.namespace, served, dry_run), unknown)

    def _written(
        self, res: Kind, namespace: str, served: Obj, dry_run: bool, status: int = 200
    ) -> web.Response:
        """The answer to a create, update or patch: the watch cache's bytes of the version just written
        when the object is served as stored (they are its encoding: the registry puts the resourceVersion
        where the cache's copy has it; on etcd, before its event is back, the same splice of the write's
        bytes), else the object encoded. A dry run wrote nothing: the cache's copy of that version is the
        object before it."""
        meta = served.get("metadata") or {}
        rv = meta.get("resourceVersion")
        if not res.converts and rv and rv.isdigit() and not dry_run:
            raw = self.cache.written_raw(res.key(namespace, meta.get("name", "")), served, int(rv))
            if raw is not None:
                return raw_object_response(served, raw, status)
        return json_response(served, status)

    async def _patch(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        content_type = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        kind = _PATCH_TYPES.get(content_type)
        if kind is None:
            raise errors.unsupported_media(content_type, res.strategic_merge)
        if kind == "strategic" and not res.strategic_merge:
            raise errors.unsupported_media(content_type, False)
        if kind == "apply":
            return await self._apply(request, info)
        patch = await self.body(request)
        if kind != "json" and not isinstance(patch, dict):
            raise errors.bad_request("a merge patch must be a JSON object")
        apply_patch = _patcher(kind, patch, res)
        sub = res.subresource(info.subresource)
        if sub is not None and sub.handles("patch"):
            return await sub.patch(self, request, info, apply_patch)  # type: ignore[attr-defined]
        unknown: list[str] = []

        async def mutate(current: Obj) -> Obj:
            nonlocal unknown
            patched = self.check_kind(apply_patch(await self.served(res, current)), res.kind, res.api_version)
            unknown = self.decode(patched, res.kind, res.api_version, res.schema, request, patch=True)
            rv = (patched.get("metadata") or {}).get("resourceVersion")
            if rv and rv != current["metadata"].get("resourceVersion"):
                raise errors.conflict(res.plural, res.group, info.name, errors.MODIFIED)
            return await res.storage_form(patched, self.cache)

        updated = await self.registry.guaranteed_update(
            res,
            info.namespace,
            info.name,
            mutate,
            info.subresource,
            self.user(request),
            self.dry_run(request),
            self.manager(request),
        )
        served = await self.served(res, updated)
        return self.warn(self._written(res, info.namespace, served, self.dry_run(request)), unknown)

    async def _apply(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        manager = request.query.get("fieldManager", "")
        if not manager:
            raise errors.bad_request("PATCH, application/apply-patch+yaml requires a non-empty fieldManager")
        _undeclared_fields(
            self.check_kind(await self.body(request), res.kind, res.api_version),
            res,
            info.namespace,
            info.name,
        )
        applied, unknown = await self.decode_body(request, info, res.kind, res.api_version, res.schema)
        meta = applied.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != info.name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({info.name})"
            )
        meta["name"] = info.name
        dry_run = self.dry_run(request)
        force = bool_param(request.query, "force")
        reset = ssa.reset_fields(res.subresource("status") is not None, info.subresource)
        if info.subresource == "":
            try:
                # A copy this server holds is enough to choose update (a stale one costs a conflict and a
                # retry); only a miss asks etcd's current revision.
                await self.registry.get(res, info.namespace, info.name, consistent=False)
            except ApiError as err:
                if err.code != 404:
                    raise
                obj = await res.storage_form(
                    ssa.apply(None, applied, manager, schema=res.apply_schema, reset=reset), self.cache
                )
                created = await self.registry.create(res, info.namespace, obj, self.user(request), dry_run)
                return self.warn(json_response(await self.served(res, created), 201), unknown)

        async def mutate(current: Obj) -> Obj:
            view = await self.served(res, current)
            return await res.storage_form(
                ssa.apply(view, applied, manager, force, res.apply_schema, reset), self.cache
            )

        updated = await self.registry.guaranteed_update(
            res, info.namespace, info.name, mutate, info.subresource, self.user(request), dry_run
        )
        return self.warn(json_response(await self.served(res, updated)), unknown)

    async def _delete_options(self, request: web.Request) -> DeleteOptions:
        """DeleteOptions from the body if there is one, else from the query string; checked (422)."""
        body = None
        if request.can_read_body:
            raw = await request.read()
            if raw.strip():
                body = decode(raw, request.content_type or "application/json")
                if not isinstance(body, dict):
                    raise errors.bad_request("the body of a DELETE must be a DeleteOptions object")
                audit.request_object(request, body)
                self.decode(body, "DeleteOptions", "v1", DELETE_OPTIONS, request)
        return DeleteOptions.parse(body, request.query).check()

    async def _review_delete(self, request: web.Request, info: RequestInfo) -> None:
        """The admission plugins that review deletes by waiting on something (webhooks, policies)."""
        res = info.resource
        if not res.stored or not self.registry.admission.reviews_deletes(self.cache):
            return
        cached = self.cache.get(res.key(info.namespace, info.name))
        if cached is not None:
            old = cached.obj
            await self.registry.admission.review_delete(
                AdmissionRequest(
                    "DELETE",
                    res,
                    info.subresource,
                    info.namespace,
                    info.name,
                    old,
                    old,
                    self.user(request),
                    self.registry,
                )
            )

    async def _delete(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        """Upstream's DeleteResource: 200 with a Status (or, for kinds that return it, the object) once
        the object is gone; 200 with the object while finalizers or a grace period hold it; 202 instead
        when the request asked `orphanDependents: false` and the object stays."""
        res = info.resource
        options = await self._delete_options(request)
        await self._review_delete(request, info)
        obj, gone = await self.registry.delete(res, info.namespace, info.name, options)
        status = 202 if not gone and options.orphan_dependents is False else 200
        if gone and not res.return_deleted_object:
            details: Obj = {"name": info.name, "kind": res.plural, "uid": obj["metadata"].get("uid")}
            if res.group:
                details["group"] = res.group
            return json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                },
                status,
            )
        return json_response(await self.served(res, obj), status)

    async def _deletecollection(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        res = info.resource
        predicate, _ = self.predicate(request, res)
        options = await self._delete_options(request)
        try:
            await self.cache.wait_consistent()
        except TooLargeResourceVersionError as err:
            raise too_large(err) from None
        items = self.cache.list(res.bucket, res.prefix(info.namespace), predicate)
        if res.stored and self.registry.admission.reviews_deletes(self.cache):
            for cached in items:  # each object's DELETE is reviewed, as upstream's deleteValidation
                old, meta = cached.obj, cached.view["metadata"]
                await self.registry.admission.review_delete(
                    AdmissionRequest(
                        "DELETE",
                        res,
                        "",
                        meta.get("namespace", ""),
                        meta["name"],
                        old,
                        old,
                        self.user(request),
                        self.registry,
                    )
                )
        deleted = await self.registry.delete_collection(res, info.namespace, items, options)
        return json_response(
            {
                "kind": res.list_kind,
                "apiVersion": res.api_version,
                "metadata": {"resourceVersion": str(self.registry.store.revision)},
                "items": await res.served_forms(deleted, self.cache, True),
            }
        )


def _undeclared_fields(applied: Obj, res: Kind, namespace: str, name: str) -> None:
    """An apply configuration naming a field its type does not declare fails before anything else, as
    upstream's field manager fails to type it (whatever fieldValidation says): a 500 without a reason."""
    try:
        undeclared = typed.decode(copy.deepcopy(applied), res.schema, prune=False)
    except typed.DecodeError:
        return  # a wrong type: decode_body answers it
    if not undeclared:
        return
    problems = [f".{path}: field not declared in schema" for path in undeclared]
    detail = problems[0] if len(problems) == 1 else "\n".join(["errors:", *(f"  {p}" for p in problems)])
    gvk = f"{res.api_version}, Kind={res.kind}" if res.group else f"/{res.api_version}, Kind={res.kind}"
    raise errors.ApiError(
        500, "", f"failed to create typed patch object ({namespace}/{name}; {gvk}): {detail}"
    )


_SERVED = "application/json, application/yaml, application/vnd.kubernetes.protobuf"


def _plain_accepted(request: web.Request) -> bool:
    """Whether the Accept header takes an object as it is (a media range without `as=`), as upstream's
    negotiation asks before it would transform the answer into a Table or PartialObjectMetadata."""
    accept = request.headers.get("Accept", "")
    if not accept.strip():
        return True
    for media_range in accept.split(","):
        mime, *params = (p.strip() for p in media_range.split(";"))
        if any(p.replace(" ", "").startswith("as=") for p in params):
            continue
        if mime in ("*/*", "application/*") or mime in _SERVED.split(", "):
            return True
    return False


INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list."
)


def _encode_token(payload: Obj) -> str:
    """A continue token as upstream encodes it: unpadded URL-safe base64 of its JSON."""
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


def _patcher(kind: str, patch: Any, res: Kind) -> Callable[[Obj], Obj]:
    """The function that applies a JSON, merge or strategic merge patch to an object's view."""

    def apply_patch(view: Obj) -> Obj:
        if kind == "json":
            patched = json_patch(view, patch)
        elif kind == "merge":
            patched = merge_patch(view, patch)
        else:
            patched = strategic_merge(view, patch, res.smp)
        if not isinstance(patched, dict):
            raise errors.bad_request("the patch did not produce an object")
        return patched

    return apply_patch


__all__ = ["RestHandler", "json_response"]
