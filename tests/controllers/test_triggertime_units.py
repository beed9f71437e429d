"""The last-change-trigger-time annotation's bookkeeping, pure: a new Service gives its creation time,
then the earliest pod Ready transition (or Service change) that moved since the last sync, nothing when
nothing moved; the annotation is set or removed on the slices written."""

from __future__ import annotations

import datetime as dt

from controlplane.controllers.triggertime import (
    LAST_CHANGE_TRIGGER_TIME,
    TriggerTimeTracker,
    annotate,
    format_time,
)

SERVICE = {"metadata": {"name": "web", "creationTimestamp": "2026-01-01T00:00:00Z"}}


def pod(name: str, ready_at: str) -> dict:
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ready_at}]},
    }


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_trigger_times_follow_upstreams_tracker() -> None:
    tracker = TriggerTimeTracker()
    a, b = pod("a", "2026-01-01T00:00:05Z"), pod("b", "2026-01-01T00:00:07Z")
    assert tracker.compute("ns/web", SERVICE, [a, b]) == at("2026-01-01T00:00:00Z")  # new Service
    assert tracker.compute("ns/web", SERVICE, [a, b]) is None  # nothing moved
    b2, c = pod("b", "2026-01-01T00:00:09Z"), pod("c", "2026-01-01T00:00:08Z")
    assert tracker.compute("ns/web", SERVICE, [a, b2, c]) == at("2026-01-01T00:00:08Z")  # the earliest
    tracker.forget("ns/web")
    assert tracker.compute("ns/web", SERVICE, [a]) == at("2026-01-01T00:00:00Z")


def test_the_annotation_is_set_in_rfc3339_or_removed() -> None:
    body = {"metadata": {"name": "web-x", "annotations": {"keep": "1"}}}
    marked = annotate(body, at("2026-01-01T00:00:08.250Z"))
    assert marked["metadata"]["annotations"] == {
        "keep": "1",
        LAST_CHANGE_TRIGGER_TIME: "2026-01-01T00:00:08.25Z",
    }
    assert annotate(marked, None)["metadata"]["annotations"] == {"keep": "1"}
    assert body["metadata"]["annotations"] == {"keep": "1"}  # the input is not changed
    assert format_time(at("2026-01-01T00:00:08Z")) == "2026-01-01T00:00:08Z"
