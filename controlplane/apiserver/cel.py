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
