"""Kubernetes resource quantities ("100m", "1.5Gi", "2e3"), parsed and printed as upstream's
`resource.Quantity` does.

One parser for every component: the API server rejects what upstream rejects (with upstream's error
texts) and stores the canonical form (`0.5` -> `500m`, `1.5Gi` -> `1536Mi`), the scheduler and the agent
read the same numbers. Values are exact `Decimal`s; conversions to integers round up, as upstream's
`Value()`/`MilliValue()` do (a request of "0.1m" still takes one millicore), and stay exact where Go's
int64 would overflow. Exponents beyond 10^±1000 are refused (ErrNumeric), so no quantity can cost more
than microseconds to turn into an integer; upstream accepts them, and nobody writes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_UP, Context, Decimal, InvalidOperation, localcontext
from functools import lru_cache

FORMAT_PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
FORMAT_ERROR = f"quantities must match the regular expression '{FORMAT_PATTERN}'"
NUMERIC_ERROR = "unable to parse numeric part of quantity"
SUFFIX_ERROR = "unable to parse quantity's suffix"

DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_EXPONENT = {e: s for s, e in _DECIMAL.items()}
_BINARY_BY_EXPONENT = {e: s for s, e in _BINARY.items()}
_MAX_EXPONENT = 1000
_NANO = Decimal("1e-9")
# Enough digits for any quantity an int64 mantissa with a 1e-9 scale can hold, and then some.
_CONTEXT = Context(prec=200, Emax=_MAX_EXPONENT * 2, Emin=-_MAX_EXPONENT * 2)


class QuantityError(ValueError):
    """Not a quantity; the message is upstream's (ErrFormatWrong, ErrNumeric or ErrSuffix)."""


@dataclass(frozen=True)
class Quantity:
    """An exact amount and the format it prints in (from the suffix it was written with)."""

    amount: Decimal
    format: str = DECIMAL_SI

    @classmethod
    def parse(cls, text: str | int | float | Quantity) -> Quantity:
        if isinstance(text, Quantity):
            return text
        if isinstance(text, bool):
            raise QuantityError(FORMAT_ERROR)
        if isinstance(text, int | float):
            text = repr(text) if isinstance(text, float) else str(text)
        if not isinstance(text, str):
            raise QuantityError(FORMAT_ERROR)
        return _parse(text)

    def __str__(self) -> str:
        return _canonical(self)

    def milli_value(self) -> int:
        """Thousandths (millicores for cpu), rounded up."""
        return _to_int(self.amount.scaleb(3))

    def value(self) -> int:
        """Whole units (bytes, pods, devices), rounded up."""
        return _to_int(self.amount)

    def is_zero(self) -> bool:
        return self.amount == 0

    def sign(self) -> int:
        return (self.amount > 0) - (self.amount < 0)


def _split(text: str) -> tuple[bool, str, str, str, str]:
    """upstream's parseQuantityString: (positive, value, numerator, denominator, suffix)."""
    positive = True
    pos, end = 0, len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] == "+"
        pos += 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    if pos >= end:
        return positive, text, num, "", ""
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value = text[:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(FORMAT_ERROR)
    return positive, value, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, str] | None:
    """(base, exponent, format) of a suffix, or None if it is not one."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix], DECIMAL_SI
    if suffix in _BINARY:
        return 2, _BINARY[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[0] in "+-" else digits
        if body and all(c in _DIGITS for c in body):
            return 10, int(digits), DECIMAL_EXPONENT
    return None


@lru_cache(maxsize=4096)
def _parse(text: str) -> Quantity:
    """Cached: a cluster uses a few hundred distinct quantities, read on every pod and node update."""
    text = text.strip()
    if not text:
        raise QuantityError(FORMAT_ERROR)
    _, value, _, _, suffix = _split(text)
    interpreted = _interpret(suffix)
    if interpreted is None:
        raise QuantityError(SUFFIX_ERROR)
    base, exponent, fmt = interpreted
    if abs(exponent) > _MAX_EXPONENT:
        raise QuantityError(NUMERIC_ERROR)
    with localcontext(_CONTEXT):
        try:
            amount = Decimal(value if value not in ("", "+", "-", ".", "+.", "-.") else "0")
        except InvalidOperation:
            raise QuantityError(NUMERIC_ERROR) from None
        if not amount.is_finite():
            raise QuantityError(NUMERIC_ERROR)
        amount = amount.scaleb(exponent) if base == 10 else amount * (2**exponent)
        if amount != 0:
            # upstream rounds any non-zero amount up to its smallest unit, 1n: ask for some, get some.
            magnitude = (
                abs(amount).quantize(_NANO, rounding=ROUND_UP) if abs(amount).adjusted() < 40 else abs(amount)
            )
            if fmt == BINARY_SI and magnitude > INT64_MAX:
                magnitude = Decimal(INT64_MAX)
            if fmt == BINARY_SI and 0 < magnitude < 1:
                fmt = DECIMAL_SI
            amount = magnitude.copy_sign(amount)
    return Quantity(amount.normalize(_CONTEXT) if amount else Decimal(0), fmt)


def _to_int(amount: Decimal) -> int:
    with localcontext(_CONTEXT):
        return int(amount.to_integral_value(rounding=ROUND_CEILING if amount > 0 else ROUND_UP))


def _canonical(q: Quantity) -> str:
    """upstream's Quantity.String(): the shortest exact form in the quantity's format."""
    amount = q.amount
    if amount == 0:
        return "0"
    fmt = q.format
    if fmt == BINARY_SI:
        if -1024 < amount < 1024 or amount != amount.to_integral_value():
            fmt = DECIMAL_SI
        else:
            number = int(amount)
            exponent = 0
            while number % 1024 == 0 and exponent < 6:
                number //= 1024
                exponent += 1
            return f"{number}{_BINARY_BY_EXPONENT.get(exponent * 10, '')}"
    sign, digits, exponent = amount.normalize(_CONTEXT).as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits)))
    # The exponent goes to a multiple of 3 (upward digits move into the mantissa), as upstream.
    shift = exponent % 3
    mantissa *= 10**shift
    exponent -= shift
    text = f"{'-' if sign else ''}{mantissa}"
    if fmt == DECIMAL_EXPONENT:
        return text + (f"e{exponent}" if exponent else "")
    if exponent in _DECIMAL_BY_EXPONENT:
        return text + _DECIMAL_BY_EXPONENT[exponent]
    return text + f"e{exponent}"


def parse_quantity(text: str | int | float) -> Decimal:
    """The exact value of a quantity; QuantityError (a ValueError) if it is not one."""
    return Quantity.parse(text).amount


def canonical(text: str | int | float) -> str:
    """How upstream stores and serves the quantity: `0.5` -> `500m`, `1.5Gi` -> `1536Mi`."""
    return str(Quantity.parse(text))


@lru_cache(maxsize=4096)
def _milli(text: str) -> int:
    return _parse(text).milli_value()


@lru_cache(maxsize=4096)
def _whole(text: str) -> int:
    return _parse(text).value()


def milli_value(text: str | int | float) -> int:
    """Thousandths of the quantity (millicores for cpu), rounded up."""
    return _milli(text) if type(text) is str else Quantity.parse(text).milli_value()


def value(text: str | int | float) -> int:
    """Whole units (bytes, pods, devices), rounded up."""
    return _whole(text) if type(text) is str else Quantity.parse(text).value()


def format_ki(n_bytes: int) -> str:
    """A byte count as upstream's node status writes memory: whole KiB."""
    return f"{n_bytes // 1024}Ki"


def divide_round_up(amount: Decimal, divisor: Decimal) -> int:
    """amount / divisor rounded up (toward +infinity), as upstream's resourceFieldRef divisors are."""
    return math.ceil(amount / divisor)
