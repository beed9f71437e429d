"""What a served kind is: its names and verbs, and its strategy (upstream's RESTCreateStrategy and
RESTUpdateStrategy, pkg/registry/<group>/<kind>/strategy.go).

Each served kind is one module in this package holding one `Kind` subclass; the registry, the REST
handlers, discovery, OpenAPI, tables, admission and field selectors read everything kind-specific from
it, so they never name a kind. The defaults here keep simple kinds to a few lines: a kind only states
what differs (its columns, its validation, what create and update may change, its subresources).

Strategy hooks, in the order a write meets them (upstream's generic store, registry/store.go):

create: default -> prepare_for_create -> admission `admit` -> validate -> admission `validate` -> begin_create
update: prepare_for_update (or the subresource's merge) -> default -> admission `admit` -> validate and
        validate_update -> admission `validate`
delete: check_delete -> check_delete_preconditions -> (graceful kinds) deletion_grace ->
        deletion_finalizers (the garbage collector's, from gc_policy) -> held decides whether the object
        goes now or is marked (deletionTimestamp, and on_deleting for the rest); deletion.py decides
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from controlplane.apiserver import deletion, smp_schema, tables
from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.validation import dns_subdomain, object_meta

if TYPE_CHECKING:
    from aiohttp import web

    from controlplane.apiserver.kinds.ports import Plugin, Registry, RequestInfo, RestHandler, ServerConfig
    from controlplane.apiserver.options import DeleteOptions

Obj = dict[str, Any]
# What a begin_create/begin_update hook hands back: called with whether the write happened.
Finish = Callable[[bool], Awaitable[None]]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
NO_COLLECTION = tuple(v for v in ALL_VERBS if v != "deletecollection")


@dataclass(frozen=True)
class SelectableField:
    """A field a field selector may name beyond the kind's `field_meta`: the path it reads in the stored
    object and the value it has when the field is missing. A field upstream's label conversion accepts
    but its strategy does not expose (Pod's status.podIPs, CronJob's status.successful) is not
    `exposed`: it reads as "" for every object, as a missing key of upstream's fields.Set does."""

    name: str
    path: str = ""
    missing: str = ""
    fallback: str = ""  # read where the path is missing or empty (core Event's source -> reportingComponent)
    exposed: bool = True

    @property
    def at(self) -> str:
        return self.path or self.name


def fields(*names: str) -> tuple[SelectableField, ...]:
    return tuple(SelectableField(n) for n in names)


# The 400 texts of upstream's field label conversions for a label a kind does not accept ({label}: the
# label, {quoted}: it Go-quoted, {kind}: the kind). A kind without a conversion of its own gets
# apimachinery's DefaultMetaV1FieldSelectorConversion.
REFUSE_DEFAULT = '{quoted} is not a known field selector: only "metadata.name", "metadata.namespace"'
REFUSE_UNSUPPORTED = "field label not supported: {label}"
REFUSE_BATCH = 'field label {quoted} not supported for "{kind}"'  # batch/v1's Job and CronJob
META_FIELDS = ("metadata.name", "metadata.namespace")


class Subresource:
    """A subresource of a kind. `merge` says what an update through it may change; the REST verbs it
    answers differently from the main resource (a Scale view, a Binding, a log stream) are methods
    `get`, `create`, `update`, `patch` on the subclass."""

    name: str = ""
    group: str = ""
    version: str = "v1"
    kind: str = ""  # the response kind ("" = the parent's)
    verbs: tuple[str, ...] = ("get", "patch", "update")
    schema: str = ""  # the body's root type in fields.json ("" = the parent's)

    # True: the body is the whole object, and the generic store first applies its metadata rules to it
    # (system fields kept, the rest of metadata taken from the body) before `merge` (upstream's status
    # strategies: a status update may change labels and annotations, never the spec).
    whole_object: bool = False

    def merge(self, current: Obj, desired: Obj) -> Obj:
        """The object after an update through this subresource (`desired` is the request body, or the
        body with the store's metadata rules applied, for `whole_object` subresources)."""
        return desired

    # True: a Connecter (upstream's rest.Connecter: exec, attach, portforward, proxy): every method the
    # verbs allow goes to `connect(rest, request, info)` once authorized, body and all.
    connects: bool = False

    def handles(self, verb: str) -> bool:
        return callable(getattr(self, verb, None))


class Proxy(Subresource):
    """`<kind>/proxy` as a kind declares it: a Connecter for upstream's proxyMethods (GET, POST, PUT, PATCH,
    DELETE, HEAD, OPTIONS). What it connects to is the REST layer's (resourceproxy.Proxy, attached by
    kindparts): a kind only says that it has one and its options kind."""

    name = "proxy"
    verbs = ("create", "delete", "get", "patch", "update")
    methods = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
    connects = True

    def __init__(self, kind: str) -> None:
        self.kind = kind


class StatusSubresource(Subresource):
    """`<kind>/status`: an update may change the status and the metadata, never the spec (upstream's
    <kind>StatusStrategy.PrepareForUpdate: `new.Spec = old.Spec`); kinds reset more through
    `Kind.prepare_for_status_update` (a Deployment's labels, a Pod's ownerReferences)."""

    name = "status"
    whole_object = True

    def __init__(self, kind: str = "", group: str = "") -> None:
        self.kind, self.group = kind, group

    def merge(self, current: Obj, desired: Obj) -> Obj:
        new = dict(desired)
        if "spec" in current:
            new["spec"] = current["spec"]
        else:
            new.pop("spec", None)
        new["status"] = desired.get("status", {})
        return new


class Kind:
    """A served kind. Subclasses set the class attributes and override the hooks they need."""

    # --- what it is (discovery, routing) ----------------------------------------------------------
    group: ClassVar[str] = ""
    version: ClassVar[str] = "v1"
    kind: ClassVar[str] = ""
    plural: ClassVar[str] = ""
    singular: ClassVar[str] = ""
    namespaced: ClassVar[bool] = True
    short_names: ClassVar[tuple[str, ...]] = ()
    categories: ClassVar[tuple[str, ...]] = ()
    verbs: ClassVar[tuple[str, ...]] = ALL_VERBS
    subresources: ClassVar[tuple[Subresource, ...]] = ()
    # False for "virtual" kinds: create-only, answered by `create_virtual`, never stored.
    stored: ClassVar[bool] = True
    # Objects that live in another kind's storage (events.k8s.io Events are core Events), named by
    # that kind's bucket; `to_storage` / `from_storage` convert at the edge.
    storage_bucket: ClassVar[str] = ""
    # Where kube-apiserver keeps the resource in etcd, under --etcd-prefix (`/registry/<this>/<ns>/<name>`):
    # "" is its storage factory's default, the plural without the group (`deployments`); the exceptions
    # are upstream's SpecialDefaultResourcePrefixes (`minions`, `services/specs`, ...) and the resources
    # served outside its storage factory (APIServices, CRDs, custom resources: `<group>/<plural>`).
    etcd_resource_prefix: ClassVar[str] = ""

    # --- its schema -------------------------------------------------------------------------------
    # The root type in fields.json (the Python client's model name), for decoding, field validation,
    # OpenAPI and `kubectl explain`.
    schema: ClassVar[str] = ""
    # Fields the Python client types loosely that upstream types precisely (gen_fields writes them
    # into fields.json): {(type, field): "quantity" | "int-or-string" | "microtime" | ...}.
    type_marks: ClassVar[dict[tuple[str, str], str]] = {}
    # False: strategic merge patches are refused with 415 (custom resources, as upstream).
    strategic_merge: ClassVar[bool] = True
    # Field selectors it supports beyond its `field_meta` (upstream's strategy and label conversion).
    field_selectors: ClassVar[tuple[SelectableField, ...]] = ()
    # The metadata fields the kind's label conversion accepts and its text for a label it refuses.
    field_meta: ClassVar[tuple[str, ...]] = META_FIELDS
    field_refusal: ClassVar[str] = REFUSE_DEFAULT
    # Table output (upstream's printers.go); the default is upstream's for kinds without a printer.
    columns: ClassVar[tuple[tables.Column, ...]] = (tables.NAME, tables.CREATED_AT)

    # --- its strategy -----------------------------------------------------------------------------
    # metadata.generation starts at 1 and grows with every change of the spec.
    generation: ClassVar[bool] = False
    # DELETE answers with the object rather than a Status once it is gone (upstream's
    # ReturnDeletedObject: pods, podtemplates, services, serviceaccounts, namespaces).
    return_deleted_object: ClassVar[bool] = False
    # What a DELETE naming no propagation does with dependents (upstream's
    # DefaultGarbageCollectionPolicy): DeleteDependents (background), OrphanDependents, or Unsupported
    # (never the garbage collector's finalizers: events).
    gc_policy: ClassVar[str] = deletion.DELETE_DEPENDENTS
    # Graceful deletion (upstream's RESTGracefulDeleteStrategy): a DELETE marks the object for a grace
    # period (`deletion_grace`) and a later DELETE with gracePeriodSeconds=0 removes it (pods).
    graceful: ClassVar[bool] = False

    @functools.cached_property
    def smp(self) -> smp_schema.Schema:
        """Strategic merge patch's list keys, from upstream's OpenAPI markers of this group/version/kind."""
        return smp_schema.patch_schema(self.group, self.version, self.kind)

    @functools.cached_property
    def apply_schema(self) -> smp_schema.Schema:
        """Server-side apply's list keys, list types and atomic maps, from the same markers."""
        return smp_schema.apply_schema(self.group, self.version, self.kind)

    def __init__(self) -> None:
        if not self.singular:
            type(self).singular = self.kind.lower()
        self._subresources = {s.name: s for s in self.subresources}

    def __repr__(self) -> str:
        return f"<Kind {self.api_version} {self.kind}>"

    # identity ---------------------------------------------------------------------------------------

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def bucket(self) -> str:
        if self.storage_bucket:
            return self.storage_bucket
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def etcd_prefix(self) -> str:
        """The resource's path in etcd below --etcd-prefix (see `etcd_resource_prefix`)."""
        return self.etcd_resource_prefix or self.plural

    @property
    def resource(self) -> str:
        """The group-qualified resource as errors name it (`deployments.apps`)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def key(self, namespace: str, name: str) -> str:
        return f"/{self.bucket}/{namespace}/{name}" if self.namespaced else f"/{self.bucket}/{name}"

    def prefix(self, namespace: str) -> str:
        if self.namespaced and namespace:
            return f"/{self.bucket}/{namespace}/"
        return f"/{self.bucket}/"

    def subresource(self, name: str) -> Subresource | None:
        return self._subresources.get(name)

    def attach(self, subresources: tuple[Subresource, ...] = (), admission: tuple[Plugin, ...] = ()) -> None:
        """What the REST layer adds to the kind (kindparts.py): subresources whose verbs need it (a
        declared subresource of the same name is replaced where it stood) and admission plugins that
        belong to it (after the kind's own). Idempotent: attaching again replaces what was attached."""
        if not hasattr(self, "_declared"):
            self._declared = (self.subresources, self.admission)
        declared, own = self._declared
        by_name = {s.name: s for s in subresources}
        self.subresources = tuple(by_name.pop(s.name, s) for s in declared) + tuple(by_name.values())
        self._subresources = {s.name: s for s in self.subresources}
        self.admission = own + tuple(admission)

    @property
    def storage_schema(self) -> str:
        """The root type of the stored form (another kind's, for kinds that convert)."""
        return self.schema

    @property
    def has_status(self) -> bool:
        return "status" in self._subresources

    # strategy ---------------------------------------------------------------------------------------

    def default(self, obj: Obj, creating: bool) -> None:
        """Upstream's SetDefaults_* (applied at decode time upstream, so on create and update)."""

    def prepare_for_create(self, obj: Obj) -> None:
        """What a create may not set (the status, for most kinds with a status subresource; a node agent
        registers its Node with a status)."""

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        """What an update of the main resource may not change: the status, when a subresource owns it."""
        if self.has_status:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)

    def prepare_for_status_update(self, new: Obj, old: Obj) -> None:
        """What a status update may not change beyond the spec (upstream's status strategies)."""

    def validate_name(self, path: str, name: str) -> list[FieldError]:
        return dns_subdomain(path, name)

    def validate(self, obj: Obj) -> list[FieldError]:
        """Upstream's Validate<Kind>: object metadata, then the kind's own rules (`validate_spec`)."""
        return object_meta(obj.get("metadata"), self.validate_name) + self.validate_spec(obj)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return []

    def validate_object(self, obj: Obj, old: Obj | None) -> list[FieldError]:
        """`validate`, told the object before an update (None on create): for kinds whose validation
        ratchets on unchanged fields (custom resources)."""
        return self.validate(obj)

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        """Upstream's Validate<Kind>Update: what may not change (beyond what `validate` checks)."""
        return []

    # lifecycle --------------------------------------------------------------------------------------

    async def begin_create(self, registry: Registry, obj: Obj, dry_run: bool = False) -> Finish | None:
        """Last step before the store (upstream's BeginCreate hooks: allocations). May return a
        function the registry calls once the write succeeded (True) or did not happen (False)."""
        return None

    async def begin_update(
        self, registry: Registry, new: Obj, old: Obj, dry_run: bool = False
    ) -> Finish | None:
        """Last step before the store on an update of the main resource (upstream's BeginUpdate hooks:
        allocations a changed object now needs); may return a Finish as begin_create."""
        return None

    async def after_delete(self, registry: Registry, obj: Obj) -> None:
        """The object left the store (upstream's AfterDelete: what it held is released)."""

    def check_delete(self, name: str) -> None:
        """Raise an ApiError if the object may never be deleted."""

    def check_delete_preconditions(self, obj: Obj, options: DeleteOptions) -> None:
        """A 409 when the DELETE's preconditions (uid, resourceVersion) do not hold."""
        deletion.check_preconditions(self, obj, options)

    def deletion_grace(self, obj: Obj, grace: int | None) -> int:
        """Graceful kinds: seconds the object stays (marked) after a first DELETE asking for `grace`
        (None: the kind's default); 0 removes it at once unless held (upstream's CheckGracefulDelete)."""
        return 0

    def deletion_finalizers(self, obj: Obj, options: DeleteOptions) -> list[str] | None:
        """The finalizers the object has after a DELETE with `options` (None: unchanged)."""
        return deletion.gc_finalizers(
            list((obj.get("metadata") or {}).get("finalizers") or []), options, self.gc_policy
        )

    def held(self, obj: Obj) -> bool:
        """Whether something still holds the object (finalizers) once it is marked for deletion."""
        return bool((obj.get("metadata") or {}).get("finalizers"))

    def on_deleting(self, obj: Obj) -> None:
        """Mark `obj` as being deleted beyond deletionTimestamp (a phase, for instance)."""

    # conversion (for kinds stored as another kind) -------------------------------------------------

    converts: ClassVar[bool] = False

    def to_storage(self, obj: Obj) -> Obj:
        return obj

    def from_storage(self, obj: Obj) -> Obj:
        return obj

    async def storage_form(self, obj: Obj, cache: Any) -> Obj:
        """to_storage for the REST handlers, which can wait (a CRD's conversion webhook answers here)."""
        return self.to_storage(obj)

    async def served_forms(self, objs: list[Obj], cache: Any, listing: bool = False) -> list[Obj]:
        """from_storage of stored objects for the REST handlers (`listing`: they are a list's items)."""
        return [self.from_storage(o) for o in objs] if self.converts else objs

    async def table_forms(self, objs: list[Obj], cache: Any) -> list[Obj]:
        """What a Table's cells are read from: the stored form (the column functions read it), unless
        the version's columns read its own fields (a CRD converted by its webhook)."""
        return objs

    # what the server starts with the kind -----------------------------------------------------------

    admission: ClassVar[tuple[Plugin, ...]] = ()

    async def bootstrap(self, registry: Registry) -> None:
        """Objects the server keeps from its first start (default namespaces, system classes)."""

    def controllers(self, registry: Registry, config: ServerConfig) -> list[Any]:
        """In-process loops the kind needs (each has `start()` and `async stop()`)."""
        return []

    async def create_virtual(
        self, rest: RestHandler, request: web.Request, info: RequestInfo
    ) -> web.StreamResponse:
        """POST of a kind that is not stored (`stored = False`)."""
        raise NotImplementedError

    # OpenAPI of kinds whose schema fields.json does not hold (custom resources) ------------------------

    def openapi_definitions(self, v3: bool) -> dict[str, Obj]:
        """{definition name: schema} of the kind's own types; the first names the kind itself."""
        return {}

    # table ------------------------------------------------------------------------------------------

    def cells(self, obj: Obj) -> list[Any]:
        return tables.name_and_created(obj)
