"""additionalPrinterColumns as upstream's CRD table convertor evaluates them.

Upstream parses each column's jsonPath with client-go's JSONPath (filters such as
`.status.conditions[?(@.type=="Ready")].status`, wildcards, slices, recursive descent), takes the first
result and formats it per the column's type: a `string` column prints the value as kubectl's JSONPath
printer does (strings as they are, objects and lists as JSON, other scalars as Go's fmt prints them); the
other types keep the value only when it has that type; a `date` becomes an age. A column whose path does
not parse ends the list of columns (upstream keeps the columns before it and logs the error). Paths are
evaluated by jsonpath-ng's extended parser.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from jsonpath_ng import JSONPath
from jsonpath_ng.exceptions import JsonPathLexerError, JsonPathParserError
from jsonpath_ng.ext import parse

from controlplane.apiserver.meta import human_duration, now, parse_time

DEFAULT_DESCRIPTION = "Custom resource definition column (in JSONPath format): {}"


@dataclass(frozen=True)
class PrinterColumn:
    """One parsed additionalPrinterColumn."""

    name: str
    type: str
    priority: int
    description: str
    path: JSONPath


def parse_path(text: str) -> JSONPath:
    """A column's jsonPath (`.a.b[0]`, upstream wraps it in `{}`) as a jsonpath-ng expression; ValueError
    when it does not parse."""
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1].strip()
    if not body.startswith("$"):
        body = "$" + body
    try:
        return parse(body)
    except (JsonPathLexerError, JsonPathParserError, Exception) as err:  # the lexer raises bare Exception
        raise ValueError(f"unrecognized column definition {text!r}") from err


def compile_columns(definitions: list[Any]) -> list[PrinterColumn]:
    """The columns upstream's table convertor keeps: those before the first that does not parse."""
    out: list[PrinterColumn] = []
    for col in definitions:
        try:
            path = parse_path(str(col.get("jsonPath", "")))
        except ValueError:
            break
        out.append(
            PrinterColumn(
                name=col["name"],
                type=col.get("type", "string"),
                priority=int(col.get("priority", 0)),
                description=col.get("description") or DEFAULT_DESCRIPTION.format(col.get("jsonPath", "")),
                path=path,
            )
        )
    return out


def go_json(value: Any) -> str:
    """Go's json.Marshal of a decoded JSON value: sorted keys, compact, HTML characters escaped."""
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _go_print(value: Any) -> str:
    """Go's fmt.Fprint of a JSON scalar, as client-go's JSONPath printer writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    return str(value)


def _go_float(value: float) -> str:
    """Go's %v of a float64: the shortest digits, in exponent form below 1e-4 or from 1e6 on."""
    if value == 0:
        return "0"
    exact = Decimal(repr(value))
    sign, digits, _ = exact.normalize().as_tuple()
    exp = exact.adjusted()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    if exp < -4 or exp >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{'-' if sign else ''}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    return format(exact.normalize(), "f")


def cell(column: PrinterColumn, obj: Any) -> Any:
    """The cell of `column` for `obj`: None when the path finds nothing or the value has another type."""
    try:
        matches = column.path.find(obj)
    except Exception:  # a filter comparing values of other types finds nothing, as upstream's error does
        return None
    if not matches:
        return None
    value = matches[0].value
    if value is None:
        return None
    kind = column.type
    if kind == "string":
        return go_json(value) if isinstance(value, dict | list) else _go_print(value)
    if kind == "integer":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        return int(value) if isinstance(value, float) else None
    if kind == "number":
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if kind == "date" and isinstance(value, str):
        when = parse_time(value)
        return human_duration(now() - when) if when else "<invalid>"
    return None


__all__ = ["PrinterColumn", "cell", "compile_columns", "go_json", "parse_path"]
