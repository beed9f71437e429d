"""Unknown-field detection for fieldValidation=Strict/Warn, and zero-value filling of fields upstream
always serializes (Go structs without omitempty), from the generated fields.json. Strict clients (the
Python client's models) reject objects that lack them.

Type references are parsed once into a small table, because both walks run on every write.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

_LIST = re.compile(r"^(?:List|list)\[(.+)\]$")
_MAP = re.compile(r"^(?:Dict|dict)\[str, ?(.+)\]$|^dict\(str, ?(.+)\)$")
_ZERO: dict[str, Any] = {"str": "", "int": 0, "bool": False}


@dataclass
class _Type:
    shape: str  # "list", "map", "object" or "scalar"
    inner: _Type | None = None
    fields: dict[str, _Type] = field(default_factory=dict)
    # Zero values for required scalar fields (what Go always serializes).
    zeros: dict[str, Any] = field(default_factory=dict)


@cache
def _table() -> tuple[dict[str, str], dict[str, _Type]]:
    data = json.loads(Path(__file__).with_name("fields.json").read_text())
    types: dict[str, _Type] = {}

    def resolve(ref: str) -> _Type:
        if ref in types:
            return types[ref]
        m = _LIST.match(ref)
        if m:
            t = types[ref] = _Type("list")
            t.inner = resolve(m.group(1))
            return t
        m = _MAP.match(ref)
        if m:
            t = types[ref] = _Type("map")
            t.inner = resolve(m.group(1) or m.group(2))
            return t
        fields = data["types"].get(ref)
        if fields is None:
            t = types[ref] = _Type("scalar")
            return t
        t = types[ref] = _Type("object")
        for name, sub in fields.items():
            t.fields[name] = resolve(sub)
        for name in data["required"].get(ref, ()):
            if fields.get(name) in _ZERO:
                t.zeros[name] = _ZERO[fields[name]]
        return t

    roots = {kind: name for kind, name in data["roots"].items()}
    for name in roots.values():
        resolve(name)
    return roots, types


def _root(kind: str) -> _Type | None:
    roots, types = _table()
    name = roots.get(kind)
    return types.get(name) if name else None


def _walk(value: Any, t: _Type, path: str, out: list[str], prune: bool = False) -> None:
    if t.shape == "list":
        if isinstance(value, list) and t.inner is not None and t.inner.shape != "scalar":
            for i, item in enumerate(value):
                _walk(item, t.inner, f"{path}[{i}]", out, prune)
    elif t.shape == "map":
        if isinstance(value, dict) and t.inner is not None and t.inner.shape != "scalar":
            for key, item in value.items():
                _walk(item, t.inner, f"{path}.{key}" if path else key, out, prune)
    elif t.shape == "object" and isinstance(value, dict):
        for key, item in list(value.items()):
            sub = t.fields.get(key)
            if sub is None:
                out.append(f"{path}.{key}" if path else key)
                if prune:
                    del value[key]
            elif sub.shape != "scalar":
                _walk(item, sub, f"{path}.{key}" if path else key, out, prune)


def unknown_fields(kind: str, obj: Any) -> list[str]:
    root = _root(kind)
    if root is None:
        return []
    out: list[str] = []
    _walk(obj, root, "", out)
    return out


def prune_unknown(kind: str, obj: Any) -> list[str]:
    """Remove unknown fields (upstream's decoder drops them unless validation is Strict); their paths."""
    root = _root(kind)
    if root is None:
        return []
    out: list[str] = []
    _walk(obj, root, "", out, prune=True)
    return out


def _fill(value: Any, t: _Type) -> None:
    if t.shape in ("list", "map"):
        inner = t.inner
        if inner is None or inner.shape == "scalar":
            return
        items = value if isinstance(value, list) else value.values() if isinstance(value, dict) else ()
        for item in items:
            _fill(item, inner)
    elif t.shape == "object" and isinstance(value, dict):
        for name, zero in t.zeros.items():
            if value.get(name) is None:
                value[name] = zero
        for key, item in value.items():
            sub = t.fields.get(key)
            if sub is not None and sub.shape != "scalar" and isinstance(item, dict | list):
                _fill(item, sub)


def fill_required(kind: str, obj: Any) -> None:
    root = _root(kind)
    if root is not None:
        _fill(obj, root)
