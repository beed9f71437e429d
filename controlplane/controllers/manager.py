"""The controller manager: one process, many control loops, one leader at a time.

Like kube-controller-manager it takes the Lease kube-system/kube-controller-manager before it acts, so
two instances never both create the missing replica; builds the enabled controllers (each asks the
shared informers for what it watches), starts the informers, waits until all have listed, then runs
every controller's workers. Its secure port (kubeclient.secureport) serves /healthz, /livez, /readyz
(open, as upstream's always-allowed paths) and /metrics (the work queues' metrics with client-go's
names) to callers the API server authorizes, by SubjectAccessReview, as upstream delegates it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.clientbuilder import ClientBuilder, RootClientBuilder, ServiceAccountCredentials
from controlplane.controllers.informers import SharedInformers
from controlplane.controllers.registry import CONTROLLERS
from kubeclient.backoff import Backoff
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.eventloop import termination_event
from kubeclient.eventwait import wait_event
from kubeclient.exposition import render
from kubeclient.leaderelection import LeaderElection, LeaderElector, run_as_leader
from kubeclient.secureport import SecurePort, SecureServingOptions, serve_secure_port

log = logging.getLogger("controlplane.controllers")

LEASE_NAME = "kube-controller-manager"
DEFAULT_PORT = 10257


@dataclass
class ManagerConfig:
    controllers: list[str]
    leader_election: LeaderElection = field(default_factory=lambda: LeaderElection(LEASE_NAME))
    bind_address: str = "127.0.0.1"
    secure_port: int = DEFAULT_PORT  # 0: no HTTPS endpoint
    cert_dir: Path = Path("/var/run/kubernetes")
    client_ca_file: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    resync_period: float = 0.0
    # --use-service-account-credentials: the cluster signing CA (certificate, key PEM) the manager signs
    # each controller's service-account credentials with (clientbuilder.py); None: the manager's own client.
    service_account_signer: tuple[bytes, bytes] | None = None


class ControllerManager:
    def __init__(self, client: KubeClient, config: ManagerConfig) -> None:
        self.client = client
        self.config = config
        self.registry = CollectorRegistry()
        self.is_leader = Gauge(
            "leader_election_master_status",
            "[ALPHA] Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
            registry=self.registry,
        )
        self.controllers: list[Controller] = []
        self.port = 0
        signer = config.service_account_signer
        self.credentials: ClientBuilder = (
            ServiceAccountCredentials(client, signer[0], signer[1], client.limiter.qps, client.limiter.burst)
            if signer is not None
            else RootClientBuilder(client)
        )
        self._secure_port: SecurePort | None = None

    # --- the loops -----------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        await self._serve()
        elector = (
            LeaderElector(self.client, self.config.leader_election)
            if self.config.leader_election.enabled
            else None
        )
        try:
            await run_as_leader(elector, stop, self._lead)
        finally:
            self.is_leader.labels(self.config.leader_election.name).set(0)
            if self._secure_port is not None:
                await self._secure_port.close()

    async def _lead(self, halt: asyncio.Event) -> None:
        self.is_leader.labels(self.config.leader_election.name).set(1)
        # Informers on the manager's identity, each controller's writes and events on its own.
        informers = SharedInformers(self.client, self.config.resync_period)
        base = ControllerContext(self.client, informers, self.registry, dict(self.config.options))
        contexts = await self._contexts(base, halt)
        if contexts is None:
            return
        self.controllers = [CONTROLLERS[name](ctx) for name, ctx in contexts.items()]
        recorders = list({id(r): r for ctx in contexts.values() for r in ctx.recorders}.values())
        log.info("controllers starting: %s", ",".join(c.name for c in self.controllers))
        informers.start()
        for recorder in recorders:
            recorder.start()
        try:
            synced = asyncio.ensure_future(informers.wait_for_sync())
            halted = asyncio.ensure_future(halt.wait())
            await asyncio.wait([synced, halted], return_when=asyncio.FIRST_COMPLETED)
            synced.cancel()
            if not halt.is_set():
                log.info("caches synced; controllers running")
                await asyncio.gather(*(c.run(halt) for c in self.controllers))
            halted.cancel()
        finally:
            await informers.stop()
            for recorder in recorders:
                await recorder.stop()
            await self.credentials.close()

    async def _contexts(
        self, base: ControllerContext, halt: asyncio.Event
    ) -> dict[str, ControllerContext] | None:
        """Each controller's context: the shared informers and its own client (None if halted first)."""
        out: dict[str, ControllerContext] = {}
        by_account: dict[str, ControllerContext] = {}
        backoff = Backoff(initial=0.5, maximum=10.0)
        for name in self.config.controllers:
            if CONTROLLERS[name].root_credentials:
                out[name] = base
                continue
            account = CONTROLLERS[name].account_name()
            while account not in by_account:
                try:
                    client = await self.credentials.client(account)
                except (ApiError, OSError, TimeoutError) as err:
                    log.warning("credentials for %s: %s", account, err)
                    with contextlib.suppress(TimeoutError):
                        await wait_event(halt, backoff.next())
                    if halt.is_set():
                        return None
                    continue
                by_account[account] = (
                    base if client is self.client else replace(base, client=client, _recorders={})
                )
            out[name] = by_account[account]
        return out

    # --- health and metrics --------------------------------------------------------------------------

    async def _serve(self) -> None:
        """The secure port (--secure-port=0: none, as upstream): health open, /metrics authorized."""
        options = SecureServingOptions(
            self.config.secure_port,
            self.config.bind_address,
            self.config.cert_dir,
            client_ca_file=Path(self.config.client_ca_file) if self.config.client_ca_file else None,
        )
        self._secure_port = await serve_secure_port(
            self.client, options, "kube-controller-manager", self._metrics
        )
        if self._secure_port is not None:
            self.port = self._secure_port.port

    def _metrics(self) -> bytes:
        for controller in self.controllers:
            controller.queue.observe_unfinished()
        return render([self.registry])


async def serve_forever(client: KubeClient, config: ManagerConfig) -> None:
    """Until SIGTERM/SIGINT (used by `pykubelet controller-manager`)."""
    stop = termination_event()
    manager = ControllerManager(client, config)
    try:
        await manager.run(stop)
    finally:
        with contextlib.suppress(Exception):
            await client.close()
