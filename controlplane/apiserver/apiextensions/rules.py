"""`x-kubernetes-validations`: CEL rules on a schema's nodes, checked against custom objects.

Each rule sees the node's value as `self`; a rule naming `oldSelf` is a transition rule, evaluated only on
update and only where the old object has a value at the same place. A failing rule is a FieldError at
the node (plus its `fieldPath`), with its `message`, the string its `messageExpression` yields, or
upstream's default `failed rule: <rule>`; its `reason` picks the error type (FieldValueInvalid by default,
with the schema's type as the value shown, as upstream). The CEL itself is controlplane/apiserver/cel.py;
`compile_errors` is the CRD-time check (a rule that does not compile makes the CRD a 422).

On update the rules that do not name oldSelf ratchet (`ratchet`, as schema.py's validation): a node whose
value equals the old object's at the same place is not checked again. Transition rules never ratchet:
they are the author's own statement about old and new.
"""

from __future__ import annotations

import json
import re
from typing import Any

from controlplane.apiserver import cel
from controlplane.apiserver.apiextensions.schema import same_json
from controlplane.apiserver.errors import FieldError

Obj = dict[str, Any]
VALIDATIONS = "x-kubernetes-validations"
_OLD_SELF = re.compile(r"\boldSelf\b")
_REASONS = {
    "FieldValueInvalid": "Invalid value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
}


def _walk_schema(schema: Any, path: str) -> list[tuple[Obj, str]]:
    """Every (node, schema path) under `schema` that holds rules."""
    if not isinstance(schema, dict):
        return []
    out = [(schema, path)] if schema.get(VALIDATIONS) else []
    for name, sub in (schema.get("properties") or {}).items():
        out += _walk_schema(sub, f"{path}.properties[{name}]")
    out += _walk_schema(schema.get("items"), f"{path}.items")
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        out += _walk_schema(extra, f"{path}.additionalProperties")
    return out


def skeleton(schema: Any) -> Obj | None:
    """The part of `schema` that leads to rules (None: no rules), so that checking an object walks only
    the fields that carry rules, not every field of it."""
    if not isinstance(schema, dict):
        return None
    out: Obj = {
        k: schema[k]
        for k in (VALIDATIONS, "type", "x-kubernetes-list-type", "x-kubernetes-list-map-keys")
        if k in schema
    }
    props = {
        name: sub
        for name, sub in ((n, skeleton(v)) for n, v in (schema.get("properties") or {}).items())
        if sub
    }
    if props:
        out["properties"] = props
    for key in ("items", "additionalProperties"):
        sub = skeleton(schema.get(key))
        if sub:
            out[key] = sub
    return out if (VALIDATIONS in out or props or "items" in out or "additionalProperties" in out) else None


def compile_errors(schema: Any, path: str) -> list[FieldError]:
    """A FieldError for each rule (or messageExpression) that does not compile, or a reason not allowed."""
    errors: list[FieldError] = []
    for node, here in _walk_schema(schema, path):
        for i, rule in enumerate(node.get(VALIDATIONS) or []):
            at = f"{here}.{VALIDATIONS}[{i}]"
            if not isinstance(rule, dict) or not rule.get("rule"):
                errors.append(FieldError("FieldValueRequired", f"{at}.rule", "Required value"))
                continue
            shown = json.dumps(rule, separators=(",", ":"))
            for field in ("rule", "messageExpression"):
                text = rule.get(field)
                if not text:
                    continue
                try:
                    cel.compile_expression(text)
                except cel.CelError as err:
                    errors.append(
                        FieldError("FieldValueInvalid", f"{at}.{field}", f"Invalid value: {shown}: {err}")
                    )
            reason = rule.get("reason")
            if reason and reason not in _REASONS:
                supported = ", ".join(json.dumps(r) for r in _REASONS)
                errors.append(
                    FieldError(
                        "FieldValueNotSupported",
                        f"{at}.reason",
                        f'Unsupported value: "{reason}": supported values: {supported}',
                    )
                )
    return errors


def check(
    value: Any, old: Any, schema: Obj, transitions: bool, path: str = "", ratchet: bool = False
) -> list[FieldError]:
    """Every failing rule for `value`: the rules not naming oldSelf (`transitions` False: on create and
    update, ratcheted against `old` with `ratchet`), or the transition rules against `old`, the object
    before an update (`transitions` True)."""
    errors: list[FieldError] = []
    _check(value, old, schema, path, transitions, errors, ratchet and not transitions)
    return errors


def _check(
    value: Any,
    old: Any,
    schema: Obj,
    path: str,
    transitions: bool,
    errors: list[FieldError],
    ratchet: bool = False,
) -> None:
    if value is None or not isinstance(schema, dict):
        return
    if ratchet and old is not None and same_json(value, old):
        return
    for rule in schema.get(VALIDATIONS) or []:
        if bool(_OLD_SELF.search(rule.get("rule", ""))) != transitions:
            continue
        failure = _evaluate(rule, value, old, schema, path)
        if failure is not None:
            errors.append(failure)
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    if isinstance(value, dict):
        for key, item in value.items():
            sub = props.get(key) or (extra if isinstance(extra, dict) else None)
            if sub:
                old_item = old.get(key) if isinstance(old, dict) else None
                _check(item, old_item, sub, f"{path}.{key}" if path else key, transitions, errors, ratchet)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            old_item = _old_item(old, item, i, schema)
            _check(item, old_item, schema["items"], f"{path}[{i}]", transitions, errors, ratchet)


def _old_item(old: Any, item: Any, index: int, schema: Obj) -> Any:
    """The old value a list item corresponds to: by its keys in a map list; none otherwise (upstream
    correlates only map lists' items)."""
    if (
        not isinstance(old, list)
        or schema.get("x-kubernetes-list-type") != "map"
        or not isinstance(item, dict)
    ):
        return None
    keys = schema.get("x-kubernetes-list-map-keys") or []
    wanted = {k: item.get(k) for k in keys}
    return next((o for o in old if isinstance(o, dict) and {k: o.get(k) for k in keys} == wanted), None)


def _evaluate(rule: Obj, value: Any, old: Any, schema: Obj, path: str) -> FieldError | None:
    text = rule.get("rule", "")
    transition = bool(_OLD_SELF.search(text))
    if transition and old is None:
        return None
    bindings = {"self": value}
    if transition:
        bindings["oldSelf"] = old
    field = path + (rule.get("fieldPath") or "")
    field = field.lstrip(".")
    shown = json.dumps(schema.get("type") or "object")
    try:
        ok = cel.evaluate(text, bindings)
    except cel.CelError as err:
        return FieldError("FieldValueInvalid", field, f"Invalid value: {shown}: {err}")
    if ok is True:
        return None
    message = rule.get("message") or f"failed rule: {' '.join(text.split())}"
    if rule.get("messageExpression"):
        try:
            produced = cel.evaluate(rule["messageExpression"], bindings)
            if isinstance(produced, str) and produced.strip():
                message = produced
        except cel.CelError:
            pass
    reason = rule.get("reason") or "FieldValueInvalid"
    if reason == "FieldValueInvalid":
        return FieldError(reason, field, f"Invalid value: {shown}: {message}")
    return FieldError(reason, field, f"{_REASONS.get(reason, 'Invalid value')}: {message}")


__all__ = ["check", "compile_errors", "skeleton"]
