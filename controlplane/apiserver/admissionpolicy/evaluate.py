"""One policy through one binding against one request, with one params object: upstream's
validating policy evaluation (match conditions, then variables, then each validation), pure (no I/O).
Each failed validation is a Decision carrying upstream's message (`message`, the `messageExpression`'s
result, or `failed expression: <expression>`) and reason (Invalid unless the validation names one); an
expression that errs is a failure only under failurePolicy Fail."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controlplane.apiserver import cel
from controlplane.apiserver.admissionpolicy.source import Policy, Validation

Obj = dict[str, Any]


@dataclass(frozen=True)
class Decision:
    message: str
    reason: str = "Invalid"
    expression_index: int = 0  # which of spec.validations failed (the audit annotation names it)


def _error(policy: Policy, message: str) -> list[Decision]:
    return [Decision(message)] if policy.failure_policy != "Ignore" else []


def _expression_error(expression: str, err: cel.CelError) -> str:
    return f"expression '{expression}' resulted in error: {err}"


def _message(validation: Validation, bindings: Obj) -> str:
    if validation.message_expression:
        try:
            text = cel.evaluate(validation.message_expression, bindings)
        except cel.CelError:
            text = None
        if isinstance(text, str) and text.strip() and "\n" not in text:
            return text.strip()
    if validation.message:
        return validation.message
    return f"failed expression: {validation.expression.strip()}"


def evaluate(policy: Policy, bindings: Obj) -> list[Decision]:
    """Denials for this request (empty: admitted, or not selected by the match conditions)."""
    failures = []
    for _name, expression in policy.match_conditions:  # as the webhooks' matcher: a false one wins
        try:
            result = cel.evaluate(expression, bindings)
        except cel.CelError as err:
            failures.append(_expression_error(expression, err))
            continue
        if result is not True:
            return []
    if failures:
        return _error(policy, failures[0] if len(failures) == 1 else "[" + ", ".join(failures) + "]")
    variables: Obj = {}
    scope = {**bindings, "variables": variables}
    for name, expression in policy.variables:
        try:
            variables[name] = cel.evaluate(expression, scope)
        except cel.CelError as err:
            return _error(policy, _expression_error(expression, err))
    out: list[Decision] = []
    for index, validation in enumerate(policy.validations):
        try:
            result = cel.evaluate(validation.expression, scope)
        except cel.CelError as err:
            out += _error(policy, _expression_error(validation.expression, err))
            continue
        if result is True:
            continue
        if result is not False:
            out += _error(policy, f"validation expression '{validation.expression}' must evaluate to bool")
            continue
        out.append(Decision(_message(validation, scope), validation.reason or "Invalid", index))
    return out
