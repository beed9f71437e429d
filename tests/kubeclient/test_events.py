"""Event correlation as upstream's recorder does it (spam filter, aggregation of similar events,
deduplication into count patches), and the recorder writing the verdicts to an API server."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from kubeclient.eventcorrelator import COMBINED_PREFIX, EventCorrelator
from kubeclient.events import EventRecorder, EventSource
from tests.kubeclient.conftest import served

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "d", "uid": "u1"}}


def event(message: str, reason: str = "BackOff", type_: str = "Warning") -> dict[str, Any]:
    return {
        "metadata": {"name": f"web.{message}", "namespace": "d"},
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": "d", "uid": "u1"},
        "reason": reason,
        "message": message,
        "type": type_,
        "source": {"component": "kubelet", "host": "n1"},
    }


def test_identical_events_become_count_patches() -> None:
    c = EventCorrelator(clock=lambda: 1000.0)
    first = c.correlate(event("same"))
    assert first.action == "create"
    second = c.correlate(event("same"))
    assert second.action == "patch" and second.patch is not None
    assert second.patch["count"] == 2 and second.target is first.target
    assert second.event["metadata"]["name"] == first.event["metadata"]["name"]
    assert c.correlate(event("other")).action == "create"


def test_ten_distinct_messages_in_ten_minutes_are_combined() -> None:
    now = [1000.0]
    c = EventCorrelator(clock=lambda: now[0])
    verdicts = [c.correlate(event(f"m{i}", reason="FailedMount")) for i in range(12)]
    assert [v.action for v in verdicts[:9]] == ["create"] * 9
    tenth, eleventh = verdicts[9], verdicts[10]
    assert tenth.action == "create" and tenth.event["message"] == COMBINED_PREFIX + "m9"
    assert (
        eleventh.action == "patch" and eleventh.patch and eleventh.patch["message"] == COMBINED_PREFIX + "m10"
    )
    now[0] += 601  # the window passed: messages stand alone again
    assert c.correlate(event("late", reason="FailedMount")).event["message"] == "late"


def test_spam_filter_drops_beyond_25_per_object_and_refills_slowly() -> None:
    now = [0.0]
    c = EventCorrelator(clock=lambda: now[0])
    actions = [c.correlate(event(f"x{i}", reason=f"R{i}")).action for i in range(26)]
    assert actions[:25] == ["create"] * 25 and actions[25] == "drop"
    now[0] += 300  # one token per five minutes
    assert c.correlate(event("y", reason="R99")).action == "create"


class EventSink:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.gone: set[str] = set()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append((request.method, request.path, body))
        name = request.path.rsplit("/", 1)[-1]
        if request.method == "PATCH" and name in self.gone:
            return web.json_response({"kind": "Status", "reason": "NotFound", "code": 404}, status=404)
        return web.json_response(body, status=201 if request.method == "POST" else 200)


async def test_recorder_creates_then_patches_and_recreates_a_vanished_event() -> None:
    sink = EventSink()
    async with served(sink.handle) as client:
        await _record_into(client, sink)


async def _record_into(client: object, sink: EventSink) -> None:
    recorder = EventRecorder(client, EventSource("kubelet", "n1"), workers=4)  # type: ignore[arg-type]
    recorder.start()
    try:
        recorder.event(
            POD, "Warning", "BackOff", "Back-off restarting failed container", "spec.containers{c}"
        )
        recorder.event(
            POD, "Warning", "BackOff", "Back-off restarting failed container", "spec.containers{c}"
        )
        await asyncio.wait_for(recorder.flush(), 5)
        (m1, p1, created), (m2, p2, patch) = sink.calls
        assert (m1, p1) == ("POST", "/api/v1/namespaces/d/events")
        assert created["involvedObject"] == {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "web",
            "uid": "u1",
            "resourceVersion": "",
            "namespace": "d",
            "fieldPath": "spec.containers{c}",
        }
        assert created["source"] == {"component": "kubelet", "host": "n1"} and created["count"] == 1
        assert (m2, p2) == ("PATCH", f"/api/v1/namespaces/d/events/{created['metadata']['name']}")
        assert patch["count"] == 2
        sink.gone.add(created["metadata"]["name"])  # expired meanwhile
        recorder.event(
            POD, "Warning", "BackOff", "Back-off restarting failed container", "spec.containers{c}"
        )
        await asyncio.wait_for(recorder.flush(), 5)
        assert [c[0] for c in sink.calls[2:]] == ["PATCH", "POST"]
        assert sink.calls[3][2]["count"] == 3
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "nu"}}
        recorder.event(node, "Normal", "NodeReady", "Node n1 status is now: NodeReady")
        await asyncio.wait_for(recorder.flush(), 5)
        assert sink.calls[-1][1] == "/api/v1/namespaces/default/events"  # cluster-scoped: default
    finally:
        await recorder.stop()


async def test_an_event_the_server_refuses_is_logged_whole_at_error_level(caplog: Any) -> None:
    """client-go's broadcaster logs a refused event with the event itself ("Server rejected event (will
    not retry!)"): for a controller whose RBAC binding is gone, that line is where its log shows what it
    could not do (the pods it could not create are only in the event's message)."""
    forbidden = (
        'events is forbidden: User "system:serviceaccount:kube-system:x" cannot create resource "events"'
    )

    async def refuse(request: web.Request) -> web.Response:
        body = {
            "kind": "Status",
            "status": "Failure",
            "reason": "Forbidden",
            "code": 403,
            "message": forbidden,
        }
        return web.json_response(body, status=403)

    async with served(refuse) as client:
        recorder = EventRecorder(client, EventSource("replicaset-controller"))  # type: ignore[arg-type]
        recorder.start()
        try:
            with caplog.at_level("ERROR", logger="kubeclient.events"):
                recorder.event(POD, "Warning", "FailedCreate", "Error creating: pods is forbidden: no")
                await asyncio.wait_for(recorder.flush(), 5)
        finally:
            await recorder.stop()
    (line,) = [r.getMessage() for r in caplog.records if "Server rejected event" in r.getMessage()]
    assert "Pod:d/web" in line and "FailedCreate" in line and "Error creating: pods is forbidden: no" in line
    assert forbidden in line
