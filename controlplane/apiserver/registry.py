"""Object lifecycle rules on top of the store: create, update, patch-by-function, delete.

This is where upstream's generic registry and per-type strategies live for us: system metadata,
generation, status vs main resource, graceful pod deletion, finalizers, namespaces. Reads come from the
watch cache (after it has caught up with the store, so they are consistent); writes go to the store with
the expected revision, so a lost race is a 409 or an automatic retry, never a silent overwrite.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controlplane.apiserver import errors, ssa
from controlplane.apiserver.admission import AdmissionChain, AdmissionRequest
from controlplane.apiserver.authn import UserInfo
from controlplane.apiserver.defaults import apply_defaults
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.meta import metadata, now, random_suffix, timestamp
from controlplane.apiserver.resources import RESOURCES, Resource, core
from controlplane.storage import ConflictError, KeyExistsError, NotFoundError
from controlplane.storage.cache import CachedObject, WatchCache, encode

Obj = dict[str, Any]

# Kinds whose metadata.generation tracks spec changes.
GENERATION_KINDS = {"Deployment", "ReplicaSet"}
# Kinds whose status is reset on create (the status subresource owns it).
RESET_STATUS_ON_CREATE = {"Deployment", "ReplicaSet", "Service"}
IMMORTAL_NAMESPACES = {"default", "kube-system", "kube-public"}
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")
_RETRIES = 8


@dataclass
class DeleteOptions:
    grace_period: int | None = None
    uid: str | None = None
    resource_version: str | None = None
    propagation: str | None = None
    dry_run: bool = False

    @classmethod
    def parse(cls, body: Obj | None, query: dict[str, str]) -> DeleteOptions:
        body = body or {}
        grace = body.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        pre = body.get("preconditions") or {}
        dry = body.get("dryRun") or ([query["dryRun"]] if "dryRun" in query else [])
        return cls(
            grace_period=int(grace) if grace is not None else None,
            uid=pre.get("uid"),
            resource_version=pre.get("resourceVersion"),
            propagation=body.get("propagationPolicy", query.get("propagationPolicy")),
            dry_run="All" in dry,
        )


def _strip_rv(obj: Obj) -> bytes:
    meta = obj.get("metadata") or {}
    rv = meta.pop("resourceVersion", None)
    try:
        return encode(obj)
    finally:
        if rv is not None:
            meta["resourceVersion"] = rv


def _same_object(a: Obj, b: Obj) -> bool:
    def norm(o: Obj) -> Obj:
        o = dict(o)
        o["metadata"] = {k: v for k, v in (o.get("metadata") or {}).items() if k != "resourceVersion"}
        return o

    return norm(a) == norm(b)


class Registry:
    def __init__(self, cache: WatchCache, admission: AdmissionChain) -> None:
        self.cache = cache
        self.store = cache.store
        self.admission = admission
        self.on_namespace_terminating: Callable[[str], None] | None = None

    # --- reads ---------------------------------------------------------------------------------------

    async def get(self, res: Resource, namespace: str, name: str) -> CachedObject:
        await self.cache.wait_fresh()
        cached = self.cache.get(res.key(namespace, name))
        if cached is None:
            raise errors.not_found(res.plural, res.group, name)
        return cached

    def _mutable(self, cached: CachedObject) -> Obj:
        return json.loads(cached.raw)

    # --- create --------------------------------------------------------------------------------------

    def _check_namespace(self, res: Resource, namespace: str) -> None:
        if not res.namespaced:
            return
        ns = self.cache.get(core("namespaces").key("", namespace))
        if ns is None:
            raise errors.not_found("namespaces", "", namespace)
        if ns.view.get("metadata", {}).get("deletionTimestamp"):
            raise errors.forbidden_request(
                f'{res.plural} "{{name}}" is forbidden: unable to create new content in namespace {namespace} '
                "because it is being terminated",
                res.plural,
                res.group,
            )

    async def create(
        self,
        res: Resource,
        namespace: str,
        obj: Obj,
        user: UserInfo | None = None,
        dry_run: bool = False,
        manager: str | None = None,
    ) -> Obj:
        """`manager`: the field manager recorded in managedFields (None: the caller already did)."""
        meta = metadata(obj)
        if res.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        generate = not meta.get("name") and meta.get("generateName")
        await self.cache.wait_fresh()
        try:
            self._check_namespace(res, namespace)
        except ApiError as err:
            if err.code == 403:
                err.message = err.message.replace("{name}", meta.get("name") or meta.get("generateName") or "")
            raise
        for attempt in range(_RETRIES):
            if generate:
                meta["name"] = f"{meta['generateName']}{random_suffix()}"
            for field in ("resourceVersion", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(field, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = timestamp()
            if res.kind in GENERATION_KINDS:
                meta["generation"] = 1
            else:
                meta.pop("generation", None)
            if res.kind in RESET_STATUS_ON_CREATE:
                obj.pop("status", None)
            if res.kind == "Pod":
                obj["status"] = {}
            self.admission.run(
                AdmissionRequest("CREATE", res, "", namespace, meta.get("name", ""), obj, None, user)
            )
            if res.kind == "Service":
                self._allocate_cluster_ip(obj)
            if manager is not None:
                obj.setdefault("metadata", {}).pop("managedFields", None)
                ssa.track_update(None, obj, manager)
            if dry_run:
                return obj
            try:
                rev = await self.store.create(res.key(namespace, meta["name"]), _strip_rv(obj))
            except KeyExistsError:
                if generate and attempt < _RETRIES - 1:
                    continue
                raise errors.already_exists(res.plural, res.group, meta["name"]) from None
            meta["resourceVersion"] = str(rev)
            return obj
        raise errors.internal("could not generate a unique name")

    def _allocate_cluster_ip(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if spec.get("type") in ("NodePort", "LoadBalancer"):
            spec.setdefault("externalTrafficPolicy", "Cluster")
            used_ports = {
                p.get("nodePort")
                for c in self.cache.list(core("services").bucket, "/services/")
                for p in (c.obj.get("spec") or {}).get("ports") or []
            }
            free = (n for n in range(30000, 32768) if n not in used_ports)
            for port in spec.get("ports") or []:
                if isinstance(port, dict) and not port.get("nodePort"):
                    port["nodePort"] = next(free, None)
        if spec.get("type") == "ExternalName" or spec.get("clusterIP") == "None":
            if spec.get("clusterIP") == "None":
                spec["clusterIPs"] = ["None"]
            return
        if spec.get("clusterIP"):
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
            return
        used = {
            (c.obj.get("spec") or {}).get("clusterIP")
            for c in self.cache.list(core("services").bucket, "/services/")
        }
        # 10.96.0.1 is the kubernetes service's address upstream; hand out the rest of 10.96.0.0/16.
        for n in range(10, 65534):
            ip = f"10.96.{n // 256}.{n % 256}"
            if ip not in used:
                spec["clusterIP"] = ip
                spec["clusterIPs"] = [ip]
                return
        raise errors.internal("service IP range exhausted")

    # --- update --------------------------------------------------------------------------------------

    async def update(
        self,
        res: Resource,
        namespace: str,
        name: str,
        body: Obj,
        subresource: str = "",
        user: UserInfo | None = None,
        dry_run: bool = False,
        manager: str | None = None,
    ) -> Obj:
        """PUT semantics: the body replaces the object (or its status), guarded by its resourceVersion."""
        wanted_rv = (body.get("metadata") or {}).get("resourceVersion") or ""

        def mutate(current: Obj) -> Obj:
            if wanted_rv and wanted_rv != current["metadata"].get("resourceVersion"):
                raise errors.conflict(res.plural, res.group, name, errors.MODIFIED)
            return body

        return await self.guaranteed_update(res, namespace, name, mutate, subresource, user, dry_run, manager)

    async def guaranteed_update(
        self,
        res: Resource,
        namespace: str,
        name: str,
        mutate: Callable[[Obj], Obj],
        subresource: str = "",
        user: UserInfo | None = None,
        dry_run: bool = False,
        manager: str | None = None,
    ) -> Obj:
        """Read, mutate, write with the read revision; retry from a fresh read when another write won.

        `manager` records field ownership for the change (None: the mutation did, as apply does)."""
        key = res.key(namespace, name)
        for _ in range(_RETRIES):
            cached = await self.get(res, namespace, name)
            current = self._mutable(cached)
            desired = mutate(json.loads(cached.raw))
            new = self._merge_update(res, current, desired, subresource)
            if new is None:
                return current
            self.admission.run(AdmissionRequest("UPDATE", res, subresource, namespace, name, new, current, user))
            if manager is not None:
                new.setdefault("metadata", {})["managedFields"] = (current.get("metadata") or {}).get("managedFields", [])
                ssa.track_update(current, new, manager, subresource if subresource in ("status", "scale") else "")
                if not new["metadata"]["managedFields"]:
                    new["metadata"].pop("managedFields")
            if _same_object(new, current):
                return current
            if dry_run:
                return new
            try:
                if self._finished(new):
                    await self.store.delete(key, cached.revision)
                    new["metadata"]["resourceVersion"] = str(self.store.revision)
                    return new
                rev = await self.store.update(key, _strip_rv(new), cached.revision)
            except ConflictError:
                continue
            except NotFoundError:
                raise errors.not_found(res.plural, res.group, name) from None
            new["metadata"]["resourceVersion"] = str(rev)
            return new
        raise errors.conflict(res.plural, res.group, name, errors.MODIFIED)

    def _merge_update(self, res: Resource, current: Obj, desired: Obj, subresource: str) -> Obj | None:
        """Apply the rules for which parts of `desired` may change `current`."""
        if not isinstance(desired, dict):
            raise errors.bad_request("the body must be a JSON object")
        cur_meta = current["metadata"]
        new_meta = desired.setdefault("metadata", {})
        if not isinstance(new_meta, dict):
            raise errors.bad_request("metadata must be an object")
        if new_meta.get("name", cur_meta["name"]) != cur_meta["name"]:
            raise errors.bad_request(
                f"the name of the object ({new_meta.get('name')}) does not match the name on the URL "
                f"({cur_meta['name']})"
            )
        if new_meta.get("uid") and new_meta["uid"] != cur_meta.get("uid"):
            # A uid in the body is a precondition (the kubelet's status patches carry one).
            raise errors.conflict(
                res.plural, res.group, cur_meta["name"],
                f"Precondition failed: UID in precondition: {new_meta['uid']}, UID in object meta: {cur_meta.get('uid')}",
            )
        if res.namespaced and new_meta.get("namespace", cur_meta.get("namespace")) != cur_meta.get("namespace"):
            raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
        if subresource == "binding":
            return desired
        if subresource == "status":
            new = dict(current)
            new["status"] = desired.get("status", {})
            return new
        if subresource == "finalize":
            new = dict(current)
            spec = dict(new.get("spec") or {})
            spec["finalizers"] = (desired.get("spec") or {}).get("finalizers") or []
            new["spec"] = spec
            return new
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
        if res.has_status:
            if "status" in current:
                new["status"] = current["status"]
            else:
                new.pop("status", None)
        if res.kind == "Namespace":
            new["spec"] = current.get("spec", {})
        if res.kind == "Service":
            _keep_allocations(current, new)
        if res.kind in GENERATION_KINDS and new.get("spec") != current.get("spec"):
            # Defaulting is idempotent: run it first so a spec that only differs by defaults is no change.
            apply_defaults(res.kind, new, False)
            if new.get("spec") != current.get("spec"):
                meta["generation"] = int(cur_meta.get("generation", 1)) + 1
        return new

    @staticmethod
    def _finished(obj: Obj) -> bool:
        """An object being deleted goes once its last finalizer is gone and no grace period runs."""
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp") or meta.get("finalizers"):
            return False
        if obj.get("kind") == "Namespace":
            return not (obj.get("spec") or {}).get("finalizers")
        return not meta.get("deletionGracePeriodSeconds")

    # --- delete --------------------------------------------------------------------------------------

    async def delete(
        self, res: Resource, namespace: str, name: str, options: DeleteOptions
    ) -> tuple[Obj, bool]:
        """Returns (object, gone now?). Objects with finalizers or a grace period stay, marked."""
        key = res.key(namespace, name)
        if res.kind == "Namespace" and name in IMMORTAL_NAMESPACES:
            raise errors.forbidden_request(
                f'namespaces "{name}" is forbidden: this namespace may not be deleted', "namespaces", "", name
            )
        for _ in range(_RETRIES):
            cached = await self.get(res, namespace, name)
            obj = self._mutable(cached)
            meta = obj["metadata"]
            if options.uid and options.uid != meta.get("uid"):
                raise errors.conflict(
                    res.plural, res.group, name,
                    f"Precondition failed: UID in precondition: {options.uid}, UID in object meta: {meta.get('uid')}",
                )
            if options.resource_version and options.resource_version != meta.get("resourceVersion"):
                raise errors.conflict(
                    res.plural, res.group, name,
                    f"Precondition failed: ResourceVersion in precondition: {options.resource_version}, "
                    f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
                )
            marked = self._mark_for_deletion(res, obj, options)
            if options.dry_run:
                return obj, marked is None
            try:
                if marked is None:
                    await self.store.delete(key, cached.revision)
                    meta["resourceVersion"] = str(self.store.revision)
                    return obj, True
                if marked is False:
                    return obj, False
                rev = await self.store.update(key, _strip_rv(obj), cached.revision)
            except ConflictError:
                continue
            except NotFoundError:
                raise errors.not_found(res.plural, res.group, name) from None
            meta["resourceVersion"] = str(rev)
            if res.kind == "Namespace" and self.on_namespace_terminating:
                self.on_namespace_terminating(name)
            return obj, False
        raise errors.conflict(res.plural, res.group, name, errors.MODIFIED)

    def _mark_for_deletion(self, res: Resource, obj: Obj, options: DeleteOptions) -> bool | None:
        """None: delete now. True: obj was changed to record the pending deletion. False: unchanged."""
        meta = obj["metadata"]
        current = meta.get("deletionTimestamp")
        if res.kind == "Namespace":
            if current:
                return False
            meta["deletionTimestamp"] = timestamp()
            meta["deletionGracePeriodSeconds"] = 0
            obj.setdefault("status", {})["phase"] = "Terminating"
            return True
        grace = 0
        if res.kind == "Pod":
            spec = obj.get("spec") or {}
            grace = options.grace_period if options.grace_period is not None else int(
                spec.get("terminationGracePeriodSeconds", 30)
            )
            grace = max(grace, 0)
            phase = (obj.get("status") or {}).get("phase")
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                grace = 0
        if current:
            # Already going: a shorter grace period may hurry it, nothing else changes.
            old_grace = meta.get("deletionGracePeriodSeconds") or 0
            if grace >= old_grace and not (grace == 0 and not meta.get("finalizers")):
                return False
            if grace == 0 and not meta.get("finalizers"):
                return None
        elif grace == 0 and not meta.get("finalizers"):
            return None
        meta["deletionTimestamp"] = timestamp(now() + dt.timedelta(seconds=grace))
        meta["deletionGracePeriodSeconds"] = grace
        return True

    async def delete_collection(
        self, res: Resource, namespace: str, items: list[CachedObject], options: DeleteOptions
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

    # --- bootstrap -----------------------------------------------------------------------------------

    async def ensure_default_namespaces(self) -> None:
        ns = core("namespaces")
        for name in DEFAULT_NAMESPACES:
            if self.cache.get(ns.key("", name)) is None:
                try:
                    await self.create(ns, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
                except ApiError as err:
                    if err.code != 409:
                        raise


def _keep_allocations(current: Obj, new: Obj) -> None:
    """An update that leaves out the allocated cluster IP or node ports keeps them (as upstream)."""
    old_spec, spec = current.get("spec") or {}, new.get("spec")
    if not isinstance(spec, dict) or "ExternalName" in (old_spec.get("type"), spec.get("type")):
        return
    for field in ("clusterIP", "clusterIPs"):
        if not spec.get(field) and old_spec.get(field):
            spec[field] = old_spec[field]
    old_ports = {(p.get("port"), p.get("protocol", "TCP")): p.get("nodePort") for p in old_spec.get("ports") or []}
    for port in spec.get("ports") or []:
        if isinstance(port, dict) and not port.get("nodePort") and spec.get("type") in ("NodePort", "LoadBalancer"):
            node_port = old_ports.get((port.get("port"), port.get("protocol", "TCP")))
            if node_port:
                port["nodePort"] = node_port


def namespaced_resources() -> list[Resource]:
    """One resource per storage bucket, for sweeping a namespace."""
    seen: set[str] = set()
    out = []
    for res in RESOURCES:
        if res.namespaced and res.bucket not in seen and "delete" in res.verbs:
            seen.add(res.bucket)
            out.append(res)
    return out
