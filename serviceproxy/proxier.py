"""The service proxy's loop (upstream's nftables Proxier with its BoundedFrequencyRunner): informers
on Services and EndpointSlices; every change queues a sync; syncs run at most `burst` per
`min_sync_period` and at least every `sync_period`. A sync builds the whole wanted ruleset from the
caches (rules.py) and writes it in one `nft -f` transaction: a full one at start, after a failure and
every `full_sync_period`, otherwise only the difference from the last ruleset written. After a sync
that took, stale UDP conntrack entries are flushed and the health check node ports follow. Stopping leaves the rules in place (so a restart
drops no connection); `cleanup` removes the table."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubeclient.client import KubeClient
from kubeclient.events import WARNING, EventRecorder, EventSource
from kubeclient.informer import Informer, key_of
from serviceproxy.conntrack import Conntrack
from serviceproxy.healthcheck import ServiceHealthServers, local_ready_counts, wanted_ports
from serviceproxy.metrics import ProxyMetrics
from serviceproxy.model import (
    Endpoint,
    ServicePort,
    ServicePortName,
    categorize,
    service_ports,
    slice_endpoints,
)
from serviceproxy.nft import Nft, NftError
from serviceproxy.rules import NodeSettings, build, conflicts
from serviceproxy.ruleset import Existing, Ruleset, Writer

log = logging.getLogger("proxy")
Obj = dict[str, Any]
# The Warning event on a Service whose rules the proxy leaves out (the others are written).
NOT_PROGRAMMED = "FailedToProgramRules"


@dataclass
class ProxyConfig:
    node_name: str
    cluster_cidr: str = ""
    masquerade_all: bool = False
    sync_period: float = 30.0
    min_sync_period: float = 1.0
    full_sync_period: float = 3600.0
    burst_syncs: int = 2
    nodeport_ips: tuple[str, ...] | None = None  # None: NodePorts on every local address
    node_ips: tuple[str, ...] = ()
    service_cidrs: tuple[str, ...] = ()
    health_check_ips: tuple[str, ...] | None = None  # where health check node ports listen; None: all
    nft: Nft = field(default_factory=Nft)
    conntrack: Conntrack = field(default_factory=Conntrack)


@dataclass
class Health:
    """What /healthz reports (upstream's ProxierHealthServer): unhealthy once a queued change has waited
    longer than `timeout` (2 x sync period) without a successful sync."""

    timeout: float
    last_updated: float = 0.0
    queued_since: float | None = None

    def queued(self) -> None:
        if self.queued_since is None:
            self.queued_since = time.time()

    def updated(self) -> None:
        self.last_updated = time.time()
        self.queued_since = None

    def healthy(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return self.queued_since is None or now - self.queued_since <= self.timeout


TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"


def trigger_time(slice_: Obj) -> float | None:
    """A slice's last-change-trigger-time annotation as a timestamp; None without a valid one."""
    value = ((slice_.get("metadata") or {}).get("annotations") or {}).get(TRIGGER_TIME)
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class Proxier:
    def __init__(self, client: KubeClient, config: ProxyConfig, metrics: ProxyMetrics | None = None) -> None:
        self.client = client
        self.config = config
        self.metrics = metrics or ProxyMetrics()
        self.health = Health(timeout=2 * config.sync_period)
        self.writer = Writer(config.nft.table, config.nft.family)
        self.health_servers = ServiceHealthServers(config.health_check_ips, self.health.healthy)
        self.settings = NodeSettings(
            config.node_name,
            config.cluster_cidr,
            config.masquerade_all,
            nodeport_ips=config.nodeport_ips,
            node_ips=config.node_ips,
            service_cidrs=config.service_cidrs,
        )
        self.services = Informer(client, "/api/v1/services")
        self.slices = Informer(client, "/apis/discovery.k8s.io/v1/endpointslices")
        self.services.add_handler(
            on_add=self._service_changed,
            on_update=lambda o, n: self._service_changed(n, o),
            on_delete=self._service_changed,
        )
        self.slices.add_handler(
            on_add=self._slice_changed,
            on_update=lambda o, n: self._slice_changed(n, o),
            on_delete=lambda o: self._slice_changed(o, deleted=True),
        )
        self.last: Ruleset | None = None
        self.need_full = True
        self.last_full = 0.0
        self.syncs = 0
        self.failures = 0
        self._wake = asyncio.Event()
        self._pending_since: float | None = None
        self._trigger_times: list[float] = []  # the slices' last-change-trigger-times not yet synced
        self._parsed: dict[str, tuple[str, dict[ServicePortName, list[Endpoint]]]] = {}
        self._udp_endpoints: dict[ServicePortName, tuple[ServicePort, frozenset[str]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        # Service ports nft refused on their own (found by `_isolate`), left out until they change or
        # the next periodic full sync; and what was already reported, so each is said once.
        self.unwritable: dict[ServicePortName, str] = {}
        self._reported: set[tuple[ServicePortName, str]] = set()
        self.recorder = EventRecorder(client, EventSource("kube-proxy", config.node_name))

    # --- changes -------------------------------------------------------------------------------------

    def _queue(self) -> None:
        now = time.time()
        if self._pending_since is None:
            self._pending_since = now
        self.health.queued()
        self.metrics.last_queued.set(now)
        self._wake.set()

    def _service_changed(self, new: Obj, old: Obj | None = None) -> None:
        if old is not None and (old.get("metadata") or {}).get("resourceVersion") == (
            new.get("metadata") or {}
        ).get("resourceVersion"):
            return
        meta = new.get("metadata") or {}
        for name in [
            n for n in self.unwritable if (n.namespace, n.name) == (meta.get("namespace"), meta.get("name"))
        ]:
            del self.unwritable[name]  # changed: tried again
        self.metrics.service_changes.inc()
        self.metrics.service_changes_pending.inc()
        self._queue()

    def _slice_changed(self, new: Obj, old: Obj | None = None, deleted: bool = False) -> None:
        if old is not None and (old.get("metadata") or {}).get("resourceVersion") == (
            new.get("metadata") or {}
        ).get("resourceVersion"):
            return
        self.metrics.endpoint_changes.inc()
        self.metrics.endpoint_changes_pending.inc()
        when = None if deleted else trigger_time(new)
        if when is not None and (old is None or trigger_time(old) != when):
            self._trigger_times.append(when)
        self._queue()

    # --- the model from the caches -------------------------------------------------------------------

    def _endpoints(self) -> dict[ServicePortName, tuple[Endpoint, ...]]:
        merged: dict[ServicePortName, dict[str, Endpoint]] = {}
        seen_keys = set()
        for slice_ in sorted(self.slices.list(), key=lambda s: (s.get("metadata") or {}).get("name", "")):
            key = key_of(slice_)
            seen_keys.add(key)
            rv = (slice_.get("metadata") or {}).get("resourceVersion", "")
            cached = self._parsed.get(key)
            if cached is None or cached[0] != rv:
                cached = (rv, slice_endpoints(slice_))
                self._parsed[key] = cached
            for name, endpoints in cached[1].items():
                bucket = merged.setdefault(name, {})
                for ep in endpoints:
                    bucket.setdefault(ep.address, ep)
        for gone in set(self._parsed) - seen_keys:
            del self._parsed[gone]
        return {name: tuple(sorted(eps.values())) for name, eps in merged.items()}

    def wanted(self) -> tuple[Ruleset, list[ServicePort], dict[ServicePortName, tuple[Endpoint, ...]]]:
        ports = [p for s in self.services.list() for p in service_ports(s)]
        ports = [p for p in ports if p.name not in self.unwritable]
        endpoints = self._endpoints()
        return build(ports, endpoints, self.settings), ports, endpoints

    def _report(self, refused: dict[ServicePortName, str]) -> None:
        """A Warning event on each Service some of whose rules are left out (once per reason)."""
        for name, reason in refused.items():
            if (name, reason) in self._reported:
                continue
            self._reported.add((name, reason))
            log.warning("service port left out service=%s reason=%s", name, reason)
            svc = self.services.get(f"{name.namespace}/{name.name}")
            if svc is not None:
                svc = {"apiVersion": "v1", "kind": "Service", **svc}
                self.recorder.event(
                    svc, WARNING, NOT_PROGRAMMED, f"rules for service port {name} not programmed: {reason}"
                )

    async def _isolate(
        self,
        ports: list[ServicePort],
        endpoints: dict[ServicePortName, tuple[Endpoint, ...]],
        existing: Existing,
    ) -> dict[ServicePortName, str]:
        """After nft refused a full sync: the service ports whose rules nft refuses even with only the
        ones already admitted (`nft -c`, which changes nothing), found by halving; empty when the table
        without any Service is refused too (then no Service is to blame)."""

        async def refusal(subset: list[ServicePort]) -> str | None:
            try:
                await self.config.nft.check(
                    self.writer.full(build(subset, endpoints, self.settings), existing)
                )
            except NftError as err:
                return str(err)
            return None

        if await refusal([]) is not None:
            return {}
        admitted: list[ServicePort] = []
        bad: dict[ServicePortName, str] = {}
        queue = [sorted(ports, key=lambda p: p.name)]
        while queue:
            chunk = queue.pop(0)
            if not chunk:
                continue
            err = await refusal(admitted + chunk)
            if err is None:
                admitted += chunk
            elif len(chunk) == 1:
                bad[chunk[0].name] = f"nftables refused them: {err}"
            else:
                half = len(chunk) // 2
                queue[:0] = [chunk[:half], chunk[half:]]
        return bad

    # --- syncing -------------------------------------------------------------------------------------

    async def sync(self) -> bool:
        """One sync; True if the kernel now holds the wanted ruleset."""
        started = time.monotonic()
        pending_since = self._pending_since
        self._pending_since = None
        triggers, self._trigger_times = self._trigger_times, []
        self.metrics.endpoint_changes_pending.set(0)
        self.metrics.service_changes_pending.set(0)
        periodic = self.last is not None and time.monotonic() - self.last_full > self.config.full_sync_period
        if periodic:
            self.unwritable.clear()  # tried again now and then, as everything else is rewritten
        wanted, ports, endpoints = self.wanted()
        self._report(conflicts(ports))
        full = self.need_full or self.last is None or periodic
        try:
            if full:
                existing = await self.config.nft.existing()
                script = self.writer.full(wanted, existing)
                try:
                    await self.config.nft.apply(script)
                except NftError:
                    # One Service's rules must not keep every other's out: leave out the ones nft
                    # refuses on their own and write the rest (or fail as before when none is to blame).
                    bad = await self._isolate(ports, endpoints, existing)
                    if not bad:
                        raise
                    self.unwritable.update(bad)
                    self._report(bad)
                    wanted, ports, endpoints = self.wanted()
                    await self.config.nft.apply(self.writer.full(wanted, existing))
            else:
                assert self.last is not None
                script = self.writer.partial(self.last, wanted)
                if script:
                    await self.config.nft.apply(script)
        except (NftError, OSError) as err:
            self.failures += 1
            self.need_full = True
            self.metrics.sync_failures.inc()
            if self._pending_since is None:
                self._pending_since = pending_since
            self._trigger_times = triggers + self._trigger_times
            log.error("nftables sync failed full=%s error=%s", full, err)
            return False
        self.syncs += 1
        self.last = wanted
        if full:
            self.need_full = False
            self.last_full = time.monotonic()
        elapsed = time.monotonic() - started
        self.metrics.sync_duration.observe(elapsed)
        (self.metrics.full_sync_duration if full else self.metrics.partial_sync_duration).observe(elapsed)
        self.metrics.last_sync.set(time.time())
        # From the change that caused it (the EndpointSlice controller's trigger time), as upstream.
        done = time.time()
        for when in triggers:
            self.metrics.network_programming.observe(max(0.0, done - when))
        self._count_no_local(ports, endpoints)
        self.health.updated()
        log.info(
            "synced full=%s services=%d chains=%d elapsed=%.3fs",
            full,
            len(ports),
            len(wanted.chains),
            elapsed,
        )
        await self._flush_udp(ports, endpoints)
        await self.health_servers.sync(
            wanted_ports(ports), local_ready_counts(ports, endpoints, self.config.node_name)
        )
        return True

    def _count_no_local(
        self, ports: list[ServicePort], endpoints: dict[ServicePortName, tuple[Endpoint, ...]]
    ) -> None:
        internal = external = 0
        for svc in ports:
            cat = categorize(svc, endpoints.get(svc.name, ()), self.config.node_name)
            if cat.has_any and not cat.local:
                internal += svc.internal_local
                external += svc.external_local and svc.externally_accessible
        self.metrics.no_local_endpoints.labels("internal").set(internal)
        self.metrics.no_local_endpoints.labels("external").set(external)

    async def _flush_udp(
        self, ports: list[ServicePort], endpoints: dict[ServicePortName, tuple[Endpoint, ...]]
    ) -> None:
        now: dict[ServicePortName, tuple[ServicePort, frozenset[str]]] = {}
        for svc in ports:
            if svc.protocol != "udp":
                continue
            cat = categorize(svc, endpoints.get(svc.name, ()), self.config.node_name)
            now[svc.name] = (svc, frozenset(e.ip for e in cat.reachable))
        jobs = []
        for name, (svc, ips) in now.items():
            before = self._udp_endpoints.get(name)
            old_ips = before[1] if before else frozenset()
            if ips and not old_ips:
                jobs.append(self.config.conntrack.clear_service(svc.cluster_ip))
                if svc.node_port:
                    jobs.append(self.config.conntrack.clear_node_port(svc.node_port))
            for ip in old_ips - ips:
                jobs.append(self.config.conntrack.clear_nat(svc.cluster_ip, ip))
                if svc.node_port:
                    jobs.append(self.config.conntrack.clear_port_nat(svc.node_port, ip))
        for name, (svc, old_ips) in self._udp_endpoints.items():
            if name not in now:
                for ip in old_ips:
                    jobs.append(self.config.conntrack.clear_nat(svc.cluster_ip, ip))
        self._udp_endpoints = now
        if jobs:
            await asyncio.gather(*jobs)

    async def run(self, stop: asyncio.Event) -> None:
        """Informers, then the sync loop until `stop` is set. The rules stay when it ends."""
        self._tasks = [
            asyncio.create_task(self.services.run(), name="services informer"),
            asyncio.create_task(self.slices.run(), name="endpointslices informer"),
        ]
        self.recorder.start()
        try:
            waiter = asyncio.create_task(stop.wait())
            synced = asyncio.gather(self.services.synced.wait(), self.slices.synced.wait())
            await asyncio.wait({waiter, synced}, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                synced.cancel()
                return
            await self._loop(stop)
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self.health_servers.close()
            await self.recorder.stop()

    async def _loop(self, stop: asyncio.Event) -> None:
        recent: list[float] = []
        retry_at: float | None = None
        self._wake.set()  # the first sync, as soon as both caches are filled
        while not stop.is_set():
            deadline = retry_at if retry_at is not None else self.config.sync_period
            wake = asyncio.create_task(self._wake.wait())
            halt = asyncio.create_task(stop.wait())
            await asyncio.wait({wake, halt}, timeout=deadline, return_when=asyncio.FIRST_COMPLETED)
            wake.cancel()
            halt.cancel()
            if stop.is_set():
                return
            # At most `burst_syncs` per min_sync_period (the BoundedFrequencyRunner's token bucket).
            now = time.monotonic()
            recent = [t for t in recent if now - t < self.config.min_sync_period]
            if len(recent) >= self.config.burst_syncs:
                await asyncio.sleep(self.config.min_sync_period - (now - recent[0]))
            self._wake.clear()
            recent.append(time.monotonic())
            ok = await self.sync()
            retry_at = None if ok else self.config.sync_period

    async def cleanup(self) -> bool:
        return await self.config.nft.delete_table()
