"""The one renderer of every component's /metrics, and the host:port flag parser of its endpoints."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from kubeclient.exposition import render
from kubeclient.httpserve import split_address


def test_render_writes_no_created_series_and_no_family_without_samples() -> None:
    a, b = CollectorRegistry(), CollectorRegistry()
    Counter("things", "Things done.", registry=a).inc()
    Histogram("waits_seconds", "Waits.", ["kind"], buckets=(1.0,), registry=a).labels("x").observe(0.5)
    Counter("labelled", "Never used.", ["name"], registry=b)  # no child: upstream writes nothing
    text = render([a, b]).decode()
    assert "_created" not in text
    assert "labelled" not in text
    assert "# TYPE things_total counter\nthings_total 1.0\n" in text
    assert 'waits_seconds_bucket{kind="x",le="1.0"} 1.0' in text


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("0.0.0.0:8080", ("0.0.0.0", 8080)),
        (":9153", ("0.0.0.0", 9153)),
        ("[::1]:8181", ("::1", 8181)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
    ],
)
def test_split_address(address: str, expected: tuple[str, int]) -> None:
    assert split_address(address) == expected


@pytest.mark.parametrize("address", ["8080", "host:", "host:http"])
def test_split_address_refuses_what_is_not_host_port(address: str) -> None:
    with pytest.raises(ValueError, match="want host:port"):
        split_address(address)
