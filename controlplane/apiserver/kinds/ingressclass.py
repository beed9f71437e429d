"""networking.k8s.io/v1 IngressClass: names the controller that implements a class of Ingresses, with
an optional reference to its parameters.

Upstream's defaults and validation (pkg/apis/networking): `parameters.scope` defaults to Cluster; the
controller is a domain-prefixed path of at most 250 bytes and immutable; a namespaced parameters
reference needs its namespace, a cluster one must not have one. The class annotated
`ingressclass.kubernetes.io/is-default-class: "true"` is what the DefaultIngressClass admission
plugin (`ingress.py`) gives Ingresses that name no class.
"""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, forbidden, invalid, not_supported, required, too_long
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import dns_label, dns_subdomain, immutable, path_segment
from kubeclient import names

Obj = dict[str, Any]

DEFAULT_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"
CONTROLLER_MAX = 250
SCOPES = ["Cluster", "Namespace"]


def is_default(ingress_class: Obj) -> bool:
    return (ingress_class.get("metadata") or {}).get("annotations", {}).get(
        DEFAULT_CLASS_ANNOTATION
    ) == "true"


def typed_reference(path: str, ref: Obj) -> list[FieldError]:
    """validateIngressTypedLocalObjectReference: apiGroup a subdomain, kind and name path segments."""
    errors: list[FieldError] = []
    if ref.get("apiGroup") is not None:
        errors += dns_subdomain(f"{path}.apiGroup", ref["apiGroup"])
    for field in ("kind", "name"):
        value = ref.get(field) or ""
        if not value:
            errors.append(required(f"{path}.{field}"))
        else:
            errors += [invalid(f"{path}.{field}", value, msg) for msg in path_segment(value)]
    return errors


def _parameters(params: Obj | None) -> list[FieldError]:
    if params is None:
        return []
    path = "spec.parameters"
    errors = typed_reference(path, params)
    scope = params.get("scope")
    if scope is None:
        return [*errors, required(f"{path}.scope")]
    if scope not in SCOPES:
        return [*errors, not_supported(f"{path}.scope", scope, SCOPES)]
    namespace = params.get("namespace")
    if scope == "Namespace":
        if namespace is None:
            errors.append(required(f"{path}.namespace", "`parameters.scope` is set to 'Namespace'"))
        else:
            errors += dns_label(f"{path}.namespace", namespace)
    elif namespace is not None:
        errors.append(forbidden(f"{path}.namespace", "`parameters.scope` is set to 'Cluster'"))
    return errors


def validate_class_spec(spec: Obj) -> list[FieldError]:
    errors: list[FieldError] = []
    controller = spec.get("controller") or ""
    if not controller:
        errors.append(required("spec.controller"))
    else:
        if len(controller.encode()) > CONTROLLER_MAX:
            errors.append(too_long("spec.controller", CONTROLLER_MAX))
        errors += [
            invalid("spec.controller", part, msg) for part, msg in names.domain_prefixed_path(controller)
        ]
    return errors + _parameters(spec.get("parameters"))


class IngressClass(Kind):
    group = "networking.k8s.io"
    kind = "IngressClass"
    plural = "ingressclasses"
    namespaced = False
    schema = "V1IngressClass"
    generation = True
    columns = (
        tables.NAME,
        tables.column("Controller", desc="Controller that is responsible for handling this class"),
        tables.column("Parameters", desc="A reference to a resource with additional parameters"),
        tables.AGE,
    )

    def default(self, obj: Obj, creating: bool) -> None:
        params = (obj.get("spec") or {}).get("parameters")
        if isinstance(params, dict) and params.get("scope") is None:
            params["scope"] = "Cluster"

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validate_class_spec(obj.get("spec") or {})

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        return immutable(
            "spec.controller",
            (new.get("spec") or {}).get("controller"),
            (old.get("spec") or {}).get("controller"),
        )

    def cells(self, obj: Obj) -> list[Any]:
        spec = obj.get("spec") or {}
        params = spec.get("parameters")
        shown = "<none>"
        if params:
            shown = params.get("kind", "")
            if params.get("apiGroup") is not None:
                shown += "." + params["apiGroup"]
            shown += "/" + params.get("name", "")
        return [obj["metadata"].get("name"), spec.get("controller", ""), shown, age(obj)]


KIND = IngressClass()
