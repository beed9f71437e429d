"""Writes pod status to the API: PATCH pods/status only when what we computed differs from what we last
wrote (and from what the API already holds), with the pod's UID as a precondition so a status never lands
on a newer pod of the same name.

Writes are asynchronous, as upstream's status manager does them: a worker hands over the newest status
and goes on converging; writer tasks send the newest status of each pod, so a burst of changes to one pod
(Pending, then Running a moment later) costs one PATCH, and a slow or rate-limited API server never holds
up starting containers. `flush` waits for a pod's status to be written (before the final DELETE).

What is written is upstream's merge (agent/pods/status_patch.py): a terminal phase waits until the pod
worker reports that nothing of the pod can run any more (`could_have_running`), conditions other writers
own are left alone, and the write is a strategic merge patch.

Also performs the final DELETE of a pod the agent finished terminating (gracePeriodSeconds 0 with a UID
precondition), which is what removes the object once the node has let go of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from agent.pods.status_patch import merge, normalize, same, status_patch
from agent.staticpods.keys import is_static
from kubeclient.client import STRATEGIC_PATCH, KubeClient
from kubeclient.errors import ApiError
from kubeclient.eventwait import wait_event

log = logging.getLogger("agent.pods.status")

WRITERS = 8


def _rv(obj: dict[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def pod_path(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"


class StatusManager:
    def __init__(self, client: KubeClient | None) -> None:
        self.client = client
        # Whether the pod's worker may still have something running: until it says no, a terminal phase
        # is not written (the pod manager answers; with no manager nothing is held back).
        self.could_have_running: Callable[[str], bool] = lambda uid: False
        # A static pod's status goes to its current mirror pod (None: none yet, nothing written), as
        # upstream's status manager translates the static pod's UID to its mirror's.
        self.mirror_of: Callable[[dict[str, Any]], dict[str, Any] | None] = lambda pod: None
        self._written: dict[str, dict[str, Any]] = {}  # the status our last write left in the API
        self._written_rv: dict[str, int] = {}
        self._latest: dict[str, dict[str, Any]] = {}
        self._pending: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}  # uid -> (pod, status)
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._idle: dict[str, asyncio.Event] = {}
        self.patches = 0

    def last(self, uid: str) -> dict[str, Any] | None:
        """The newest status computed for the pod (written or about to be), before any holding back."""
        return self._latest.get(uid)

    def shown(self, uid: str) -> dict[str, Any] | None:
        """What the API holds of the pod's status as far as this manager knows (the last merged write)."""
        return self._written.get(uid)

    def _target(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """The API object the pod's status is written to: itself, or a static pod's mirror pod."""
        return self.mirror_of(pod) if is_static(pod) else pod

    def _held(self, pod: dict[str, Any], uid: str) -> dict[str, Any]:
        """The freshest status the API holds as far as we know: the pod as the informer last saw it,
        unless our own last write is newer than that. (`pod` is the API object, `uid` the key.)"""
        written = self._written.get(uid)
        if written is None or _rv(pod) >= self._written_rv.get(uid, 0):
            return pod.get("status") or {}
        return written

    async def update(self, pod: dict[str, Any], status: dict[str, Any]) -> bool:
        """Hand over a computed status; True if it differs from what the API has (a write is queued)."""
        uid = pod["metadata"]["uid"]
        self._latest[uid] = status
        target = self._target(pod)
        if target is None:
            return False  # a static pod without its mirror pod yet: written once it is there
        pod = target
        held = self._held(pod, uid)
        merged = merge(held, normalize(pod, status), self.could_have_running(uid))
        if same(held, merged):
            self._pending.pop(uid, None)
            self._idle.setdefault(uid, asyncio.Event()).set()
            return False
        if self.client is None:
            self._written[uid] = merged
            self._written_rv[uid] = _rv(pod) + 1
            return True
        queued = uid in self._pending
        self._pending[uid] = (pod, status)
        self._idle.setdefault(uid, asyncio.Event()).clear()
        if not queued:
            self._queue.put_nowait(uid)
        return True

    async def flush(self, uid: str, within: float = 30.0) -> None:
        """Wait until the pod's newest status has been written (or given up on)."""
        event = self._idle.get(uid)
        if event is not None and uid in self._pending:
            try:
                await wait_event(event, within)
            except TimeoutError:
                log.warning("status flush timed out uid=%s", uid)

    async def run(self) -> None:
        """Writer tasks until cancelled."""
        await asyncio.gather(*(self._writer() for _ in range(WRITERS)))

    async def _writer(self) -> None:
        while True:
            uid = await self._queue.get()
            entry = self._pending.get(uid)
            if entry is None:
                continue
            pod, status = entry
            try:
                await self._patch(uid, pod, status)
            except ApiError as err:
                log.warning("status write failed pod=%s error=%r", pod_path(pod), str(err))
                await asyncio.sleep(1.0)
                if self._pending.get(uid) is entry:
                    self._queue.put_nowait(uid)  # try again with whatever is newest then
                continue
            if self._pending.get(uid) is entry:
                del self._pending[uid]
                self._idle.setdefault(uid, asyncio.Event()).set()
            elif uid in self._pending:
                self._queue.put_nowait(uid)  # a newer status arrived while this one was written

    async def _patch(self, uid: str, pod: dict[str, Any], status: dict[str, Any]) -> None:
        """Write `status` of the pod keyed `uid` to the API object `pod` (a mirror pod for a static one)."""
        assert self.client is not None
        api = self._held(pod, uid)
        merged = merge(api, normalize(pod, status), self.could_have_running(uid))
        if same(api, merged):
            return
        body = {"metadata": {"uid": pod["metadata"]["uid"]}, "status": status_patch(api, merged)}
        try:
            written = await self.client.patch(pod_path(pod) + "/status", body, content_type=STRATEGIC_PATCH)
        except ApiError as err:
            if err.not_found or err.conflict:
                log.info("status not written, pod gone pod=%s uid=%s", pod_path(pod), pod["metadata"]["uid"])
                return
            raise
        self._written[uid] = (written or {}).get("status") or merged
        self._written_rv[uid] = _rv(written or {})
        self.patches += 1

    async def delete(self, pod: dict[str, Any]) -> bool:
        """The final DELETE after termination; True when the object is gone (or was already)."""
        uid = pod["metadata"]["uid"]
        await self.flush(uid)
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        }
        if self.client is not None:
            try:
                await self.client.delete(pod_path(pod), body)
            except ApiError as err:
                if not (err.not_found or err.conflict):
                    raise
        self.forget(uid)
        return True

    def forget(self, uid: str) -> None:
        self._written.pop(uid, None)
        self._written_rv.pop(uid, None)
        self._latest.pop(uid, None)
        self._pending.pop(uid, None)
        event = self._idle.pop(uid, None)
        if event is not None:
            event.set()
