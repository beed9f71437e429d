"""Kubernetes resource quantities ("100m", "1.5Gi", "2e3") as integers the scheduler can add and compare.

CPU is kept in millicores and everything else in whole units, both rounded up, as upstream's
Quantity.MilliValue()/Value() do: a request of "0.1m" still takes one millicore.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
            "P": Decimal("1e15"), "E": Decimal("1e18")}


def parse_quantity(text: str | int | float) -> Decimal:
    """The exact value of a quantity string; ValueError if it is not one."""
    if isinstance(text, int | float):
        return Decimal(str(text))
    s = str(text).strip()
    if not s:
        raise ValueError("empty quantity")
    for suffix, factor in _BINARY.items():
        if s.endswith(suffix):
            return _number(s[: -len(suffix)], text) * factor
    if s[-1] in "numkMGTPE":  # a trailing letter is always a suffix ("1e3" ends in a digit)
        return _number(s[:-1], text) * _DECIMAL[s[-1]]
    return _number(s, text)


def _number(s: str, original: object) -> Decimal:
    try:
        value = Decimal(s)
    except InvalidOperation:
        raise ValueError(f"invalid quantity {original!r}") from None
    if not value.is_finite():
        raise ValueError(f"invalid quantity {original!r}")
    return value


def milli_value(text: str | int | float) -> int:
    """Millicores (or milli-units), rounded up."""
    return math.ceil(parse_quantity(text) * 1000)


def value(text: str | int | float) -> int:
    """Whole units (bytes, pods, devices), rounded up."""
    return math.ceil(parse_quantity(text))


def resource_amount(name: str, text: str | int | float) -> int:
    """The integer the scheduler keeps for resource `name`: millicores for cpu, units otherwise."""
    return milli_value(text) if name == "cpu" else value(text)
