"""core/v1 Events about pods, from source kubelet on this node.

A repeated event (same object, field, type, reason and message) is not posted again: the first one's
count and lastTimestamp are patched, as upstream's event correlator does, so a crash loop makes one
Event with a growing count rather than hundreds. Posting happens on a background task so a slow API
server never holds up a pod worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agent.kube.client import MERGE_PATCH, ApiError, KubeClient

log = logging.getLogger("agent.pods.events")

NORMAL = "Normal"
WARNING = "Warning"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int
    posted: asyncio.Event


class EventRecorder:
    def __init__(self, client: KubeClient | None, node_name: str, cache_size: int = 4096) -> None:
        self.client = client
        self.node_name = node_name
        self.cache_size = cache_size
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._queue: asyncio.Queue[tuple[tuple[str, ...], dict[str, Any] | None]] = asyncio.Queue()
        self.recorded: list[tuple[str, str, str, str]] = []  # (uid, type, reason, message), for tests/logs

    def event(
        self, pod: dict[str, Any], type_: str, reason: str, message: str, field_path: str = ""
    ) -> None:
        meta = pod["metadata"]
        key = (meta["uid"], field_path, type_, reason, message)
        self.recorded.append((meta["uid"], type_, reason, message))
        if len(self.recorded) > 10_000:
            del self.recorded[:5000]
        log.info(
            "event pod=%s/%s type=%s reason=%s field=%s message=%r",
            meta["namespace"], meta["name"], type_, reason, field_path, message,
        )
        seen = self._seen.get(key)
        if seen is not None:
            seen.count += 1
            self._seen.move_to_end(key)
            self._queue.put_nowait((key, None))
            return
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
                "resourceVersion": meta.get("resourceVersion", ""),
                **({"fieldPath": field_path} if field_path else {}),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": "kubelet", "host": self.node_name},
            "reportingComponent": "kubelet",
            "reportingInstance": self.node_name,
            "firstTimestamp": _now(),
            "lastTimestamp": _now(),
            "count": 1,
        }
        self._seen[key] = _Seen(body["metadata"]["name"], meta["namespace"], 1, asyncio.Event())
        while len(self._seen) > self.cache_size:
            self._seen.popitem(last=False)
        self._queue.put_nowait((key, body))

    async def run(self) -> None:
        """Post queued events (one at a time, in order) until cancelled."""
        while True:
            key, body = await self._queue.get()
            if self.client is None:
                continue
            seen = self._seen.get(key)
            try:
                if body is not None:
                    ns = body["metadata"]["namespace"]
                    await self.client.create(f"/api/v1/namespaces/{ns}/events", body)
                    if seen:
                        seen.posted.set()
                elif seen is not None:
                    await seen.posted.wait()
                    await self.client.patch(
                        f"/api/v1/namespaces/{seen.namespace}/events/{seen.name}",
                        {"count": seen.count, "lastTimestamp": _now()},
                        content_type=MERGE_PATCH,
                    )
            except (ApiError, ValueError) as err:
                if seen:
                    seen.posted.set()
                log.debug("event not posted reason=%s error=%r", (body or {}).get("reason"), str(err))


def container_field(kind: str, name: str) -> str:
    return f"spec.{'initContainers' if kind == 'init' else 'containers'}{{{name}}}"


def field_of(pod: dict[str, Any], name: str) -> str:
    """The fieldPath of the pod's container `name`, init or app, for an event about it."""
    init = (pod.get("spec") or {}).get("initContainers") or []
    return container_field("init" if any(c["name"] == name for c in init) else "app", name)
