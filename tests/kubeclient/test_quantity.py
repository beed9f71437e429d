"""Quantities as upstream's resource.Quantity parses and prints them (values from upstream's
quantity_test.go and `kubectl get -o yaml` of objects created with these values)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubeclient.quantity import (
    FORMAT_ERROR,
    SUFFIX_ERROR,
    Quantity,
    QuantityError,
    canonical,
    milli_value,
    value,
)


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("0.5", "500m"),
        ("1.5Gi", "1536Mi"),
        ("1536Mi", "1536Mi"),
        ("100m", "100m"),
        ("2000", "2k"),
        ("1500", "1500"),
        ("1.5k", "1500"),
        ("0.1m", "100u"),
        ("1Ki", "1Ki"),
        ("0.5Ki", "512"),
        ("-1Gi", "-1Gi"),
        ("1e3", "1e3"),
        ("1000m", "1"),
        ("0001", "1"),
        ("1.0", "1"),
        ("0", "0"),
        ("0.0000000001", "1n"),
        ("1.G", "1G"),
        ("  2  ", "2"),
        ("1025Ki", "1025Ki"),
        ("1024", "1024"),
        (1, "1"),
        (1.5, "1500m"),
    ],
)
def test_canonical_form_is_upstreams(text: str, stored: str) -> None:
    assert canonical(text) == stored


@pytest.mark.parametrize(
    ("text", "milli", "whole"),
    [("0.1m", 1, 1), ("1.5", 1500, 2), ("250m", 250, 1), ("1Mi", 1048576000, 1048576)],
)
def test_integer_values_round_up(text: str, milli: int, whole: int) -> None:
    assert milli_value(text) == milli
    assert value(text) == whole


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lots", FORMAT_ERROR),
        ("", FORMAT_ERROR),
        ("1ki", SUFFIX_ERROR),
        ("1e", SUFFIX_ERROR),
        ("1 Gi", FORMAT_ERROR),
        (True, FORMAT_ERROR),
    ],
)
def test_bad_quantities_get_upstreams_messages(text: object, message: str) -> None:
    with pytest.raises(QuantityError) as err:
        Quantity.parse(text)  # type: ignore[arg-type]
    assert str(err.value) == message


def test_huge_values_stay_exact_and_absurd_exponents_are_refused() -> None:
    assert milli_value("1E") == 10**21  # exact where Go's int64 would overflow
    assert value("8Ei") == 2**63 - 1  # BinarySI amounts are capped at int64, as upstream caps them
    with pytest.raises(QuantityError):
        Quantity.parse("1e100000000")


@given(
    st.integers(min_value=-(2**62), max_value=2**62), st.sampled_from(["", "m", "k", "Ki", "Mi", "Gi", "M"])
)
def test_canonical_form_parses_back_to_the_same_amount(number: int, suffix: str) -> None:
    q = Quantity.parse(f"{number}{suffix}")
    assert Quantity.parse(str(q)).amount == q.amount


@given(st.text(max_size=30))
def test_any_text_parses_or_raises_quantity_error(text: str) -> None:
    try:
        q = Quantity.parse(text)
    except QuantityError:
        return
    assert isinstance(q.amount, Decimal)
    str(q)
