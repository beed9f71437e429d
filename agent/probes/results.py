"""The probe results store: the one seam between probe workers and whoever acts on their verdicts.

As upstream's pkg/kubelet/prober/results: each worker writes its verdict about a container here, keyed
by probe kind and container ID, and every change goes onto an updates queue. The prober manager reads
verdicts for the pod workers and drains the queue to wake them. A worker never calls back into its
manager: it knows only this store (and the pod view it reads, agent/probes/podview.py), so the manager
may import the worker and nothing imports the other way.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from agent.probes.result import Result
from agent.probes.spec import Kind


@dataclass(frozen=True)
class Update:
    """A verdict that changed (upstream's results.Update), with the pod it concerns."""

    kind: Kind
    container_id: str
    result: Result | None  # None: not known yet (a startup probe before its first verdict)
    pod_uid: str


class ResultsStore:
    """Verdicts by (kind, container ID). An entry that is set but None means "unknown", as upstream's
    startup results start; a missing entry reads the same."""

    def __init__(self) -> None:
        self._cache: dict[tuple[Kind, str], Result | None] = {}
        self.updates: asyncio.Queue[Update] = asyncio.Queue()

    def get(self, kind: Kind, container_id: str) -> Result | None:
        return self._cache.get((kind, container_id)) if container_id else None

    def set(self, kind: Kind, container_id: str, result: Result | None, pod_uid: str) -> None:
        """Record a verdict; a new or different one is also queued as an Update."""
        key = (kind, container_id)
        if key in self._cache and self._cache[key] == result:
            return
        self._cache[key] = result
        self.updates.put_nowait(Update(kind, container_id, result, pod_uid))

    def remove(self, kind: Kind, container_id: str) -> None:
        """Forget a verdict (its container was replaced, or its worker stopped); not an update."""
        self._cache.pop((kind, container_id), None)
