"""The Kind a served version of an established CRD becomes (upstream's customresource handler and its
strategy, pkg/registry/customresource).

One instance per served version; they share the storage bucket `<plural>.<group>`, objects being stored
at the storage version and served at each version by rewriting apiVersion (conversion strategy None) or
through the CRD's conversion webhook (strategy Webhook, conversion.py; the async `storage_form` and
`served_forms` hooks the REST handlers await).
The schema prunes, defaults and validates (schema.py), CEL rules check (rules.py); a status
subresource makes the spec/status split and generation as upstream's; a scale subresource reads and
writes the CRD's replicas paths; additionalPrinterColumns fill the Table. Strategic merge patch is
refused (415), as upstream refuses it for custom resources.
"""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, Any

from controlplane.apiserver import errors, tables, typed
from controlplane.apiserver.apiextensions import columns, rules, schema, selectable
from controlplane.apiserver.apiextensions.conversion import ConversionError, WebhookConverter
from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.kinds.base import (
    ALL_VERBS,
    META_FIELDS,
    REFUSE_UNSUPPORTED,
    Kind,
    StatusSubresource,
    Subresource,
)
from controlplane.apiserver.kinds.scale import Scale
from controlplane.apiserver.smp_schema import ATOMIC, ListSpec, object_schema
from controlplane.apiserver.validation import finalizer_warnings, object_meta, path_segment
from controlplane.apiserver.webhooks.context import add_warning

if TYPE_CHECKING:
    from controlplane.apiserver.registry import Registry

Obj = dict[str, Any]
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\['([^']*)'\]")
DEFAULT_AGE_COLUMN: Obj = {
    "name": "Age",
    "type": "date",
    "jsonPath": ".metadata.creationTimestamp",
    "description": tables.AGE[3],
}
NAME_COLUMN_DOC = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"


def json_path(obj: Any, path: str) -> tuple[bool, Any]:
    """A simple JSONPath (`.spec.replicas`, `.items[0].name`) into `obj`: (found, value)."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    if text.startswith("$"):
        text = text[1:]
    current = obj
    for m in _STEP.finditer(text):
        key, index, quoted = m.group(1), m.group(2), m.group(3)
        if index is not None:
            if not isinstance(current, list) or int(index) >= len(current):
                return False, None
            current = current[int(index)]
        else:
            name = key if key is not None else quoted
            if not isinstance(current, dict) or name not in current:
                return False, None
            current = current[name]
    return True, current


def set_path(obj: Obj, path: str, value: Any) -> None:
    """Set `.a.b.c` in `obj`, making the objects on the way."""
    parts = [p for p in path.strip().lstrip("$").split(".") if p]
    current = obj
    for part in parts[:-1]:
        nxt = current.get(part)
        if not isinstance(nxt, dict):
            nxt = current[part] = {}
        current = nxt
    current[parts[-1]] = value


def _smp(node: Any) -> Any:
    """Server-side apply's facts from the schema's own markers: x-kubernetes-list-type map (keyed by all
    its x-kubernetes-list-map-keys) and set; x-kubernetes-map-type atomic objects owned whole."""
    if not isinstance(node, dict):
        return None
    if node.get("x-kubernetes-map-type") == "atomic":
        return ATOMIC
    out: Obj = {}
    for name, sub in (node.get("properties") or {}).items():
        if not isinstance(sub, dict):
            continue
        if sub.get("type") == "array":
            list_type = sub.get("x-kubernetes-list-type")
            keys = sub.get("x-kubernetes-list-map-keys") or []
            if list_type == "map" and keys:
                out[name] = ListSpec(tuple(keys), _smp(sub.get("items")))
            elif list_type == "set":
                out[name] = ListSpec(())
        elif sub.get("x-kubernetes-map-type") == "atomic":
            out[name] = ATOMIC
        elif sub.get("properties"):
            inner = _smp(sub)
            if inner:
                out[name] = inner
    return out


class CustomScale(Scale):
    """`<plural>/scale`: an autoscaling/v1 Scale over specReplicasPath, statusReplicasPath and
    labelSelectorPath."""

    def __init__(self, spec_path: str, status_path: str, selector_path: str) -> None:
        super().__init__()
        self.spec_path, self.status_path, self.selector_path = spec_path, status_path, selector_path

    def view(self, obj: Obj) -> Obj:
        meta = obj.get("metadata") or {}
        _, spec = json_path(obj, self.spec_path)
        _, status = json_path(obj, self.status_path)
        found, selector = json_path(obj, self.selector_path) if self.selector_path else (False, "")
        scale_status: Obj = {"replicas": status if isinstance(status, int) else 0}
        if found and isinstance(selector, str) and selector:
            scale_status["selector"] = selector
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                k: meta[k]
                for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if k in meta
            },
            "spec": {"replicas": spec if isinstance(spec, int) else 0},
            "status": scale_status,
        }

    def set_replicas(self, obj: Obj, replicas: int) -> None:
        set_path(obj, self.spec_path, replicas)


# Upstream's hasBlockingErr: after a wrong type, a missing required field, an unsupported enum value or a
# size violation the object lacks the shape its CEL rules were written for, so they are not run.
_BLOCKING = frozenset(
    (
        "FieldValueNotSupported",
        "FieldValueRequired",
        "FieldValueTooLong",
        "FieldValueTooMany",
        "FieldValueTypeInvalid",
    )
)
_NOT_CHECKED = FieldError(
    "FieldValueInvalid",
    "<nil>",
    "Invalid value: null: some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation",
)


class CustomResource(Kind):
    """A served version of a CRD. Built from the CRD object (and the version's entry in spec.versions)."""

    strategic_merge = False
    terminating = False  # the CRD is being deleted: no new objects

    def __init__(self, crd: Obj, version: Obj, storage_version: str) -> None:
        spec = crd["spec"]
        names = (crd.get("status") or {}).get("acceptedNames") or spec["names"]
        self.crd_name = crd["metadata"]["name"]
        self.crd_uid = crd["metadata"].get("uid", "")
        self.group = spec["group"]
        self.version = version["name"]
        self.kind = names["kind"]
        self.plural = names["plural"]
        # upstream's CRDRESTOptionsGetter: custom resources live at /registry/<group>/<plural>/...
        self.etcd_resource_prefix = f"{self.group}/{self.plural}"
        self.singular = names.get("singular") or names["kind"].lower()
        self._list_kind = names.get("listKind") or names["kind"] + "List"
        self.namespaced = spec.get("scope") == "Namespaced"
        self.short_names = tuple(names.get("shortNames") or ())
        self.categories = tuple(names.get("categories") or ())
        self.verbs = ALL_VERBS
        self.storage_version = storage_version
        self.open_api = copy.deepcopy(((version.get("schema") or {}).get("openAPIV3Schema")) or {})
        self.schema = f"crd:{self.group}/{self.version}/{self.plural}"
        # upstream's crConverter: metadata.namespace only where namespaced, then selectableFields
        self.field_selectors = selectable.selectable_fields(version)
        self.field_meta = META_FIELDS if self.namespaced else ("metadata.name",)
        self.field_refusal = REFUSE_UNSUPPORTED
        subs = version.get("subresources") or {}
        subresources: list[Subresource] = []
        if subs.get("status") is not None:
            subresources.append(StatusSubresource())
        scale = subs.get("scale")
        if scale is not None:
            subresources.append(
                CustomScale(
                    scale.get("specReplicasPath", ".spec.replicas"),
                    scale.get("statusReplicasPath", ".status.replicas"),
                    scale.get("labelSelectorPath", ""),
                )
            )
        self.subresources = tuple(subresources)
        # Upstream: generation grows with every change but of status (metadata aside) when a status
        # subresource exists, with every change but of metadata otherwise.
        self.generation = True
        # Upstream defaults every object read from storage (objects stored before a default was added
        # get it on read), so a schema with defaults reads through from_storage even at the storage version.
        self.defaults = schema.has_defaults(self.open_api)
        # Objects may be stored at any version the CRD has or had (status.storedVersions): with more than
        # this one, every read sets apiVersion (None conversion) and every write stores at the storage
        # version, as upstream's codec decodes and encodes each object.
        others = {v.get("name") for v in spec.get("versions") or []} | set(
            (crd.get("status") or {}).get("storedVersions") or []
        )
        self.converts = bool(others - {self.version}) or self.defaults
        # strategy Webhook: every object not at the version at hand goes through the webhook (stored
        # objects may be at an older storage version too, so even the storage version converts)
        self.webhook = WebhookConverter.of(crd)
        if self.webhook is not None:
            self.converts = True
        # What the strategy checks a webhook-converted body against: it reaches the registry at the
        # storage version, so that version's schema and rules judge it.
        stored = next(
            (v for v in crd["spec"].get("versions") or [] if v.get("name") == storage_version), version
        )
        stored_schema = ((stored.get("schema") or {}).get("openAPIV3Schema")) or {}
        self._stored_schema = copy.deepcopy(stored_schema) if stored is not version else None
        self._stored_rules = rules.skeleton(self._stored_schema) if self._stored_schema is not None else None
        self.printer_columns = list(version.get("additionalPrinterColumns") or [])
        self.printer = columns.compile_columns(self.printer_columns or [DEFAULT_AGE_COLUMN])
        self.columns = self._columns()
        # Strategic merge patches are refused (415), so both views are server-side apply's.
        own = _smp(self.open_api)
        self.smp = self.apply_schema = {**object_schema(), **(own if isinstance(own, dict) else {})}
        self.rules = rules.skeleton(self.open_api)  # only the fields that carry CEL rules
        self.has_rules = self.rules is not None
        super().__init__()
        typed.CUSTOM[self.schema] = self._decode

    def __repr__(self) -> str:
        return f"<CustomResource {self.api_version} {self.kind}>"

    @property
    def list_kind(self) -> str:
        return self._list_kind

    def forget(self) -> None:
        typed.CUSTOM.pop(self.schema, None)

    # decoding: pruning (typed.decode calls this for our schema name) ---------------------------------

    def _decode(self, obj: Obj, prune: bool) -> list[str]:
        if self.open_api.get(schema.PRESERVE):
            unknown: list[str] = []
            if isinstance(obj.get("metadata"), dict):
                schema._prune_metadata(obj["metadata"], "metadata", unknown)
            return unknown
        target = obj if prune else copy.deepcopy(obj)
        return schema.prune(target, self.open_api)

    # conversion (None strategy) --------------------------------------------------------------------

    def to_storage(self, obj: Obj) -> Obj:
        if self.converts:
            obj["apiVersion"] = f"{self.group}/{self.storage_version}"
        return obj

    def from_storage(self, obj: Obj) -> Obj:
        if self.converts:
            obj["apiVersion"] = self.api_version
            self.default(obj, False)
        return obj

    async def storage_form(self, obj: Obj, cache: Any) -> Obj:
        if self.webhook is None:
            return self.to_storage(obj)
        try:
            (stored,) = await self.webhook.convert([obj], f"{self.group}/{self.storage_version}", cache)
        except ConversionError as err:  # a write's body: upstream's InternalError
            raise errors.internal(str(err)) from None
        return stored

    async def served_forms(self, objs: list[Obj], cache: Any, listing: bool = False) -> list[Obj]:
        """Upstream decodes each stored object into the version asked for on its own (a list's items
        too), so each is its own review; a failure is the bare error as a 500 (ErrorToAPIStatus)."""
        if self.webhook is None:
            return [self.from_storage(o) for o in objs] if self.converts else objs
        out: list[Obj] = []
        for obj in objs:
            try:
                (shown,) = await self.webhook.convert([obj], self.api_version, cache)
            except ConversionError as err:
                raise errors.ApiError(500, "", str(err)) from None
            self.default(shown, False)
            out.append(shown)
        return out

    async def table_forms(self, objs: list[Obj], cache: Any) -> list[Obj]:
        if self.webhook is None and not self.converts:
            return objs
        return await self.served_forms(objs, cache, True)

    # strategy --------------------------------------------------------------------------------------

    def _judged_by(self, obj: Obj) -> tuple[Obj, Obj | None]:
        """(schema, rules) for `obj`: the storage version's for a webhook-converted object at it."""
        if (
            self.webhook is not None
            and self._stored_schema is not None
            and obj.get("apiVersion") != self.api_version
        ):
            return self._stored_schema, self._stored_rules
        return self.open_api, self.rules

    def default(self, obj: Obj, creating: bool) -> None:
        schema.apply_defaults(obj, self._judged_by(obj)[0])

    def prepare_for_create(self, obj: Obj) -> None:
        if self.has_status:
            obj.pop("status", None)

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        super().prepare_for_update(new, old)
        if not self.has_status:
            # Without a status subresource every change but of metadata is a new generation.
            body_new = {k: v for k, v in new.items() if k not in ("metadata", "apiVersion", "kind")}
            body_old = {k: v for k, v in old.items() if k not in ("metadata", "apiVersion", "kind")}
            if body_new != body_old and new.get("spec") == old.get("spec"):
                new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1

    async def begin_create(self, registry: Registry, obj: Obj, dry_run: bool = False) -> None:
        if self.terminating:
            raise errors.ApiError(
                405, "MethodNotAllowed", "create not allowed while custom resource definition is terminating"
            )

    def validate_name(self, path: str, name: str) -> list[FieldError]:
        return [errors.invalid(path, name, m) for m in path_segment(name)]

    def validate(self, obj: Obj) -> list[FieldError]:
        return self.validate_object(obj, None)

    def validate_object(self, obj: Obj, old: Obj | None) -> list[FieldError]:
        """The schema and the CEL rules (the storage version's for a webhook-converted object); on
        update ratcheted against `old` (schema.py says how)."""
        open_api, checks = self._judged_by(obj)
        problems = object_meta(obj.get("metadata"), self.validate_name, kube_finalizers=False)
        for warning in finalizer_warnings(obj, old):
            add_warning(warning)
        problems += schema.validate(obj, open_api, old=schema.MISSING if old is None else old)
        if checks is None:
            return problems
        if any(p.type in _BLOCKING for p in problems):
            return [*problems, _NOT_CHECKED]
        problems += rules.check(obj, old, checks, transitions=False, ratchet=old is not None)
        if old is not None:
            problems += rules.check(obj, old, checks, transitions=True)
        return problems

    # OpenAPI ---------------------------------------------------------------------------------------

    @property
    def definition_name(self) -> str:
        """Upstream's name for a custom kind's definition: the group reversed (com.example.stable.v1.CronTab)."""
        return ".".join([*reversed(self.group.split(".")), self.version, self.kind])

    def openapi_definitions(self, v3: bool) -> dict[str, Obj]:
        root = self.open_api if isinstance(self.open_api, dict) else {}
        if not v3 and root.get(schema.PRESERVE):
            # Upstream's buildKubeNative for v2: a schema that keeps unknown fields is published as a bare
            # object (properties would make kubectl refuse every field they do not list).
            body: Obj = {"type": "object"}
        else:
            body = _openapi_schema(self.open_api, v3)
            body["type"] = "object"
            props = body.setdefault("properties", {})
            meta_ref = {"$ref": ("#/components/schemas/" if v3 else "#/definitions/") + "V1ObjectMeta"}
            props["apiVersion"] = {"type": "string", "description": API_VERSION_DOC}
            props["kind"] = {"type": "string", "description": KIND_DOC}
            props["metadata"] = {"allOf": [meta_ref], "description": METADATA_DOC} if v3 else meta_ref
        gvk = {"group": self.group, "version": self.version, "kind": self.kind}
        body["x-kubernetes-group-version-kind"] = [gvk]
        ref = ("#/components/schemas/" if v3 else "#/definitions/") + self.definition_name
        list_meta = {"$ref": ("#/components/schemas/" if v3 else "#/definitions/") + "V1ListMeta"}
        listing = {
            "type": "object",
            "description": f"{self.kind}List is a list of {self.kind}",
            "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string", "description": API_VERSION_DOC},
                "items": {
                    "type": "array",
                    "items": {"$ref": ref},
                    "description": f"List of {self.plural}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md",
                },
                "kind": {"type": "string", "description": KIND_DOC},
                "metadata": {"allOf": [list_meta]} if v3 else list_meta,
            },
            "x-kubernetes-group-version-kind": [{**gvk, "kind": self.list_kind}],
        }
        return {
            self.definition_name: body,
            f"{self.definition_name[: -len(self.kind)]}{self.list_kind}": listing,
        }

    # table -----------------------------------------------------------------------------------------

    def _columns(self) -> tuple[tables.Column, ...]:
        cols: list[tables.Column] = [("Name", "string", 0, NAME_COLUMN_DOC)]
        for col in self.printer:
            cols.append((col.name, col.type, col.priority, col.description))
        return tuple(cols)

    def cells(self, obj: Obj) -> list[Any]:
        return [obj["metadata"].get("name"), *(columns.cell(col, obj) for col in self.printer)]


API_VERSION_DOC = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"
KIND_DOC = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
METADATA_DOC = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
_V2_DROPPED = ("nullable", "x-kubernetes-validations", "anyOf", "allOf", "oneOf", "not")


def _openapi_schema(node: Any, v3: bool) -> Any:
    """The published form of a CRD schema: v3 as written (minus rules), v2 without what OpenAPI v2 lacks
    (upstream's ToOpenAPI v2 conversion drops nullable and the junctors)."""
    if isinstance(node, list):
        return [_openapi_schema(n, v3) for n in node]
    if not isinstance(node, dict):
        return node
    out: Obj = {}
    for key, value in node.items():
        if key == "x-kubernetes-validations" or (not v3 and key in _V2_DROPPED):
            continue
        if key in ("properties",) and isinstance(value, dict):
            out[key] = {k: _openapi_schema(v, v3) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not") or key in ("anyOf", "allOf", "oneOf"):
            out[key] = _openapi_schema(value, v3)
        else:
            out[key] = value
    if not v3 and node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["type"] = "string"
        out["format"] = "int-or-string"
    if not v3:
        _strip_for_v2(node, out)
    return out


def _strip_for_v2(node: Obj, out: Obj) -> None:
    """Upstream's ToStructuralOpenAPIV2 for one node: a nullable node loses its type, a node keeping
    unknown fields its properties and items (kubectl would check them), an array left without items its
    type; a nullable property is no longer required, a nullable additionalProperties untyped."""
    if node.get("nullable"):
        for key in ("type", "items", "properties"):
            out.pop(key, None)
    if node.get(schema.PRESERVE):
        out.pop("items", None)
        out.pop("properties", None)
    if out.get("type") == "array" and "items" not in out:
        del out["type"]
    props = node.get("properties")
    if isinstance(props, dict) and isinstance(out.get("required"), list):
        out["required"] = [r for r in out["required"] if not (props.get(r) or {}).get("nullable")]
        if not out["required"]:
            del out["required"]
    extra = out.get("additionalProperties")
    if isinstance(extra, dict) and (node.get("additionalProperties") or {}).get("nullable"):
        extra.pop("type", None)


def kinds_of(crd: Obj) -> list[CustomResource]:
    """The served versions of an established CRD, in upstream's version priority (the first preferred)."""
    spec = crd["spec"]
    versions = spec.get("versions") or []
    storage = next((v["name"] for v in versions if v.get("storage")), versions[0]["name"] if versions else "")
    served = [v for v in versions if v.get("served")]
    served.sort(key=lambda v: version_priority(v["name"]))
    return [CustomResource(crd, v, storage) for v in served]


_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(name: str) -> tuple[int, int, int, str]:
    """Upstream's kube-aware version order: GA before beta before alpha, higher numbers first, then the
    rest alphabetically."""
    m = _VERSION.match(name)
    if not m:
        return (3, 0, 0, name)
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor, name)


__all__ = ["CustomResource", "CustomScale", "json_path", "kinds_of", "version_priority"]
