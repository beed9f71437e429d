"""CEL for the API server: one place that compiles and evaluates Common Expression Language.

Kubernetes evaluates CEL in three places, all here: CustomResourceDefinition schemas'
`x-kubernetes-validations` (variables `self` and `oldSelf`), ValidatingAdmissionPolicy
(`object`, `oldObject`, `request`, `params`, `namespaceObject`, `authorizer`, `variables`) and
match conditions of admission webhooks. The language itself is cel-python's (a maintained, pure
Python implementation); this module adds what every caller needs around it: a compile cache keyed by
the expression (CRD rules and policies are compiled once, evaluated per request), JSON values in and
plain Python values out, and one error type whose text is what the API server reports.

Kubernetes' own CEL libraries (lists, regex, urls, quantity, ...) are functions registered in
`FUNCTIONS`; a caller that needs one adds it there, so every evaluator sees the same language.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import celpy
from celpy import celtypes

# Extra functions (name -> Python callable over celtypes values) every program may call.
FUNCTIONS: dict[str, Callable[..., Any]] = {}

_ENV = celpy.Environment()


class CelError(Exception):
    """A compile or evaluation failure; str(error) is the text the API server puts in its message."""


@dataclass(frozen=True)
class Program:
    expression: str
    _runner: Any

    def evaluate(self, bindings: Mapping[str, Any]) -> Any:
        """Evaluate with JSON-shaped `bindings` (dicts, lists, str, int, float, bool, None); returns
        a plain Python value. An evaluation error (a missing field, division by zero, no matching
        overload) raises CelError: upstream treats such a rule as failed with that error."""
        activation = {name: to_cel(value) for name, value in bindings.items()}
        try:
            result = self._runner.evaluate(activation)
        except celpy.CELEvalError as exc:
            raise CelError(_eval_message(exc)) from None
        if isinstance(result, celpy.CELEvalError):
            raise CelError(_eval_message(result))
        return to_python(result)


@lru_cache(maxsize=4096)
def compile_expression(expression: str) -> Program:
    """Parse and prepare `expression` once (cached: the same rule text is shared by every object of
    a CRD and every request a policy sees). A syntax error raises CelError with the parser's text."""
    try:
        ast = _ENV.compile(expression)
    except celpy.CELParseError as exc:
        raise CelError(f"compilation failed: {' '.join(str(exc).split())}") from None
    except Exception as exc:  # cel-python raises assorted errors for unsupported constructs
        raise CelError(f"compilation failed: {exc}") from None
    return Program(expression, _ENV.program(ast, functions=FUNCTIONS or None))


def evaluate(expression: str, bindings: Mapping[str, Any]) -> Any:
    return compile_expression(expression).evaluate(bindings)


def to_cel(value: Any) -> Any:
    if value is None:
        return None
    return celpy.json_to_cel(value)


def to_python(value: Any) -> Any:
    """celtypes values -> JSON-shaped Python (bool before int: BoolType is an int subclass)."""
    if value is None:
        return None
    if isinstance(value, celtypes.BoolType | bool):
        return bool(value)
    if isinstance(value, celtypes.IntType | celtypes.UintType):
        return int(value)
    if isinstance(value, celtypes.DoubleType | float):
        return float(value)
    if isinstance(value, celtypes.StringType | str):
        return str(value)
    if isinstance(value, Mapping):
        return {to_python(k): to_python(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_python(v) for v in value]
    if isinstance(value, int):
        return int(value)
    return value


def _eval_message(exc: Any) -> str:
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], str):
        return args[0]
    return str(exc)


# --- Kubernetes' CEL libraries (a subset; admission policies and CRD rules share them) ---------------
# k8s.io/apiserver/pkg/cel/library: lists (isSorted, sum, min, max, indexOf, lastIndexOf), regex (find,
# findAll) and the cel-go strings extension the API server enables (lowerAscii, upperAscii, trim, split,
# join, replace, indexOf, lastIndexOf on strings).


def _k8s_list(value: Any) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise CelError(f"no such overload: {type(value).__name__}")
    return list(value)


def _k8s_min_max(pick: Callable[..., Any]) -> Callable[[Any], Any]:
    def run(value: Any) -> Any:
        items = _k8s_list(value)
        if not items:
            raise CelError("min called on empty list" if pick is min else "max called on empty list")
        return pick(items)

    return run


def _k8s_sum(value: Any) -> Any:
    items = _k8s_list(value)
    if not items:
        return celtypes.IntType(0)
    total = items[0]
    for item in items[1:]:
        total = total + item
    return total


def _k8s_index_of(value: Any, item: Any) -> Any:
    if isinstance(value, str):
        return celtypes.IntType(str(value).find(str(item)))
    items = _k8s_list(value)
    return celtypes.IntType(items.index(item) if item in items else -1)


def _k8s_last_index_of(value: Any, item: Any) -> Any:
    if isinstance(value, str):
        return celtypes.IntType(str(value).rfind(str(item)))
    items = _k8s_list(value)
    for i in range(len(items) - 1, -1, -1):
        if items[i] == item:
            return celtypes.IntType(i)
    return celtypes.IntType(-1)


def _k8s_find(value: Any, pattern: Any) -> Any:
    import re

    found = re.search(str(pattern), str(value))
    return celtypes.StringType(found.group(0) if found else "")


def _k8s_find_all(value: Any, pattern: Any, limit: Any = -1) -> Any:
    import re

    found = [celtypes.StringType(m.group(0)) for m in re.finditer(str(pattern), str(value))]
    return celtypes.ListType(found if int(limit) < 0 else found[: int(limit)])


def _k8s_split(value: Any, sep: Any, limit: Any = -1) -> Any:
    parts = str(value).split(str(sep), int(limit) - 1 if int(limit) > 0 else -1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts] if int(limit) != 0 else [])


def _k8s_join(value: Any, sep: Any = "") -> Any:
    return celtypes.StringType(str(sep).join(str(v) for v in _k8s_list(value)))


def _k8s_guarded(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """A library function's failure (mixed types to sort, a bad regex) is an evaluation error."""

    def run(*args: Any) -> Any:
        try:
            return fn(*args)
        except CelError:
            raise
        except Exception as exc:
            raise CelError(f"{name}: {exc}") from None

    return run


_K8S_LIBRARY: dict[str, Callable[..., Any]] = {
    "isSorted": lambda v: celtypes.BoolType(_k8s_list(v) == sorted(_k8s_list(v))),
    "sum": _k8s_sum,
    "min": _k8s_min_max(min),
    "max": _k8s_min_max(max),
    "indexOf": _k8s_index_of,
    "lastIndexOf": _k8s_last_index_of,
    "find": _k8s_find,
    "findAll": _k8s_find_all,
    "lowerAscii": lambda v: celtypes.StringType(str(v).lower()),
    "upperAscii": lambda v: celtypes.StringType(str(v).upper()),
    "trim": lambda v: celtypes.StringType(str(v).strip()),
    "split": _k8s_split,
    "join": _k8s_join,
    "replace": lambda v, old, new, n=-1: celtypes.StringType(str(v).replace(str(old), str(new), int(n))),
}
FUNCTIONS.update({name: _k8s_guarded(name, fn) for name, fn in _K8S_LIBRARY.items()})
