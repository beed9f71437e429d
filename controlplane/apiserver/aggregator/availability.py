"""The Available condition of each APIService, as upstream's AvailableConditionController
(k8s.io/kube-aggregator/pkg/controllers/status): a local one is always available (Local); a remote one
needs its Service (ServiceNotFound, ServicePortError), Endpoints with an address on that port
(EndpointsNotFound, MissingEndpoints) and an answer from the backend's discovery document
(/apis/<group>/<version>, 5 s timeout; FailedDiscoveryCheck), then it is Passed. Checked at once when
an APIService, its Service or its Service's Endpoints change, and every 30 s; the discovery answer is kept for the aggregated discovery
document. lastTransitionTime changes only with the status."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from controlplane.apiserver.aggregator.apis import APIServiceInfo, APIServices
from controlplane.apiserver.aggregator.openapimerge import OpenAPIAggregation
from controlplane.apiserver.aggregator.proxy import BackendTLS, server_name
from controlplane.apiserver.aggregator.resolve import Endpoint, ResolveError, resolve
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.kinds.apiservice import KIND as APISERVICES
from controlplane.apiserver.kinds.endpoints import KIND as ENDPOINTS
from controlplane.apiserver.kinds.service import KIND as SERVICES
from controlplane.apiserver.meta import timestamp
from controlplane.apiserver.registry import Registry
from controlplane.storage.cache import CacheEvent
from kubeclient.eventwait import wait_event

log = logging.getLogger("controlplane.apiserver.aggregator")
Obj = dict[str, Any]
RESYNC = 30.0
DISCOVERY_TIMEOUT = 5.0


@dataclass(frozen=True)
class Verdict:
    status: str
    reason: str
    message: str


Fetch = Callable[[APIServiceInfo, list[Endpoint]], Awaitable[Obj]]


def with_condition(obj: Obj, verdict: Verdict) -> Obj:
    status = obj.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Available"]
    old = next((c for c in status.get("conditions") or [] if c.get("type") == "Available"), None)
    when = old["lastTransitionTime"] if old and old.get("status") == verdict.status else timestamp()
    conditions.append(
        {
            "type": "Available",
            "status": verdict.status,
            "lastTransitionTime": when,
            "reason": verdict.reason,
            "message": verdict.message,
        }
    )
    status["conditions"] = conditions
    return obj


class AvailabilityChecker:
    def __init__(self, registry: Registry, apis: APIServices, tls: BackendTLS) -> None:
        self.registry = registry
        self.apis = apis
        self.tls = tls
        self._wake = asyncio.Event()
        self._dirty: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self.openapi = OpenAPIAggregation(self.fetch_path)

    def start(self) -> None:
        self.apis.listeners.append(self._changed)
        for bucket in (SERVICES.bucket, ENDPOINTS.bucket):
            self.registry.cache.subscribe(bucket, self._backend_changed)
        self._dirty.update(self.apis.by_name)
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DISCOVERY_TIMEOUT))
        self._task = asyncio.create_task(self._run(), name="apiservice-availability")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._session:
            await self._session.close()

    def _changed(self, name: str) -> None:
        self._dirty.add(name)
        self._wake.set()

    def _backend_changed(self, event: CacheEvent) -> None:
        """A Service or Endpoints changed: the APIServices it backs are checked again (upstream's
        AvailableConditionController watches both)."""
        meta = event.obj.view.get("metadata") or {}
        where = (meta.get("namespace") or "", meta.get("name") or "")
        for info in self.apis.by_name.values():
            if not info.local and (info.service_namespace, info.service_name) == where:
                self._changed(info.name)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_resync = loop.time() + RESYNC
        while True:
            with contextlib.suppress(TimeoutError):
                await wait_event(self._wake, max(0.0, next_resync - loop.time()))
            self._wake.clear()
            if loop.time() >= next_resync:
                self._dirty.update(self.apis.by_name)
                next_resync = loop.time() + RESYNC
            names, self._dirty = self._dirty, set()
            for name in sorted(names):
                try:
                    await self.sync(name)
                except Exception:  # one APIService's trouble never stops the others' checks
                    log.exception("event=availability-check-failed apiservice=%s", name)

    async def sync(self, name: str) -> None:
        info = self.apis.by_name.get(name)
        if info is None:
            return
        verdict = await self.check(info)
        current = info.available == (verdict.status == "True")
        cached = self.registry.cache.get(APISERVICES.key("", name))
        if cached is None:
            return
        cond = next(
            (
                c
                for c in (cached.obj.get("status") or {}).get("conditions") or []
                if c.get("type") == "Available"
            ),
            None,
        )
        if (
            current
            and cond
            and (cond.get("reason"), cond.get("message")) == (verdict.reason, verdict.message)
        ):
            return
        try:
            await self.registry.guaranteed_update(
                APISERVICES, "", name, lambda obj: with_condition(obj, verdict), subresource="status"
            )
        except ApiError as err:
            if err.code != 404:
                raise

    async def check(self, info: APIServiceInfo) -> Verdict:
        if info.local:
            return Verdict("True", "Local", "Local APIServices are always available")
        try:
            endpoints = resolve(self.registry.cache, info.service_namespace, info.service_name, info.port)
        except ResolveError as err:
            self.apis.resources.pop((info.group, info.version), None)
            return Verdict("False", err.reason, str(err))
        try:
            doc = await self.fetch_discovery(info, endpoints)
        except Exception as err:  # any failure to get a good answer is FailedDiscoveryCheck
            url = f"https://{endpoints[0].netloc}/apis/{info.group}/{info.version}"
            return Verdict("False", "FailedDiscoveryCheck", f"failing or missing response from {url}: {err}")
        self.apis.resources[(info.group, info.version)] = list(doc.get("resources") or [])
        await self.openapi.refresh(info)
        return Verdict("True", "Passed", "all checks passed")

    async def fetch_discovery(self, info: APIServiceInfo, endpoints: list[Endpoint]) -> Obj:
        """GET /apis/<group>/<version> of the backend as the aggregator itself (system:kube-aggregator)."""
        return await self._get_json(info, endpoints[0], f"/apis/{info.group}/{info.version}")

    async def fetch_path(self, info: APIServiceInfo, path: str) -> Obj:
        """GET `path` of the APIService's backend (its OpenAPI documents) as the aggregator."""
        endpoints = resolve(self.registry.cache, info.service_namespace, info.service_name, info.port)
        return await self._get_json(info, endpoints[0], path)

    async def _get_json(self, info: APIServiceInfo, endpoint: Endpoint, path: str) -> Obj:
        assert self._session is not None
        url = f"https://{endpoint.netloc}{path}"
        headers = {"X-Remote-User": "system:kube-aggregator", "X-Remote-Group": "system:authenticated"}
        async with self._session.get(
            url,
            headers=headers,
            ssl=self.tls.context(info),
            server_hostname=None if info.insecure else server_name(info),
        ) as resp:
            body = await resp.read()
            if not 200 <= resp.status < 300:
                raise RuntimeError(f"bad status from {url}: {resp.status}")
            return json.loads(body)
