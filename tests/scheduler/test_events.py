"""The scheduler's event recorder on its own, with a recording stand-in for the API client (unit test of
one module; the shared recorder's correlation rules are tested in tests/kubeclient/test_events.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from controlplane.scheduler import events
from controlplane.scheduler.events import scheduler_events

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
}


class RecordingClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    async def create(self, path: str, body: Any, **_: Any) -> Any:
        self.calls.append(("POST", path, body))
        return body

    async def patch(self, path: str, body: Any, **_: Any) -> Any:
        self.calls.append(("PATCH", path, body))
        return body


async def test_event_fields_and_repeat_bumps_count():
    api = RecordingClient()
    rec = scheduler_events(api, "default-scheduler", workers=1)  # type: ignore[arg-type]
    rec.start()
    try:
        rec.event(
            POD,
            "Warning",
            "FailedScheduling",
            "0/1 nodes are available: 1 Too many pods.",
            action="Scheduling",
        )
        await rec.flush()
        rec.event(
            POD,
            "Warning",
            "FailedScheduling",
            "0/1 nodes are available: 1 Too many pods.",
            action="Scheduling",
        )
        await rec.flush()
        rec.event(
            POD,
            "Warning",
            "FailedScheduling",
            "0/2 nodes are available: 2 Too many pods.",
            action="Scheduling",
        )
        await rec.flush()
    finally:
        await rec.stop()
    methods = [(m, p.rsplit("/", 1)[-1] if m == "PATCH" else p) for m, p, _ in api.calls]
    assert methods[0] == ("POST", "/api/v1/namespaces/ns/events")
    created = api.calls[0][2]
    assert created["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ns",
        "name": "p",
        "uid": "u1",
        "resourceVersion": "7",
    }
    assert (created["type"], created["reason"], created["count"]) == ("Warning", "FailedScheduling", 1)
    assert created["source"] == {"component": "default-scheduler"}
    assert methods[1] == ("PATCH", created["metadata"]["name"]) and api.calls[1][2]["count"] == 2
    assert api.calls[2][0] == "POST"  # a different message is a new event


async def test_events_wait_for_bindings_but_not_forever(monkeypatch):
    monkeypatch.setattr(events, "MAX_LAG", 0.3)
    api = RecordingClient()
    rec = scheduler_events(api, "default-scheduler", workers=1)  # type: ignore[arg-type]
    rec.start()
    try:
        rec.hold()
        rec.event(POD, "Normal", "Scheduled", "Successfully assigned ns/p to n", action="Binding")
        await asyncio.sleep(0.1)
        assert api.calls == []  # held back while a binding is in flight
        rec.release()
        await asyncio.wait_for(rec.flush(), 1)
        assert len(api.calls) == 1
        rec.hold()  # never released: the event still goes out after MAX_LAG
        rec.event(POD, "Normal", "Scheduled", "again", action="Binding")
        await asyncio.wait_for(rec.flush(), 2)
        assert len(api.calls) == 2
    finally:
        await rec.stop()
