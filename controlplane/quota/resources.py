"""Resource lists (`{"pods": "2", "requests.cpu": "500m"}`) as exact quantities, and upstream's
arithmetic on them (quota/v1/resources.go): Add keeps the first operand's format, Mask keeps named
resources, LessThanOrEqual reports the names that exceed, prettyPrint sorts `name=value` pairs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kubeclient.quantity import Quantity, QuantityError

Resources = dict[str, Quantity]

ZERO = Quantity(Decimal(0))
ONE = Quantity(Decimal(1))


def parse(values: Mapping[str, Any] | None) -> Resources:
    """A stored resource list as quantities; values that are not quantities are left out."""
    out: Resources = {}
    for name, text in (values or {}).items():
        try:
            out[name] = Quantity.parse(text)
        except QuantityError:
            continue
    return out


def dump(values: Resources) -> dict[str, str]:
    return {name: str(q) for name, q in sorted(values.items())}


def plus(a: Quantity, b: Quantity) -> Quantity:
    """Quantity.Add: the first operand's format, unless it is zero (then the second's)."""
    return Quantity(a.amount + b.amount, b.format if a.amount == 0 else a.format)


def minus(a: Quantity, b: Quantity) -> Quantity:
    return Quantity(a.amount - b.amount, b.format if a.amount == 0 else a.format)


def add(a: Resources, b: Resources) -> Resources:
    out = dict(a)
    for name, q in b.items():
        out[name] = plus(out[name], q) if name in out else q
    return out


def subtract_non_negative(a: Resources, b: Resources) -> Resources:
    """SubtractWithNonNegativeResult: a - b, floored at zero, for the names of a."""
    out: Resources = {}
    for name, q in a.items():
        diff = minus(q, b[name]) if name in b else q
        out[name] = diff if diff.amount > 0 else Quantity(Decimal(0), q.format)
    return out


def maximum(a: Resources, b: Resources) -> Resources:
    out = dict(a)
    for name, q in b.items():
        if name not in out or q.amount > out[name].amount:
            out[name] = q
    return out


def mask(values: Resources, names: Iterable[str]) -> Resources:
    keep = set(names)
    return {n: q for n, q in values.items() if n in keep}


def remove_zeros(values: Resources) -> Resources:
    return {n: q for n, q in values.items() if not q.is_zero()}


def negative(values: Resources) -> list[str]:
    return sorted(n for n, q in values.items() if q.amount < 0)


def equal(a: Resources, b: Resources) -> bool:
    return a.keys() == b.keys() and all(a[n].amount == b[n].amount for n in a)


def exceeded(values: Resources, hard: Resources) -> list[str]:
    """LessThanOrEqual's second answer: the names of `values` above their `hard` value."""
    return sorted(n for n, q in values.items() if n in hard and q.amount > hard[n].amount)


def pretty(values: Resources) -> str:
    return ",".join(f"{n}={values[n]}" for n in sorted(values))
