"""The taints a node registers with (upstream's registerWithTaints and --register-with-taints).

The flag takes upstream's syntax, `key=value:Effect,key2:Effect` (pkg/util/taints ParseTaint); the config
file takes v1.Taint objects. Both are checked as upstream checks them (a qualified-name key, a label
value, one of the three effects) so that a bad taint stops the agent at start instead of making the
Node's registration fail later.
"""

from __future__ import annotations

from typing import Any

from kubeclient.names import label_value, qualified_name

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class TaintError(ValueError):
    pass


def _effect(effect: str, spec: str) -> str:
    if effect not in EFFECTS:
        raise TaintError(f"invalid taint effect: {effect}, unsupported taint effect")
    return effect


def _checked(key: str, value: str, effect: str, spec: str) -> dict[str, str]:
    problems = qualified_name(key) + (label_value(value) if value else [])
    if problems:
        raise TaintError(f"invalid taint spec: {spec}, {'; '.join(problems)}")
    if not effect:
        # upstream parses a taint without an effect, and the API server then refuses the Node
        raise TaintError(f"invalid taint spec: {spec}, an effect is required")
    taint = {"key": key, "effect": effect}
    if value:
        taint["value"] = value
    return taint


def parse_taint(spec: str) -> dict[str, str]:
    """`key=value:Effect` or `key:Effect`."""
    parts = spec.split(":")
    if len(parts) != 2:
        raise TaintError(f"invalid taint spec: {spec}")
    effect = _effect(parts[1], spec)
    key, *rest = parts[0].split("=")
    if len(rest) > 1:
        raise TaintError(f"invalid taint spec: {spec}")
    return _checked(key, rest[0] if rest else "", effect, spec)


def parse_taints(text: str) -> list[dict[str, str]]:
    """The flag's comma-separated list (empty: none)."""
    return [parse_taint(part) for part in text.split(",") if part]


def taints_from_config(value: Any) -> list[dict[str, str]]:
    """registerWithTaints: a list of v1.Taint (key, value, effect; timeAdded is the API server's)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise TaintError("must be a list of taints (key, value, effect)")
    taints = []
    for item in value:
        unknown = sorted(set(item) - {"key", "value", "effect", "timeAdded"})
        if unknown:
            raise TaintError(f'unknown field "{unknown[0]}"')
        key, val, effect = str(item.get("key", "")), str(item.get("value") or ""), str(item.get("effect", ""))
        spec = f"{key}={val}:{effect}" if val else f"{key}:{effect}"
        if effect:
            _effect(effect, spec)
        taints.append(_checked(key, val, effect, spec))
    return taints
