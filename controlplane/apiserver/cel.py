"""CEL for the API server: one place that compiles and evaluates Common Expression Language.

Kubernetes evaluates CEL in three places, all here: CustomResourceDefinition schemas'
`x-kubernetes-validations` (variables `self` and `oldSelf`), ValidatingAdmissionPolicy
(`object`, `oldObject`, `request`, `params`, `namespaceObject`, `variables`) and match conditions of
admission webhooks. The language is common-expression-language's (Python bindings of the Rust
cel-interpreter: about 40 us an evaluation here, where the pure-Python cel-python took 1-2 ms, which
made a CRD with one rule half as fast to write as a ConfigMap); this module adds what every caller
needs around it: a compile cache keyed by the expression (CRD rules and policies are compiled once,
evaluated per request), JSON values in and out, and one error type whose text is what the API server
reports, in cel-go's words where they differ.

Kubernetes' own CEL libraries (lists, regex, strings) are functions registered in `FUNCTIONS`
(callable as `x.f(...)` or `f(x, ...)`); a caller that needs another adds it there, so every
evaluator sees the same language. A program gets only the functions its expression names.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import cel as _cel

# The bindings log a library function's failure (with its arguments' text) before raising it; the error
# reaches the client in the API's answer, and object data must stay out of the server's log.
logging.getLogger("cel").setLevel(logging.CRITICAL)

# Extra functions (name -> Python callable over plain values) every program may call.
FUNCTIONS: dict[str, Callable[..., Any]] = {}


class CelError(Exception):
    """A compile or evaluation failure; str(error) is the text the API server puts in its message."""


@dataclass(frozen=True)
class Program:
    expression: str
    _program: Any
    _functions: tuple[str, ...]

    def evaluate(self, bindings: Mapping[str, Any]) -> Any:
        """Evaluate with JSON-shaped `bindings` (dicts, lists, str, int, float, bool, None); returns
        a plain Python value. An evaluation error (a missing field, division by zero, no matching
        overload) raises CelError: upstream treats such a rule as failed with that error."""
        context = _cel.Context(dict(bindings))
        for name in self._functions:
            context.add_function(name, FUNCTIONS[name])
        try:
            return self._program.execute(context)
        except CelError:
            raise
        except Exception as exc:  # the bindings raise KeyError, TypeError, ZeroDivisionError, ...
            raise CelError(_eval_message(exc)) from None


@lru_cache(maxsize=4096)
def compile_expression(expression: str) -> Program:
    """Parse and prepare `expression` once (cached: the same rule text is shared by every object of
    a CRD and every request a policy sees). A syntax error raises CelError with the parser's text."""
    try:
        program = _cel.compile(expression)
    except Exception as exc:
        text = str(exc).removeprefix(f"Failed to parse expression '{expression}': ")
        raise CelError(f"compilation failed: {' '.join(text.split())}") from None
    used = (program.references() or {}).get("functions") or []
    return Program(expression, program, tuple(sorted(n for n in set(used) if n in FUNCTIONS)))


def evaluate(expression: str, bindings: Mapping[str, Any]) -> Any:
    return compile_expression(expression).evaluate(bindings)


def _eval_message(exc: BaseException) -> str:
    """cel-go's wording for the common failures (upstream's messages quote it)."""
    if isinstance(exc, KeyError):
        return f"no such key: {exc.args[0] if exc.args else ''}"
    if isinstance(exc, ZeroDivisionError):
        return "division by zero"
    text = str(exc.args[0]) if exc.args and isinstance(exc.args[0], str) else str(exc)
    wrapped = re.search(
        r"Python function call failed: (?:CelError: )?(.*?)(?:\. Check function arguments.*)?$", text
    )
    if wrapped:  # a library function of ours raised: its own message
        return wrapped.group(1)
    if isinstance(exc, TypeError) and text.startswith("No such overload"):
        return "no such overload"
    return text.split(". ")[0] if isinstance(exc, TypeError) else text


# --- Kubernetes' CEL libraries (a subset; admission policies and CRD rules share them) ---------------
# k8s.io/apiserver/pkg/cel/library: lists (isSorted, sum, min, max, indexOf, lastIndexOf), regex (find,
# findAll) and the cel-go strings extension the API server enables (lowerAscii, upperAscii, trim, split,
# join, replace, indexOf, lastIndexOf on strings).


def _k8s_list(value: Any) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise CelError(f"no such overload: {type(value).__name__}")
    return list(value)


def _k8s_min_max(pick: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        # `list.min()` (Kubernetes' lists library) and CEL's own variadic `max(1, 2, 3)`.
        items = _k8s_list(args[0]) if len(args) == 1 and isinstance(args[0], list | tuple) else list(args)
        if not items:
            raise CelError("min called on empty list" if pick is min else "max called on empty list")
        return pick(items)

    return run


def _k8s_sum(value: Any) -> Any:
    items = _k8s_list(value)
    if not items:
        return 0
    total = items[0]
    for item in items[1:]:
        total = total + item
    return total


def _k8s_index_of(value: Any, item: Any) -> Any:
    if isinstance(value, str):
        return int(str(value).find(str(item)))
    items = _k8s_list(value)
    return int(items.index(item) if item in items else -1)


def _k8s_last_index_of(value: Any, item: Any) -> Any:
    if isinstance(value, str):
        return int(str(value).rfind(str(item)))
    items = _k8s_list(value)
    for i in range(len(items) - 1, -1, -1):
        if items[i] == item:
            return int(i)
    return -1


def _k8s_find(value: Any, pattern: Any) -> Any:
    found = re.search(str(pattern), str(value))
    return str(found.group(0) if found else "")


def _k8s_find_all(value: Any, pattern: Any, limit: Any = -1) -> Any:
    found = [str(m.group(0)) for m in re.finditer(str(pattern), str(value))]
    return list(found if int(limit) < 0 else found[: int(limit)])


def _k8s_split(value: Any, sep: Any, limit: Any = -1) -> Any:
    parts = str(value).split(str(sep), int(limit) - 1 if int(limit) > 0 else -1)
    return list([str(p) for p in parts] if int(limit) != 0 else [])


def _k8s_join(value: Any, sep: Any = "") -> Any:
    return str(str(sep).join(str(v) for v in _k8s_list(value)))


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
    "isSorted": lambda v: bool(_k8s_list(v) == sorted(_k8s_list(v))),
    "sum": _k8s_sum,
    "min": _k8s_min_max(min),
    "max": _k8s_min_max(max),
    "indexOf": _k8s_index_of,
    "lastIndexOf": _k8s_last_index_of,
    "find": _k8s_find,
    "findAll": _k8s_find_all,
    "lowerAscii": lambda v: str(str(v).lower()),
    "upperAscii": lambda v: str(str(v).upper()),
    "trim": lambda v: str(str(v).strip()),
    "split": _k8s_split,
    "join": _k8s_join,
    "replace": lambda v, old, new, n=-1: str(str(v).replace(str(old), str(new), int(n))),
}
FUNCTIONS.update({name: _k8s_guarded(name, fn) for name, fn in _K8S_LIBRARY.items()})
