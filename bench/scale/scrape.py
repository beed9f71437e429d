"""Every API server's /metrics, fetched during the density bench's load phase: the bench's one event loop
also times the probe calls and feeds the watchers, so of the large answer of a loaded server (every
histogram of every label set) only the SLI family's block is cut out there (two searches, no split) and
kept as bytes; `apisli` parses the blocks after the run. The fetch uses the admin kubeconfig's
credentials (client certificate or token), one connection pool per server."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import aiohttp

from bench.scale.apisli import SLI_METRIC, family_block
from kubeclient.config import ClusterConfig

log = logging.getLogger("bench.scale.scrape")


class MetricsScrapes:
    """Scrapes of every server at once, each kept as (monotonic time, one body per server)."""

    def __init__(
        self, configs: Sequence[ClusterConfig], interval: float = 60.0, family: str = SLI_METRIC
    ) -> None:
        self.configs = list(configs)
        self.family = family  # the one family kept of each answer (a loaded server's is megabytes)
        self.interval = interval
        self.taken: list[tuple[float, list[bytes]]] = []
        self._sessions: list[aiohttp.ClientSession] = []

    def _session(self, i: int) -> aiohttp.ClientSession:
        while len(self._sessions) <= i:
            config = self.configs[len(self._sessions)]
            ssl = config.ssl_context()
            auth = None
            if config.username and config.password is not None:
                auth = aiohttp.BasicAuth(config.username, config.password)
            self._sessions.append(
                aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(ssl=ssl if ssl is not None else False, limit=2), auth=auth
                )
            )
        return self._sessions[i]

    async def _one(self, i: int) -> bytes:
        config = self.configs[i]
        token = config.bearer_token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self._session(i).get(
            config.server + "/metrics", headers=headers, timeout=aiohttp.ClientTimeout(total=120)
        ) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"GET {config.server}/metrics: {resp.status} {body[:200]!r}")
            return family_block(body, self.family)

    async def scrape(self) -> None:
        """One scrape of every server, taken at the time its requests were sent."""
        at = time.monotonic()
        bodies = await asyncio.gather(*(self._one(i) for i in range(len(self.configs))))
        self.taken.append((at, list(bodies)))

    async def run(self) -> None:
        """A scrape every `interval` s until cancelled; one that fails is left out (the windows around it
        merge into one), the run goes on."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.scrape()
            except (aiohttp.ClientError, TimeoutError, RuntimeError) as err:
                log.warning("metrics scrape failed err=%s", err)

    def texts(self) -> list[tuple[float, list[str]]]:
        """The scrapes decoded, in the order they were sent (a periodic one may have ended late)."""
        return [(at, [b.decode() for b in bodies]) for at, bodies in sorted(self.taken, key=lambda t: t[0])]

    async def close(self) -> None:
        for session in self._sessions:
            await session.close()
