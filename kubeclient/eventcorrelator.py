"""What to do with a new core/v1 Event before it is written: upstream's EventCorrelator, pure.

client-go's recorder passes every event through three steps (tools/record/events_cache.go), and so does
ours, so `kubectl get events` shows the same thing against our components as against upstream's:

1. **spam filter**: per source and involved object (and type), a token bucket of 25 events refilled one
   per 5 minutes; an event without a token is dropped.
2. **aggregation**: events that differ only in their message (same source, object, type, reason) are
   counted per 10-minute window; from the 10th distinct message on, they are folded into one event
   whose message is `(combined from similar events): <latest message>`.
3. **deduplication**: an event identical to one already written (same source, object, field path, type,
   reason, message) is not written again: the first one's count and lastTimestamp are patched.

Nothing here does I/O; the recorder carries out the verdicts and reports back the written name.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from kubeclient.ratelimit import TokenBucket

Obj = dict[str, Any]
V = TypeVar("V")

CACHE_SIZE = 4096
MAX_SIMILAR = 10
SIMILAR_WINDOW = 600.0
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
COMBINED_PREFIX = "(combined from similar events): "


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _LRU(Generic[V]):
    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[str, V] = OrderedDict()

    def get(self, key: str) -> V | None:
        value = self.items.get(key)
        if value is not None:
            self.items.move_to_end(key)
        return value

    def put(self, key: str, value: V) -> None:
        self.items[key] = value
        self.items.move_to_end(key)
        while len(self.items) > self.size:
            self.items.popitem(last=False)


def _obj_parts(event: Obj) -> list[str]:
    src = event.get("source") or {}
    ref = event.get("involvedObject") or {}
    return [
        src.get("component", ""),
        src.get("host", ""),
        ref.get("kind", ""),
        ref.get("namespace", ""),
        ref.get("name", ""),
        ref.get("uid", ""),
        ref.get("apiVersion", ""),
    ]


def spam_key(event: Obj) -> str:
    return "\x00".join([*_obj_parts(event), event.get("type", "")])


def aggregate_key(event: Obj) -> str:
    return "\x00".join(
        [
            *_obj_parts(event),
            event.get("type", ""),
            event.get("reason", ""),
            event.get("reportingComponent", ""),
            event.get("reportingInstance", ""),
        ]
    )


def event_key(event: Obj) -> str:
    ref = event.get("involvedObject") or {}
    src = event.get("source") or {}
    return "\x00".join(
        [
            src.get("component", ""),
            src.get("host", ""),
            ref.get("kind", ""),
            ref.get("namespace", ""),
            ref.get("name", ""),
            ref.get("fieldPath", ""),
            ref.get("uid", ""),
            ref.get("apiVersion", ""),
            event.get("type", ""),
            event.get("reason", ""),
            event.get("message", ""),
        ]
    )


@dataclass
class _Similar:
    messages: set[str] = field(default_factory=set)
    last: float = 0.0


@dataclass
class Written:
    """What the recorder knows of an event it has written (or is writing)."""

    name: str
    namespace: str
    count: int
    first_timestamp: str
    # Set once its create has been answered, so patches never overtake it (the recorder's business).
    posted: asyncio.Event = field(default_factory=asyncio.Event, repr=False)


@dataclass
class Verdict:
    """`create` the event, `patch` the named one with `patch`, or `drop` it (spam)."""

    action: str
    event: Obj
    key: str = ""
    patch: Obj | None = None
    target: Written | None = None


class EventCorrelator:
    def __init__(
        self, clock: Callable[[], float] = time.time, spam_qps: float = SPAM_QPS, spam_burst: int = SPAM_BURST
    ) -> None:
        self.clock = clock
        self.spam_qps = spam_qps
        self.spam_burst = spam_burst
        self._buckets: _LRU[TokenBucket] = _LRU(CACHE_SIZE)
        self._similar: _LRU[_Similar] = _LRU(CACHE_SIZE)
        self._written: _LRU[Written] = _LRU(CACHE_SIZE)

    def _spam(self, event: Obj) -> bool:
        key = spam_key(event)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(self.spam_qps, self.spam_burst, clock=self.clock)
            self._buckets.put(key, bucket)
        return not bucket.allow()

    def correlate(self, event: Obj) -> Verdict:
        if self._spam(event):
            return Verdict("drop", event)
        now = self.clock()
        event, key = self._aggregate(event, now)
        seen = self._written.get(key)
        if seen is None:
            written = Written(
                event["metadata"]["name"],
                event["metadata"].get("namespace", ""),
                1,
                event.get("firstTimestamp") or rfc3339(now),
            )
            self._written.put(key, written)
            return Verdict("create", event, key, target=written)
        seen.count += 1
        stamp = rfc3339(now)
        patch = {"count": seen.count, "lastTimestamp": stamp, "message": event.get("message", "")}
        event = {
            **event,
            "metadata": {**event["metadata"], "name": seen.name},
            "count": seen.count,
            "firstTimestamp": seen.first_timestamp,
            "lastTimestamp": stamp,
        }
        return Verdict("patch", event, key, patch, seen)

    def _aggregate(self, event: Obj, now: float) -> tuple[Obj, str]:
        akey = aggregate_key(event)
        record = self._similar.get(akey)
        if record is None or now - record.last > SIMILAR_WINDOW:
            record = _Similar()
        record.messages.add(event.get("message", ""))
        record.last = now
        self._similar.put(akey, record)
        if len(record.messages) < MAX_SIMILAR:
            return event, event_key(event)
        record.messages.pop()  # do not grow the set past the threshold
        ref = event.get("involvedObject") or {}
        stamp = rfc3339(now)
        combined = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{ref.get('name', '')}.{int(now * 1e9):x}",
                "namespace": event["metadata"].get("namespace", ""),
            },
            "involvedObject": ref,
            "reason": event.get("reason", ""),
            "message": COMBINED_PREFIX + event.get("message", ""),
            "type": event.get("type", ""),
            "source": event.get("source") or {},
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
        }
        for name in ("reportingComponent", "reportingInstance"):
            if event.get(name):
                combined[name] = event[name]
        return combined, akey

    def forget_written(self, key: str) -> None:
        """The written event is gone (a patch got 404): the next one is created afresh."""
        self._written.items.pop(key, None)
