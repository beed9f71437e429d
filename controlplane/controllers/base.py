"""What every controller shares: a work queue of object keys fed by informer handlers, workers that
take one key at a time and call the controller's `sync`, and client-go's retry rules around it.

A controller is level-triggered: `sync(key)` reads the current object from the informers' caches,
compares what is wanted with what is there, and takes the next step. A failed sync is retried with the
key's own exponential backoff (the queue's rate limiter); after `max_retries` the key is dropped until
its next event or resync, as upstream's controllers do, so one broken object never stops the others.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from prometheus_client import CollectorRegistry

from controlplane.controllers.informers import SharedInformers
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.events import EventRecorder, EventSource
from kubeclient.informer import key_of
from kubeclient.workqueue import QueueMetrics, ShutDown, WorkQueue

log = logging.getLogger("controlplane.controllers")

Obj = dict[str, Any]
EVENT_LOG_VERBOSITY = 3


@dataclass
class ControllerContext:
    """What the manager hands every controller it builds."""

    client: KubeClient
    informers: SharedInformers
    registry: CollectorRegistry
    options: dict[str, Any] = field(default_factory=dict)
    _recorders: dict[str, EventRecorder] = field(default_factory=dict)
    event_client: KubeClient | None = None

    def client_for(self, controller: str) -> KubeClient:
        """The controller's own client: the shared connections, its own QPS/burst (kube-controller-
        manager gives each controller its own clientset, so one busy loop cannot starve the others)."""
        return self.client.derive()

    def recorder(self, component: str) -> EventRecorder:
        """One event recorder per reporting component (`replicaset-controller`, ...), started by the
        manager; events have their own rate limit, as upstream's broadcaster's sink has. Each event is
        logged at V(3), as upstream's controllers start their broadcasters' structured logging
        (`StartStructuredLogging(3)`): logged at INFO, the pods' SuccessfulCreate and SuccessfulDelete
        cost 1.7 % of the controller manager's CPU in a density run."""
        recorder = self._recorders.get(component)
        if recorder is None:
            client = (self.event_client or self.client).derive()
            recorder = EventRecorder(client, EventSource(component), verbosity=EVENT_LOG_VERBOSITY)
            self._recorders[component] = recorder
        return recorder

    @property
    def recorders(self) -> list[EventRecorder]:
        return list(self._recorders.values())

    def option(self, name: str, default: Any) -> Any:
        return self.options.get(name, default)


class Controller(ABC):
    """Subclasses set `name` (the --controllers name) and implement `sync`; they register informer
    handlers that call `enqueue` in their constructor."""

    name: ClassVar[str]
    workers: ClassVar[int] = 5
    max_retries: ClassVar[int] = 15
    # The service account kube-system/<account> it acts as (upstream's ClientBuilder.ClientOrDie name,
    # bound to system:controller:<account>); "" means "<name>-controller".
    account: ClassVar[str] = ""
    # Acts with the manager's own credentials rather than a service account (upstream's token
    # controller, which runs on the root client).
    root_credentials: ClassVar[bool] = False

    @classmethod
    def account_name(cls) -> str:
        return cls.account or f"{cls.name}-controller"

    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self.client = ctx.client_for(self.name)
        self.queue: WorkQueue[str] = WorkQueue(self.name, metrics=QueueMetrics.of(ctx.registry))
        self.syncs = 0
        self.errors = 0

    # --- feeding the queue ---------------------------------------------------------------------------

    def enqueue(self, obj: Obj) -> None:
        self.queue.add(key_of(obj))

    def enqueue_after(self, obj: Obj, delay: float) -> None:
        self.queue.add_after(key_of(obj), delay)

    def handlers(self, key: Callable[[Obj], str | None] | None = None) -> dict[str, Any]:
        """add/update/delete handlers that enqueue the object (or the key `key` maps it to)."""

        def add(obj: Obj) -> None:
            k = key(obj) if key else key_of(obj)
            if k:
                self.queue.add(k)

        return {"on_add": add, "on_update": lambda _old, new: add(new), "on_delete": add}

    # --- running -------------------------------------------------------------------------------------

    @abstractmethod
    async def sync(self, key: str) -> None:
        """Bring the object named by `key` one step closer to what it asks for."""

    async def run(self, stop: asyncio.Event) -> None:
        workers = [asyncio.create_task(self._worker(), name=f"{self.name}-{i}") for i in range(self.workers)]
        await stop.wait()
        self.queue.shutdown()
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            try:
                await self.sync(key)
                self.queue.forget(key)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                self.errors += 1
                self._retry(key, err)
            finally:
                self.syncs += 1
                self.queue.done(key)

    def _retry(self, key: str, err: Exception) -> None:
        if self.queue.num_requeues(key) < self.max_retries:
            level = logging.INFO if isinstance(err, ApiError) and err.conflict else logging.WARNING
            log.log(
                level,
                "sync failed controller=%s key=%s error=%s",
                self.name,
                key,
                err,
                exc_info=not isinstance(err, ApiError),
            )
            self.queue.add_rate_limited(key)
            return
        log.error(
            "dropping key after %d retries controller=%s key=%s error=%s",
            self.max_retries,
            self.name,
            key,
            err,
        )
        self.queue.forget(key)
