"""Unknown-field detection for fieldValidation=Strict/Warn, and zero-value filling of fields upstream
always serializes (Go structs without omitempty), from the generated fields.json. Strict clients (the
Python client's models) reject objects that lack them."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

_LIST = re.compile(r"^(?:List|list)\[(.+)\]$")
_MAP = re.compile(r"^(?:Dict|dict)\[str, ?(.+)\]$|^dict\(str, ?(.+)\)$")


@cache
def _fields() -> dict[str, Any]:
    return json.loads(Path(__file__).with_name("fields.json").read_text())


def _walk(value: Any, type_name: str, path: str, out: list[str]) -> None:
    m = _LIST.match(type_name)
    if m:
        if isinstance(value, list):
            for i, item in enumerate(value):
                _walk(item, m.group(1), f"{path}[{i}]", out)
        return
    m = _MAP.match(type_name)
    if m:
        if isinstance(value, dict):
            inner = m.group(1) or m.group(2)
            for key, item in value.items():
                _walk(item, inner, f"{path}.{key}" if path else key, out)
        return
    fields = _fields()["types"].get(type_name)
    if fields is None or not isinstance(value, dict):
        return
    for key, item in value.items():
        child = f"{path}.{key}" if path else key
        if key not in fields:
            out.append(child)
        else:
            _walk(item, fields[key], child, out)


def unknown_fields(kind: str, obj: Any) -> list[str]:
    root = _fields()["roots"].get(kind)
    if root is None:
        return []
    out: list[str] = []
    _walk(obj, root, "", out)
    return out


_ZERO = {"str": "", "int": 0, "bool": False}


def _fill(value: Any, type_name: str) -> None:
    m = _LIST.match(type_name)
    if m:
        if isinstance(value, list):
            for item in value:
                _fill(item, m.group(1))
        return
    m = _MAP.match(type_name)
    if m:
        if isinstance(value, dict):
            inner = m.group(1) or m.group(2)
            for item in value.values():
                _fill(item, inner)
        return
    if not isinstance(value, dict):
        return
    data = _fields()
    fields = data["types"].get(type_name)
    if fields is None:
        return
    for name in data["required"].get(type_name, ()):
        if value.get(name) is None and fields.get(name) in _ZERO:
            value[name] = _ZERO[fields[name]]
    for key, item in value.items():
        if isinstance(item, dict | list) and key in fields:
            _fill(item, fields[key])


def fill_required(kind: str, obj: Any) -> None:
    root = _fields()["roots"].get(kind)
    if root is not None:
        _fill(obj, root)
