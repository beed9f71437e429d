"""core/v1 Namespace, and namespace lifecycle: the namespaces the server keeps (default, kube-system,
kube-public, kube-node-lease; the first three cannot be deleted), DELETE making a namespace Terminating
until its content is gone (the `kubernetes` finalizer in spec.finalizers, removed through
namespaces/finalize by the in-process finalizer), and the NamespaceLifecycle admission plugin that
refuses new content in a missing or terminating namespace.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from controlplane.apiserver import deletion, errors, tables
from controlplane.apiserver.kinds.base import (
    NO_COLLECTION,
    REFUSE_UNSUPPORTED,
    Kind,
    StatusSubresource,
    Subresource,
    fields,
)
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import dns_label

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import AdmissionRequest, Registry
    from controlplane.apiserver.options import DeleteOptions

Obj = dict[str, Any]

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
IMMORTAL = ("default", "kube-system", "kube-public")
FINALIZER = "kubernetes"


class Finalize(Subresource):
    """namespaces/finalize: an update changes spec.finalizers only."""

    name = "finalize"
    kind = "Namespace"
    verbs = ("update",)

    def merge(self, current: Obj, desired: Obj) -> Obj:
        new = dict(current)
        new["spec"] = {
            **(current.get("spec") or {}),
            "finalizers": (desired.get("spec") or {}).get("finalizers") or [],
        }
        return new


class Lifecycle:
    """NamespaceLifecycle: namespaced objects are created only in namespaces that exist and are not
    being terminated. A namespace the cache does not hold is read from the store before the create is
    refused, as upstream's plugin makes a live call when its informer lacks the namespace: one created a
    moment ago may not have reached the cache of a loaded server yet."""

    name = "NamespaceLifecycle"

    def admit(self, request: AdmissionRequest) -> Awaitable[None] | None:
        kind = request.kind
        if request.operation != "CREATE" or not kind.namespaced or request.subresource:
            return None
        key = KIND.key("", request.namespace)
        ns = request.registry.cache.get(key)
        if ns is None:
            return self._live(request, key)
        self._check(request, ns.view)
        return None

    async def _live(self, request: AdmissionRequest, key: str) -> None:
        ns = await request.registry.cache.read_through(key)
        if ns is None:
            raise errors.not_found(KIND.plural, "", request.namespace)
        self._check(request, ns.view)

    @staticmethod
    def _check(request: AdmissionRequest, namespace: Obj) -> None:
        if namespace.get("metadata", {}).get("deletionTimestamp"):
            meta = request.obj.get("metadata") or {}
            name = meta.get("name") or meta.get("generateName") or ""
            kind = request.kind
            raise errors.forbidden_request(
                f'{kind.resource} "{name}" is forbidden: unable to create new content in namespace '
                f"{request.namespace} because it is being terminated",
                kind.plural,
                kind.group,
                name,
            )


class Namespace(Kind):
    kind = "Namespace"
    plural = "namespaces"
    namespaced = False
    short_names = ("ns",)
    verbs = NO_COLLECTION
    return_deleted_object = True
    subresources = (StatusSubresource("Namespace"), Finalize())
    schema = "V1Namespace"
    field_selectors = fields("status.phase")
    field_meta = ("metadata.name",)
    field_refusal = REFUSE_UNSUPPORTED
    columns = (tables.NAME, tables.column("Status", desc="The status of the namespace"), tables.AGE)
    # PodSecurity (pods, pod templates, namespaces) follows it, attached by the REST layer (kindparts.py):
    # a namespace's parts come before the webhooks', so it validates before them, as upstream orders it.
    admission = (Lifecycle(),)

    def validate_name(self, path: str, name: str) -> list[errors.FieldError]:
        return dns_label(path, name)

    def default(self, obj: Obj, creating: bool) -> None:
        meta = obj.setdefault("metadata", {})
        if meta.get("name"):
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]

    def prepare_for_create(self, obj: Obj) -> None:
        # Active, and the kubernetes finalizer always (upstream adds it to any the client sent).
        obj["status"] = {"phase": "Active"}
        spec = obj.setdefault("spec", {})
        finalizers = spec.setdefault("finalizers", [])
        if FINALIZER not in finalizers:
            finalizers.append(FINALIZER)

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        super().prepare_for_update(new, old)
        new["spec"] = old.get("spec", {})  # only namespaces/finalize changes it

    def check_delete(self, name: str) -> None:
        if name in IMMORTAL:
            raise errors.forbidden_request(
                f'namespaces "{name}" is forbidden: this namespace may not be deleted', self.plural, "", name
            )

    def check_delete_preconditions(self, obj: Obj, options: DeleteOptions) -> None:
        """The namespace store's own check (and text: `Precondition failed: UID in precondition: ...`)."""
        meta = obj["metadata"]
        for what, wanted, have in (
            ("UID", options.uid, meta.get("uid")),
            ("ResourceVersion", options.resource_version, meta.get("resourceVersion")),
        ):
            if wanted is not None and wanted != have:
                raise errors.conflict(
                    self.plural,
                    "",
                    meta["name"],
                    f"Precondition failed: {what} in precondition: {wanted}, {what} in object meta: {have}",
                )

    def deletion_finalizers(self, obj: Obj, options: DeleteOptions) -> list[str] | None:
        """A first DELETE sets the GC finalizers from the request alone (orphanDependents=false means
        foreground here); while the namespace is emptied, a DELETE changes nothing."""
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return (
                None
                if (obj.get("spec") or {}).get("finalizers")
                else super().deletion_finalizers(obj, options)
            )
        finalizers = list(meta.get("finalizers") or [])
        orphan, foreground = (
            deletion.ORPHAN_FINALIZER in finalizers,
            deletion.FOREGROUND_FINALIZER in finalizers,
        )
        if options.orphan_dependents is not None:
            orphan, foreground = options.orphan_dependents, not options.orphan_dependents
        elif options.propagation is not None:
            orphan, foreground = options.propagation == "Orphan", options.propagation == "Foreground"
        return deletion.with_gc_finalizers(finalizers, orphan, foreground)

    def held(self, obj: Obj) -> bool:
        return super().held(obj) or bool((obj.get("spec") or {}).get("finalizers"))

    def on_deleting(self, obj: Obj) -> None:
        obj.setdefault("status", {})["phase"] = "Terminating"

    async def bootstrap(self, registry: Registry) -> None:
        for name in DEFAULT_NAMESPACES:
            await registry.ensure(
                self, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )

    def cells(self, obj: Obj) -> list[Any]:
        return [obj["metadata"].get("name"), (obj.get("status") or {}).get("phase", ""), age(obj)]


KIND = Namespace()
