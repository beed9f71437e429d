"""The generic store (upstream's registry/generic/registry/store.go): create, update, patch-by-function
and delete of any kind, on top of the storage.

It owns what every kind shares: system metadata, generateName, resourceVersion preconditions and
conflicts, managedFields, finalizers, marking for deletion; everything kind-specific it asks the kind's
strategy (kinds/base.py: defaulting, prepare-for-create/update, validation, generation, deletion grace,
allocations) and the admission chain. It names no kind. Reads come from the watch cache (after it has
caught up with the store, so they are consistent); writes go to the store with the expected revision,
so a lost race is a 409 or an automatic retry, never a silent overwrite.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from controlplane.apiserver import deletion, errors, ssa
from controlplane.apiserver.admission import AdmissionChain, AdmissionRequest
from controlplane.apiserver.authn import UserInfo
from controlplane.apiserver.deletion import Step
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.meta import generate_name, metadata, new_uid, timestamp
from controlplane.apiserver.options import DeleteOptions
from controlplane.apiserver.serviceranges import ServiceRanges
from controlplane.apiserver.typed import fill_required
from controlplane.storage import ConflictError, KeyExistsError, NotFoundError
from controlplane.storage.cache import WRITE_PATIENCE, CachedObject, TooLargeResourceVersionError, WatchCache
from controlplane.storage.encoding import Unversioned, unversioned

if TYPE_CHECKING:
    from controlplane.apiserver.kindtable import KindTable

Obj = dict[str, Any]

_SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")
_RETRIES = 8
# Subresources whose updates are defaulted like the main resource (the others change one field).
_DEFAULTED = ("", "status")


def _stored(obj: Obj) -> Unversioned:
    """The object's stored form (no resourceVersion); its resourceVersion field, if any, moves to the
    end of metadata, where the new one is then set (and where the watch cache's copy has it)."""
    meta = obj.get("metadata") or {}
    rv = meta.pop("resourceVersion", None)
    try:
        return unversioned(obj)
    finally:
        if rv is not None:
            meta["resourceVersion"] = rv


def _never(key: str) -> bool:
    return False


def _same_object(a: Obj, b: Obj) -> bool:
    def norm(o: Obj) -> Obj:
        o = dict(o)
        o["metadata"] = {k: v for k, v in (o.get("metadata") or {}).items() if k != "resourceVersion"}
        return o

    return norm(a) == norm(b)


def _reset(res: Kind, subresource: str) -> frozenset[str]:
    return ssa.reset_fields(res.subresource("status") is not None, subresource)


class Registry:
    def __init__(self, cache: WatchCache, admission: AdmissionChain, kinds: KindTable) -> None:
        self.cache = cache
        self.store = cache.store
        self.admission = admission
        # The kinds this server serves: the plugins, controllers and handlers reaching the registry read
        # them here (custom resources come and go in it).
        self.kinds = kinds
        # The server's authorizers and the RBAC index (authmodes.Authorization): RBAC's escalation checks ask them.
        self.authorization: Any = None
        # --service-cluster-ip-range and --service-node-port-range: what the Service allocator hands out.
        self.service_ranges = ServiceRanges()

    # --- reads ---------------------------------------------------------------------------------------

    async def get(self, res: Kind, namespace: str, name: str, consistent: bool = True) -> CachedObject:
        """The object as of now, also when it was written through another API server a moment ago: read
        from the store, as upstream's GET without a resourceVersion (`cache.read_through`).
        `consistent=False` is for read-modify-write loops: they start from what this server has seen of
        the key (its own last write of it at least), a stale copy costs a conflict and a retry from the
        newer revision the conflict taught the store; only a miss is read from the store."""
        key = res.key(namespace, name)
        cached = await self.cache.get_for_update(key) if not consistent else None
        if cached is None:
            cached = await self.cache.read_through(key)
        if cached is None:
            raise errors.not_found(res.plural, res.group, name)
        return cached

    # --- the strategy and admission, shared by create and update --------------------------------------

    async def _admit(
        self,
        operation: str,
        res: Kind,
        subresource: str,
        namespace: str,
        obj: Obj,
        old: Obj | None,
        user: UserInfo | None,
        validate: bool = True,
        dry_run: bool = False,
        generated_name: bool = False,
    ) -> None:
        name = obj["metadata"].get("name", "")
        request = AdmissionRequest(
            operation, res, subresource, namespace, name, obj, old, user, self, dry_run, generated_name
        )
        await self.admission.admit(request)
        problems = res.validate_object(obj, old) if validate else []
        if old is not None:
            problems += res.validate_update(obj, old, subresource)
        if problems:
            raise errors.invalid_object(res.kind, res.group, name, problems)
        await self.admission.validate(request)

    # --- create --------------------------------------------------------------------------------------

    async def create(
        self,
        res: Kind,
        namespace: str,
        obj: Obj,
        user: UserInfo | None = None,
        dry_run: bool = False,
        manager: str | None = None,
        validate: bool = True,
    ) -> Obj:
        """`obj` in its stored form. `manager`: the field manager recorded in managedFields (None: the
        caller already did). `validate=False` only for what the server writes about itself (bootstrap.py)."""
        meta = metadata(obj)
        if res.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        generate = not meta.get("name") and meta.get("generateName")
        # Admission reads what this server wrote before (a namespace, a quota): wait a moment for the
        # cache to hold it, no longer than a read-modify-write waits for it (WRITE_PATIENCE): on a loaded
        # server the feed lags seconds, and waiting for it was most of a create's latency (every POST was
        # the slowest group of the API SLI at 1 000 and 2 000 nodes). Past it admission reads the cache as
        # it is, as upstream's informer-fed admission always does (upstream does not wait at all), and
        # NamespaceLifecycle reads the store for a namespace the cache does not hold, as upstream's does.
        with contextlib.suppress(TooLargeResourceVersionError):
            await self.cache.wait_fresh(patience=WRITE_PATIENCE)
        for attempt in range(_RETRIES):
            if generate:
                meta["name"] = generate_name(meta["generateName"])
            for field in ("resourceVersion", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(field, None)
            meta["uid"] = new_uid()
            meta["creationTimestamp"] = timestamp()
            if res.generation:
                meta["generation"] = 1
            else:
                meta.pop("generation", None)
            res.default(obj, True)
            res.prepare_for_create(obj)
            fill_required(obj, res.storage_schema)
            await self._admit(
                "CREATE",
                res,
                "",
                namespace,
                obj,
                None,
                user,
                validate,
                dry_run,
                generated_name=bool(generate),
            )
            finish = await res.begin_create(self, obj, dry_run)
            try:
                rev = await self._write_created(
                    res, namespace, obj, manager, dry_run, bool(generate), attempt
                )
            except BaseException:
                if finish is not None:
                    await finish(False)
                raise
            if finish is not None:
                await finish(bool(rev))
            if rev is None:
                continue
            if rev:
                meta["resourceVersion"] = str(rev)
            return obj
        raise errors.internal("could not generate a unique name")

    async def _write_created(
        self,
        res: Kind,
        namespace: str,
        obj: Obj,
        manager: str | None,
        dry_run: bool,
        generated: bool,
        attempt: int,
    ) -> int | None:
        """The create's write: its revision, 0 for a dry run, None when a generated name is taken."""
        meta = obj["metadata"]
        if manager is not None:
            meta.pop("managedFields", None)
            ssa.track_update(None, obj, manager, schema=res.apply_schema, reset=_reset(res, ""))
        if dry_run:
            # Upstream's dry-run storage reads the key instead of writing it: an object of that
            # name is the same 409 AlreadyExists a real create meets.
            if self.cache.get(res.key(namespace, meta["name"])) is None:
                return 0
            if generated and attempt < _RETRIES - 1:
                return None
            raise errors.already_exists(res.plural, res.group, meta["name"])
        try:
            stored = _stored(obj)
            with self.cache.expecting(stored):
                return await self.store.create(res.key(namespace, meta["name"]), stored.value)
        except KeyExistsError:
            if generated and attempt < _RETRIES - 1:
                return None
            raise errors.already_exists(res.plural, res.group, meta["name"]) from None

    async def ensure(self, res: Kind, namespace: str, obj: Obj) -> None:
        """Create `obj` unless an object of its name exists (objects the server keeps)."""
        if self.cache.get(res.key(namespace, obj["metadata"]["name"])) is None:
            try:
                await self.create(res, namespace, obj)
            except ApiError as err:
                if err.code != 409:
                    raise

    async def bootstrap(self) -> None:
        await self.kinds.bootstrap(self)

    # --- update --------------------------------------------------------------------------------------

    async def update(
        self,
        res: Kind,
        namespace: str,
        name: str,
        body: Obj,
        subresource: str = "",
        user: UserInfo | None = None,
        dry_run: bool = False,
        manager: str | None = None,
        validate: bool = True,
    ) -> Obj:
        """PUT semantics: the body replaces the object (or its status), guarded by its resourceVersion."""
        wanted_rv = (body.get("metadata") or {}).get("resourceVersion") or ""

        def mutate(current: Obj) -> Obj:
            if wanted_rv and wanted_rv != current["metadata"].get("resourceVersion"):
                raise errors.conflict(res.plural, res.group, name, errors.MODIFIED)
            return body

        return await self.guaranteed_update(
            res, namespace, name, mutate, subresource, user, dry_run, manager, validate, keeps_current=True
        )

    async def guaranteed_update(
        self,
        res: Kind,
        namespace: str,
        name: str,
        mutate: Callable[[Obj], Obj | Awaitable[Obj]],
        subresource: str = "",
        user: UserInfo | None = None,
        dry_run: bool = False,
        manager: str | None = None,
        validate: bool = True,
        admit: bool = True,
        keeps_current: bool = False,
    ) -> Obj:
        """Read, mutate, write with the read revision; retry from a fresh read when another write won.

        `manager` records field ownership for the change (None: the mutation did, as apply does).
        `admit=False`: a write the caller has admitted as a request of its own (a Binding's pod).
        `keeps_current`: `mutate` neither changes the object it is given nor returns any part of it (a
        PUT's body replaces it), so it is handed the copy the update compares with instead of a second
        decoding of the stored bytes."""
        key = res.key(namespace, name)
        for _ in range(_RETRIES):
            cached = await self.get(res, namespace, name, consistent=False)
            current = json.loads(cached.raw)
            desired = mutate(current if keeps_current else json.loads(cached.raw))
            if inspect.isawaitable(desired):  # a mutation that converts through a webhook
                desired = await desired
            new = self._merge_update(res, current, desired, subresource)
            if subresource in _DEFAULTED:
                res.default(new, False)
            if not subresource and res.generation and new.get("spec") != current.get("spec"):
                new["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
            fill_required(new, res.storage_schema)
            if admit:
                await self._admit(
                    "UPDATE", res, subresource, namespace, new, current, user, validate, dry_run
                )
            finish = await res.begin_update(self, new, current, dry_run) if not subresource else None
            try:
                result = await self._write_updated(
                    res, key, cached, current, new, subresource, manager, dry_run
                )
            except BaseException:
                if finish is not None:
                    await finish(False)
                raise
            if finish is not None:
                await finish(result is not None and not dry_run and result is not current)
            if result is None:
                continue
            return result
        raise errors.conflict(res.plural, res.group, name, errors.MODIFIED)

    async def _write_updated(
        self,
        res: Kind,
        key: str,
        cached: CachedObject,
        current: Obj,
        new: Obj,
        subresource: str,
        manager: str | None,
        dry_run: bool,
    ) -> Obj | None:
        """The update's write: the object as stored (`current` when nothing changed), None on a
        conflict (read again)."""
        if manager is not None:
            new["metadata"]["managedFields"] = current["metadata"].get("managedFields", [])
            ssa.track_update(
                current,
                new,
                manager,
                subresource if subresource in ("status", "scale") else "",
                res.apply_schema,
                _reset(res, subresource),
            )
            if not new["metadata"]["managedFields"]:
                new["metadata"].pop("managedFields")
        if _same_object(new, current) and not getattr(self.store, "stale", _never)(key):
            return current  # unchanged; a value under a retired encryption key is rewritten all the same
        if dry_run:
            return new
        try:
            if self._finished(res, new):
                await self.store.delete(key, cached.revision)
                new["metadata"]["resourceVersion"] = str(self.store.revision)
                await res.after_delete(self, new)
                return new
            stored = _stored(new)
            with self.cache.expecting(stored):
                rev = await self.store.update(key, stored.value, cached.revision)
        except ConflictError:
            return None
        except NotFoundError:
            raise errors.not_found(res.plural, res.group, current["metadata"]["name"]) from None
        new["metadata"]["resourceVersion"] = str(rev)
        return new

    def _merge_update(self, res: Kind, current: Obj, desired: Obj, subresource: str) -> Obj:
        """Which parts of `desired` may change `current`: the subresource's part, or all but the system
        metadata and what the kind's prepare_for_update keeps."""
        if not isinstance(desired, dict):
            raise errors.bad_request("the body must be a JSON object")
        cur_meta = current["metadata"]
        new_meta = desired.setdefault("metadata", {})
        if not isinstance(new_meta, dict):
            raise errors.bad_request("metadata must be an object")
        if new_meta.get("name", cur_meta["name"]) != cur_meta["name"]:
            raise errors.bad_request(
                f"the name of the object ({new_meta.get('name')}) does not match the name on the URL ({cur_meta['name']})"
            )
        if new_meta.get("uid") and new_meta["uid"] != cur_meta.get("uid"):
            # A uid in the body is a precondition (the kubelet's status patches carry one).
            raise errors.conflict(
                res.plural,
                res.group,
                cur_meta["name"],
                f"Precondition failed: UID in precondition: {new_meta['uid']}, UID in object meta: {cur_meta.get('uid')}",
            )
        if res.namespaced and new_meta.get("namespace", cur_meta.get("namespace")) != cur_meta.get(
            "namespace"
        ):
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        sub = res.subresource(subresource) if subresource else None
        if sub is not None and not sub.whole_object:
            return sub.merge(current, desired)
        new = dict(desired)
        new["apiVersion"] = current.get("apiVersion")
        new["kind"] = current.get("kind")
        meta = dict(new_meta)
        meta["name"] = cur_meta["name"]
        if res.namespaced:
            meta["namespace"] = cur_meta.get("namespace")
        for field in _SYSTEM_META:
            if field in cur_meta:
                meta[field] = cur_meta[field]
            else:
                meta.pop(field, None)
        meta["resourceVersion"] = cur_meta.get("resourceVersion")
        if "managedFields" not in meta and "managedFields" in cur_meta:
            meta["managedFields"] = cur_meta["managedFields"]
        new["metadata"] = meta
        if sub is not None:
            new = sub.merge(current, new)
            res.prepare_for_status_update(new, current)
            return new
        res.prepare_for_update(new, current)
        return new

    @staticmethod
    def _finished(res: Kind, obj: Obj) -> bool:
        """An object being deleted goes once nothing holds it and no grace period runs."""
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp") or res.held(obj):
            return False
        return not meta.get("deletionGracePeriodSeconds")

    # --- delete --------------------------------------------------------------------------------------

    async def delete(self, res: Kind, namespace: str, name: str, options: DeleteOptions) -> tuple[Obj, bool]:
        """Returns (object, gone now?). An object held (finalizers, the garbage collector's among them)
        or in a grace period stays, marked (deletion.py decides which)."""
        key = res.key(namespace, name)
        res.check_delete(name)
        for _ in range(_RETRIES):
            cached = await self.get(res, namespace, name, consistent=False)
            before = json.loads(cached.raw)
            obj = json.loads(cached.raw)
            res.check_delete_preconditions(obj, options)
            step = deletion.plan(res, obj, options)
            if step is Step.PENDING or options.dry_run:
                return obj, step is Step.NOW
            if step is Step.MARK and _same_object(obj, before):
                return before, False  # marked already, as this request wants it
            try:
                if step is Step.NOW:
                    await self.store.delete(key, cached.revision)
                    obj["metadata"]["resourceVersion"] = str(self.store.revision)
                    await res.after_delete(self, obj)
                    return obj, True
                stored = _stored(obj)
                with self.cache.expecting(stored):
                    rev = await self.store.update(key, stored.value, cached.revision)
            except ConflictError:
                continue
            except NotFoundError:
                raise errors.not_found(res.plural, res.group, name) from None
            obj["metadata"]["resourceVersion"] = str(rev)
            return obj, False
        raise errors.conflict(res.plural, res.group, name, errors.MODIFIED)

    async def delete_collection(
        self, res: Kind, namespace: str, items: list[CachedObject], options: DeleteOptions
    ) -> list[Obj]:
        out = []
        for cached in items:
            meta = cached.view["metadata"]
            try:
                obj, _ = await self.delete(res, meta.get("namespace", ""), meta["name"], options)
            except ApiError as err:
                if err.code == 404:
                    continue
                raise
            out.append(obj)
        return out
