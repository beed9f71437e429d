"""The ValidatingAdmissionPolicy admission plugin: every binding whose policy and match resources
select the request is evaluated with its params (the paramRef's object, or each object its selector
finds, from the watch cache); a failure is a refusal (Deny: upstream's `ValidatingAdmissionPolicy 'p'
with binding 'b' denied request: ...`, with the validation's reason and its code), a warning header
(Warn) or an audit annotation (Audit: `validation.policy.admission.k8s.io/validation_failure` on the
request's audit event, upstream's key and JSON)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from controlplane.apiserver.admissionpolicy.evaluate import Decision, evaluate
from controlplane.apiserver.admissionpolicy.source import Binding, Policy, PolicySource
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.webhooks import context
from controlplane.apiserver.webhooks.dispatch import Invocation, invocation

if TYPE_CHECKING:
    from controlplane.apiserver.admission import AdmissionRequest
    from controlplane.storage.cache import WatchCache

Obj = dict[str, Any]

# The audit annotation an Audit action adds (upstream's ValidationFailureValue list, JSON).
VALIDATION_FAILURE = "validation.policy.admission.k8s.io/validation_failure"
_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}
NO_PARAMS = "no params found for policy binding with `Deny` parameterNotFoundAction"


def _params(policy: Policy, binding: Binding, inv: Invocation) -> list[Obj | None] | Decision:
    """The params objects to evaluate with ([None] for a policy without paramKind); a Decision when
    none may be found or the configuration is broken."""
    if policy.param_kind is None:
        return [None]
    ref = binding.param_ref
    if ref is None:
        return Decision(
            f"failed to configure binding: paramRef is required for policy with paramKind {policy.param_kind[1]}"
        )
    api_version, kind_name = policy.param_kind
    kind = inv.kinds.by_kind(api_version, kind_name) if inv.kinds is not None else None
    if kind is None:
        return Decision(
            f"failed to configure policy: failed to find resource referenced by paramKind: '{api_version}, Kind={kind_name}'"
        )
    namespace = ""
    if kind.namespaced:
        namespace = ref.namespace or inv.namespace
    found: list[Obj | None]
    if ref.name:
        cached = inv.cache.get(kind.key(namespace, ref.name))
        found = [cached.obj] if cached is not None else []
    else:
        sel = ref.selector
        found = [
            c.obj
            for c in inv.cache.list(kind.bucket, kind.prefix(namespace))
            if sel is not None and sel.matches((c.view.get("metadata") or {}).get("labels"))
        ]
    if not found:
        return Decision(f"failed to configure binding: {NO_PARAMS}") if ref.not_found == "Deny" else []
    return found


class ValidatingAdmissionPolicyPlugin:
    name = "ValidatingAdmissionPolicy"
    connects = True  # policies matching CONNECT judge pods/exec, attach and portforward

    def __init__(self) -> None:
        self.source = PolicySource()

    def reviews_deletes(self, cache: WatchCache) -> bool:
        return bool(self.source.pairs(cache))

    async def review_delete(self, request: AdmissionRequest) -> None:
        self.validate(request)

    def validate(self, request: AdmissionRequest) -> None:
        pairs = self.source.pairs(request.registry.cache)
        if not pairs:
            return
        inv = invocation(request)
        labels = inv.namespace_labels() if inv.namespace else None
        denied: list[tuple[Policy, Binding, Decision]] = []
        audited: list[Obj] = []
        base: Obj | None = None
        for policy, binding in pairs:
            if policy.match is None or not policy.match.matches(inv.attrs, labels):
                continue
            if binding.match is not None and not binding.match.matches(
                inv.attrs, labels, rules_required=False
            ):
                continue
            if base is None:
                view = inv.view()  # the objects in the request's own version
                base = {
                    "object": view.obj if inv.operation != "DELETE" else None,
                    "oldObject": view.old,
                    "request": inv.request_binding(context.is_dry_run()),
                    "namespaceObject": inv.namespace_object(),
                }
            params = _params(policy, binding, inv)
            if isinstance(params, Decision):
                # A configuration error (upstream's addConfigError): refused under failurePolicy Fail,
                # whatever the binding's validationActions, passed over under Ignore.
                if policy.failure_policy != "Ignore":
                    denied.append((policy, binding, params))
                continue
            decisions: list[Decision] = []
            for param in params:
                decisions += evaluate(policy, {**base, "params": param})
            for decision in decisions:
                if "Audit" in binding.actions:
                    audited.append(
                        {
                            "message": decision.message,
                            "policy": policy.name,
                            "binding": binding.name,
                            "expressionIndex": decision.expression_index,
                            "validationActions": list(binding.actions),
                        }
                    )
                if "Deny" in binding.actions:
                    denied.append((policy, binding, decision))
                if "Warn" in binding.actions:
                    context.add_warning(
                        f"Validation failed for ValidatingAdmissionPolicy '{policy.name}' with binding "
                        f"'{binding.name}': {decision.message}"
                    )
        if audited:
            context.add_audit_annotation(VALIDATION_FAILURE, json.dumps(audited, separators=(",", ":")))
        if denied:
            raise _refusal(request, *denied[0])


def _refusal(request: AdmissionRequest, policy: Policy, binding: Binding, decision: Decision) -> ApiError:
    """admission.NewForbidden with the decision's reason and its code."""
    text = f"ValidatingAdmissionPolicy '{policy.name}' with binding '{binding.name}' denied request: {decision.message}"
    kind = request.kind
    resource = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
    name = request.name
    message = f'{resource} "{name}" is forbidden: {text}' if name else f"{resource} is forbidden: {text}"
    details: Obj = {"name": name, "kind": kind.plural, "causes": [{"message": text}]}
    if kind.group:
        details["group"] = kind.group
    reason = decision.reason or "Invalid"
    return ApiError(_CODES.get(reason, 422), reason, message, details)
