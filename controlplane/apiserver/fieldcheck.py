"""Unknown-field detection for fieldValidation=Strict/Warn, from the generated fields.json."""

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
