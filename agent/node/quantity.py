"""Kubernetes resource quantities ("100Mi", "500m", "2", "1.5Gi", "10%") as numbers.

Only what the agent needs: reading reservations, eviction thresholds and container resources, and
writing capacity the way upstream writes it (memory in Ki).
"""

from __future__ import annotations

import re
from decimal import Decimal

_SUFFIX = {
    "": 1,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(?:[eE]([+-]?\d+))?([a-zA-Z]*)$")


class QuantityError(ValueError):
    pass


def parse_quantity(value: str | int | float) -> Decimal:
    if isinstance(value, int | float):
        return Decimal(str(value))
    m = _QUANTITY.match(value.strip())
    if not m or m.group(3) not in _SUFFIX:
        raise QuantityError(f"invalid quantity {value!r}")
    number = Decimal(m.group(1))
    if m.group(2):
        number *= Decimal(10) ** int(m.group(2))
    return number * Decimal(_SUFFIX[m.group(3)])


def milli_cpu(value: str | int | float) -> int:
    """CPU in millicores, rounded up as upstream does."""
    return int((parse_quantity(value) * 1000).to_integral_value(rounding="ROUND_CEILING"))


def to_bytes(value: str | int | float) -> int:
    return int(parse_quantity(value).to_integral_value(rounding="ROUND_CEILING"))


def threshold_bytes(value: str, capacity: int) -> int:
    """An eviction threshold: an absolute quantity or a percentage of capacity."""
    value = value.strip()
    if value.endswith("%"):
        return int(Decimal(value[:-1]) / 100 * capacity)
    return to_bytes(value)


def format_ki(n_bytes: int) -> str:
    return f"{n_bytes // 1024}Ki"
