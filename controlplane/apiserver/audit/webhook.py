"""The audit webhook backend (upstream's plugin/pkg/audit/webhook, --audit-webhook-config-file): batches
of events POSTed as an audit.k8s.io/v1 EventList to the service the kubeconfig-format file names, over TLS
with its CA and client certificate. It rides the same buffer as the log (backend.py): `batch` mode
(upstream's default for the webhook) drops what a full buffer cannot take, `blocking` holds requests
instead. A failed POST is tried again after --audit-webhook-initial-backoff, doubling, three times, then
the batch is counted as failed."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aiohttp

from kubeclient.config import ClusterConfig

log = logging.getLogger("controlplane.apiserver.audit")

ATTEMPTS = 3
TIMEOUT = 30.0


class WebhookSink:
    plugin = "webhook"

    def __init__(self, cluster: ClusterConfig, initial_backoff: float = 10.0) -> None:
        self.cluster = cluster
        self.initial_backoff = initial_backoff
        self._ssl = cluster.ssl_context()
        self._session: aiohttp.ClientSession | None = None

    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, events: list[dict[str, Any]]) -> None:
        """One EventList; OSError after the last attempt (the backend counts the batch as failed)."""
        body = json.dumps(
            {"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {}, "items": events},
            separators=(",", ":"),
        )
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT))
        backoff = self.initial_backoff
        for attempt in range(ATTEMPTS):
            try:
                async with self._session.post(
                    self.cluster.server,
                    data=body,
                    headers={"Content-Type": "application/json"},
                    ssl=self._ssl,
                ) as resp:
                    if resp.status < 300:
                        return
                    problem = f"the webhook answered {resp.status}"
            except (aiohttp.ClientError, OSError, TimeoutError) as err:
                problem = f"{type(err).__name__}: {err}"
            log.warning("event=audit-webhook-failed attempt=%d cause=%s", attempt + 1, problem)
            if attempt + 1 < ATTEMPTS:
                await asyncio.sleep(backoff)
                backoff *= 2
        raise OSError(problem)
