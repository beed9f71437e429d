"""apiextensions.k8s.io/v1 CustomResourceDefinition: its defaulting, upstream's validation
(pkg/apis/apiextensions/validation), its strategy (status starts with the storage version in
storedVersions) and its deletion (upstream's etcd.go: the first DELETE adds the
`customresourcecleanup.apiextensions.k8s.io` finalizer and a Terminating condition; the controller
removes the objects, then the finalizer, and the CRD goes)."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from controlplane.apiserver.apiextensions import rules, selectable, structural
from controlplane.apiserver.errors import FieldError, forbidden, invalid, not_supported, required
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.meta import timestamp
from controlplane.apiserver.validation import immutable
from controlplane.apiserver.webhooks import validation as webhook_validation
from kubeclient import names

if TYPE_CHECKING:
    from controlplane.apiserver.options import DeleteOptions

Obj = dict[str, Any]
CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
ESTABLISHED, NAMES_ACCEPTED, TERMINATING = "Established", "NamesAccepted", "Terminating"
_COLUMN_TYPES = ["integer", "number", "string", "boolean", "date"]
_SIMPLE_PATH = re.compile(r"^(\.[A-Za-z0-9_-]+)+$")


_label = names.dns1035_label  # IsDNS1035Label's messages


def condition(crd: Obj, kind: str) -> Obj | None:
    return next((c for c in (crd.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def is_true(crd: Obj, kind: str) -> bool:
    found = condition(crd, kind)
    return found is not None and found.get("status") == "True"


def set_condition(status: Obj, kind: str, value: str, reason: str, message: str) -> None:
    """Upstream's SetCRDCondition: lastTransitionTime moves only when the status does."""
    conditions = status.setdefault("conditions", [])
    for c in conditions:
        if c.get("type") == kind:
            if c.get("status") != value:
                c["lastTransitionTime"] = timestamp()
            c.update(status=value, reason=reason, message=message)
            return
    conditions.append(
        {
            "type": kind,
            "status": value,
            "lastTransitionTime": timestamp(),
            "reason": reason,
            "message": message,
        }
    )


def storage_version(spec: Obj) -> str:
    return next((v.get("name", "") for v in spec.get("versions") or [] if v.get("storage")), "")


def _names_errors(names_: Obj, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    for field in ("plural", "singular"):
        value = names_.get(field) or ""
        if value:
            problems = _label(value)
            if problems:
                errs.append(invalid(f"{path}.{field}", value, ",".join(problems)))
    for field in ("kind", "listKind"):
        value = names_.get(field) or ""
        if value:
            problems = _label(value.lower())
            if problems:
                errs.append(
                    invalid(
                        f"{path}.{field}",
                        value,
                        "may have mixed case, but should otherwise match: " + ",".join(problems),
                    )
                )
    for list_field in ("shortNames", "categories"):
        for i, value in enumerate(names_.get(list_field) or []):
            problems = _label(value)
            if problems:
                errs.append(invalid(f"{path}.{list_field}[{i}]", value, ",".join(problems)))
    if names_.get("kind") and names_.get("kind") == names_.get("listKind"):
        errs.append(invalid(f"{path}.listKind", names_["listKind"], "kind and listKind may not be the same"))
    return errs


_COLUMN_FORMATS = ["byte", "date", "date-time", "double", "float", "int32", "int64", "password"]


def _column_errors(columns: list[Any], path: str) -> list[FieldError]:
    """Upstream's ValidateCustomResourceColumnDefinition (its `JSONPath` spelling of the required field
    included); the path itself is only checked to be a simple one starting with `.`, as upstream."""
    errs: list[FieldError] = []
    types = ",".join(sorted(_COLUMN_TYPES))
    for i, col in enumerate(columns):
        at = f"{path}[{i}]"
        if not isinstance(col, dict):
            continue
        if not col.get("name"):
            errs.append(required(f"{at}.name"))
        if not col.get("type"):
            errs.append(required(f"{at}.type", f"must be one of {types}"))
        elif col["type"] not in _COLUMN_TYPES:
            errs.append(invalid(f"{at}.type", col["type"], f"must be one of {types}"))
        if col.get("format") and col["format"] not in _COLUMN_FORMATS:
            errs.append(invalid(f"{at}.format", col["format"], f"must be one of {','.join(_COLUMN_FORMATS)}"))
        if not col.get("jsonPath"):
            errs.append(required(f"{at}.JSONPath"))
        elif not str(col["jsonPath"]).startswith("."):
            errs.append(
                invalid(f"{at}.jsonPath", col["jsonPath"], "must be a simple json path starting with .")
            )
    return errs


def _scale_errors(scale: Obj, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    spec_path = scale.get("specReplicasPath") or ""
    if not spec_path:
        errs.append(required(f"{path}.specReplicasPath"))
    elif not _SIMPLE_PATH.match(spec_path) or not spec_path.startswith(".spec."):
        errs.append(invalid(f"{path}.specReplicasPath", spec_path, "should be a json path under .spec"))
    status_path = scale.get("statusReplicasPath") or ""
    if not status_path:
        errs.append(required(f"{path}.statusReplicasPath"))
    elif not _SIMPLE_PATH.match(status_path) or not status_path.startswith(".status."):
        errs.append(invalid(f"{path}.statusReplicasPath", status_path, "should be a json path under .status"))
    selector = scale.get("labelSelectorPath") or ""
    if selector and (not _SIMPLE_PATH.match(selector) or not selector.startswith((".spec.", ".status."))):
        errs.append(
            invalid(
                f"{path}.labelSelectorPath", selector, "should be a json path under either .spec or .status"
            )
        )
    return errs


def _version_errors(version: Obj, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    name = version.get("name") or ""
    if not name:
        errs.append(required(f"{path}.name"))
    else:
        problems = _label(name)
        if problems:
            errs.append(invalid(f"{path}.name", name, ",".join(problems)))
    schema = (version.get("schema") or {}).get("openAPIV3Schema")
    if schema is None:
        errs.append(required(f"{path}.schema.openAPIV3Schema", "schemas are required"))
    else:
        at = f"{path}.schema.openAPIV3Schema"
        errs += structural.check(schema, at)
        errs += rules.compile_errors(schema, at)
    subs = version.get("subresources") or {}
    if isinstance(subs.get("scale"), dict):
        errs += _scale_errors(subs["scale"], f"{path}.subresources.scale")
    errs += _column_errors(version.get("additionalPrinterColumns") or [], f"{path}.additionalPrinterColumns")
    errs += selectable.errors(version, path)
    return errs


def validate_spec(spec: Obj) -> list[FieldError]:
    """ValidateCustomResourceDefinitionSpec (v1: schemas required, one storage version)."""
    errs: list[FieldError] = []
    group = spec.get("group") or ""
    if not group:
        errs.append(required("spec.group"))
    elif names.dns1123_subdomain(group):
        errs.append(invalid("spec.group", group, ",".join(names.dns1123_subdomain(group))))
    elif len(group.split(".")) < 2:
        errs.append(invalid("spec.group", group, "should be a domain with at least one dot"))
    scope = spec.get("scope") or ""
    if not scope:
        errs.append(required("spec.scope"))
    elif scope not in ("Cluster", "Namespaced"):
        errs.append(not_supported("spec.scope", scope, ["Cluster", "Namespaced"]))
    versions = spec.get("versions") or []
    shown = json.loads(json.dumps(versions))
    for i, version in enumerate(versions):
        errs += _version_errors(version, f"spec.versions[{i}]")
    version_names = [v.get("name") for v in versions]
    if len(set(version_names)) != len(version_names):
        errs.append(invalid("spec.versions", shown, "must contain unique version names"))
    if sum(1 for v in versions if v.get("storage")) != 1:
        errs.append(
            invalid("spec.versions", shown, "must have exactly one version marked as storage version")
        )
    names_ = spec.get("names") or {}
    for field in ("plural", "singular", "kind", "listKind"):
        if not names_.get(field):
            errs.append(required(f"spec.names.{field}"))
    errs += _names_errors(names_, "spec.names")
    if spec.get("preserveUnknownFields"):
        errs.append(
            invalid(
                "spec.preserveUnknownFields", True, "must be false in order to use defaults in the schema"
            )
        )
    errs += _conversion_errors(spec.get("conversion") or {})
    return errs


_REVIEW_VERSIONS = ("v1", "v1beta1")  # upstream's acceptedConversionReviewVersions


def _conversion_errors(conversion: Obj) -> list[FieldError]:
    """validateCustomResourceConversion (its paths name the internal fields, as upstream's texts do)."""
    path = "spec.conversion"
    strategy = conversion.get("strategy", "None")
    webhook = conversion.get("webhook") or {}
    config, versions = webhook.get("clientConfig"), webhook.get("conversionReviewVersions") or []
    if strategy not in ("None", "Webhook"):
        return [not_supported(f"{path}.strategy", strategy, ["None", "Webhook"])]
    if strategy == "None":
        errs = []
        if config is not None:
            errs.append(
                forbidden(
                    f"{path}.webhookClientConfig", "should not be set when strategy is not set to Webhook"
                )
            )
        if versions:
            errs.append(
                forbidden(
                    f"{path}.conversionReviewVersions",
                    "should not be set when strategy is not set to Webhook",
                )
            )
        return errs
    errs = (
        [required(f"{path}.webhookClientConfig", "required when strategy is set to Webhook")]
        if config is None
        else webhook_validation.client_config(f"{path}.webhookClientConfig", config)
    )
    vpath = f"{path}.conversionReviewVersions"
    return errs + webhook_validation.review_versions(vpath, versions, empty=required(vpath))


class CustomResourceDefinitionKind(Kind):
    group = "apiextensions.k8s.io"
    kind = "CustomResourceDefinition"
    plural = "customresourcedefinitions"
    etcd_resource_prefix = "apiextensions.k8s.io/customresourcedefinitions"  # apiextensions' own storage
    namespaced = False
    short_names = ("crd", "crds")
    categories = ("api-extensions",)
    schema = "V1CustomResourceDefinition"
    generation = True
    subresources = (StatusSubresource(),)

    def default(self, obj: Obj, creating: bool) -> None:
        spec = obj.setdefault("spec", {})
        names_ = spec.setdefault("names", {})
        if names_.get("kind"):
            names_.setdefault("singular", names_["kind"].lower())
            names_.setdefault("listKind", names_["kind"] + "List")
        spec.setdefault("conversion", {"strategy": "None"})
        webhook = (spec["conversion"].get("webhook") or {}).get("clientConfig") or {}
        if isinstance(webhook.get("service"), dict):
            webhook["service"].setdefault("port", 443)

    def prepare_for_create(self, obj: Obj) -> None:
        stored = storage_version(obj.get("spec") or {})
        obj["status"] = {
            "acceptedNames": {"plural": "", "kind": ""},
            "storedVersions": [stored] if stored else [],
        }

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        super().prepare_for_update(new, old)
        status = new.setdefault("status", {})
        stored = status.setdefault("storedVersions", [])
        version = storage_version(new.get("spec") or {})
        if version and version not in stored:
            stored.append(version)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec") or {}
        errs: list[FieldError] = []
        name = (obj.get("metadata") or {}).get("name") or ""
        plural = (spec.get("names") or {}).get("plural") or ""
        if name and name != f"{plural}.{spec.get('group') or ''}":
            errs.append(invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
        errs += validate_spec(spec)
        errs += self._status_errors(obj)
        return errs

    @staticmethod
    def _status_errors(obj: Obj) -> list[FieldError]:
        status = obj.get("status") or {}
        errs = _names_errors(status.get("acceptedNames") or {}, "status.acceptedNames")
        versions = [v.get("name") for v in (obj.get("spec") or {}).get("versions") or []]
        stored = status.get("storedVersions") or []
        for i, v in enumerate(stored):
            if v not in versions:
                errs.append(invalid(f"status.storedVersions[{i}]", v, "must appear in spec.versions"))
        storage = storage_version(obj.get("spec") or {})
        if stored and storage and storage not in stored:
            errs.append(invalid("status.storedVersions", stored, f"must have the storage version {storage}"))
        return errs

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        errs: list[FieldError] = []
        if is_true(old, ESTABLISHED):
            errs += immutable("spec.scope", spec.get("scope"), old_spec.get("scope"))
            errs += immutable(
                "spec.names.kind",
                (spec.get("names") or {}).get("kind"),
                (old_spec.get("names") or {}).get("kind"),
            )
        errs += immutable("spec.group", spec.get("group"), old_spec.get("group"))
        errs += immutable(
            "spec.names.plural",
            (spec.get("names") or {}).get("plural"),
            (old_spec.get("names") or {}).get("plural"),
        )
        return errs

    def deletion_finalizers(self, obj: Obj, options: DeleteOptions) -> list[str] | None:
        finalizers = super().deletion_finalizers(obj, options)
        current = list(finalizers if finalizers is not None else (obj["metadata"].get("finalizers") or []))
        if not obj["metadata"].get("deletionTimestamp") and CLEANUP_FINALIZER not in current:
            current.append(CLEANUP_FINALIZER)
        return current

    def on_deleting(self, obj: Obj) -> None:
        set_condition(
            obj.setdefault("status", {}),
            TERMINATING,
            "True",
            "InstanceDeletionPending",
            "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
        )


KIND = CustomResourceDefinitionKind()

__all__ = ["CLEANUP_FINALIZER", "KIND", "condition", "is_true", "set_condition", "validate_spec"]
