"""admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding,
cluster-scoped, defaulted and validated as upstream (validation.py). The ValidatingAdmissionPolicy
admission plugin belongs to the policy kind (the REST layer's admissionpolicy/plugin.py, attached by
kindparts); it runs before the validating webhooks (the kinds table lists it first), as upstream's
default plugin order has it."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.admissionpolicy import validation
from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.meta import age
from kubeclient.selectors import format_label_selector

Obj = dict[str, Any]

GROUP = "admissionregistration.k8s.io"
UNSET = "<unset>"


class ValidatingAdmissionPolicyKind(Kind):
    group = GROUP
    kind = "ValidatingAdmissionPolicy"
    plural = "validatingadmissionpolicies"
    namespaced = False
    schema = "V1ValidatingAdmissionPolicy"
    categories = ("api-extensions",)
    subresources = (StatusSubresource(),)
    generation = True
    columns = (
        tables.NAME,
        tables.column(
            "Validations",
            kind="integer",
            desc="Validations indicates the number of validation rules defined in this configuration",
        ),
        tables.column(
            "ParamKind", desc="ParamKind specifies the kind of resources used to parameterize this policy"
        ),
        tables.AGE,
    )

    def default(self, obj: Obj, creating: bool) -> None:
        validation.default_policy(obj)

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {}  # upstream's strategy: the status controller writes it

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validation.policy(obj)

    def cells(self, obj: Obj) -> list[Any]:
        spec = obj.get("spec") or {}
        kind = spec.get("paramKind")
        shown = f"{kind.get('apiVersion', '')}/{kind.get('kind', '')}" if isinstance(kind, dict) else UNSET
        return [obj["metadata"].get("name"), len(spec.get("validations") or []), shown, age(obj)]


class ValidatingAdmissionPolicyBindingKind(Kind):
    group = GROUP
    kind = "ValidatingAdmissionPolicyBinding"
    plural = "validatingadmissionpolicybindings"
    namespaced = False
    schema = "V1ValidatingAdmissionPolicyBinding"
    categories = ("api-extensions",)
    generation = True
    columns = (
        tables.NAME,
        tables.column(
            "PolicyName", desc="PolicyName indicates the policy definition which the policy binding binded to"
        ),
        tables.column(
            "ParamRef", desc="ParamRef indicates the param resource which sets the configration param"
        ),
        tables.AGE,
    )

    def default(self, obj: Obj, creating: bool) -> None:
        validation.default_binding(obj)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validation.binding(obj)

    def cells(self, obj: Obj) -> list[Any]:
        spec = obj.get("spec") or {}
        ref = spec.get("paramRef")
        shown = UNSET
        if isinstance(ref, dict):
            target = ref.get("name") or (
                format_label_selector(ref.get("selector")) if ref.get("selector") is not None else ""
            )
            shown = f"{ref['namespace']}/{target}" if ref.get("namespace") else target
        return [obj["metadata"].get("name"), spec.get("policyName", ""), shown, age(obj)]


POLICY = ValidatingAdmissionPolicyKind()
BINDING = ValidatingAdmissionPolicyBindingKind()
