"""The batched histogram against prometheus_client's Histogram: the same observations, one at a time
there and in batches here, render to the same /metrics text (values on the bucket bounds included)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.parser import text_string_to_metric_families

from controlplane.scheduler.batchhistogram import BatchHistogram
from controlplane.scheduler.metrics import exponential_buckets
from kubeclient.exposition import render

BOUNDS = exponential_buckets(0.00001, 1.5, 20)
NAME, HELP = "scheduler_plugin_execution_duration_seconds", "[ALPHA] Duration for running a plugin."
LABELS = ("plugin", "extension_point", "status")

VALUES = st.one_of(st.sampled_from(BOUNDS), st.floats(min_value=0, max_value=0.1), st.just(5.0))
BATCHES = st.lists(
    st.tuples(st.sampled_from([("A", "Filter", "Success"), ("B", "Score", "Skip")]), st.lists(VALUES)),
    max_size=6,
)


@given(BATCHES)
def test_batches_render_as_prometheus_client_histogram_renders_one_at_a_time(batches: list) -> None:  # type: ignore[type-arg]
    reference = CollectorRegistry(auto_describe=False)
    one_by_one = Histogram(NAME, HELP, LABELS, buckets=BOUNDS, registry=reference)
    ours = CollectorRegistry(auto_describe=False)
    batched = BatchHistogram(NAME, HELP, LABELS, BOUNDS)
    ours.register(batched)
    for labels, values in batches:
        for v in values:
            one_by_one.labels(*labels).observe(v)
        if len(values) == 1:
            batched.observe(labels, values[0])
        else:
            batched.observe_many(labels, values)
    assert render([ours]) == render([reference])


def test_a_value_on_a_bound_counts_in_that_bucket_and_wrong_label_counts_are_refused() -> None:
    h = BatchHistogram(NAME, HELP, LABELS, (0.1, 1.0))
    h.observe_many(("A", "Filter", "Success"), [0.1, 1.0, 1.5])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(h)
    (family,) = text_string_to_metric_families(render([registry]).decode())
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")}
    assert buckets == {"0.1": 1, "1.0": 2, "+Inf": 3}
    count = [(s.labels, s.value) for s in family.samples if s.name.endswith("_count")]
    assert count == [({"plugin": "A", "extension_point": "Filter", "status": "Success"}, 3)]
    with pytest.raises(ValueError, match="3 label values wanted"):
        h.observe(("A",), 0.1)
