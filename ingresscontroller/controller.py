"""The control loop: Ingresses of our IngressClass, with the Services, EndpointSlices and Secrets they
name, watched through informers; every change wakes one sync, which builds the configuration
(`model.build`), writes the certificates and nginx.conf, and applies them when they changed (`nginx -t`,
then `nginx -s reload`). A Gateway listener's port another process took between the bind check and
nginx's reload costs that listener alone (PortUnavailable; the configuration without it is applied at
once), as a port found held by the check does; both are checked again every PORT_RECHECK seconds.

One bad Ingress never breaks the others: what the model cannot serve is left out before nginx sees it
(a missing Service or TLS Secret is served as ingress-nginx serves it, with a Warning);
should nginx still refuse the whole configuration, each Ingress is tried alone and those nginx refuses
are left out too (until they change). Each left-out Ingress gets a Warning event (once per reason) and
loses our address from its status.

Every replica serves; only the one holding the Lease (ingress-nginx's election) writes
`status.loadBalancer.ingress` (the address it listens on) of the Ingresses it serves, and the Gateway
API's statuses: beside the syncs (`statuswork`), so a change is never held behind a thousand status
writes. A change after a quiet spell is synced at once; changes during or right after a sync wait out
COALESCE (in a burst, as long as the last sync took) and come together in the next one.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingresscontroller import gateway, model
from ingresscontroller.gatewaykinds import GatewayKinds
from ingresscontroller.gatewaystatus import StatusWriter
from ingresscontroller.listenerports import Ports
from ingresscontroller.nginx import Nginx, NginxError, PortsTaken, leftover_master
from ingresscontroller.nginxconf import Files, Listen, render
from ingresscontroller.portcheck import held_elsewhere
from ingresscontroller.statuswork import StatusWork
from ingresscontroller.tlscerts import check_pair
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL, WARNING, EventRecorder, EventSource
from kubeclient.informer import Informer, key_of, resource_version
from kubeclient.leaderelection import LeaderElection, LeaderElector, run_as_leader
from kubeclient.serving import ensure_self_signed

log = logging.getLogger("ingresscontroller")

Obj = dict[str, Any]
INGRESSES = "/apis/networking.k8s.io/v1/ingresses"
COMPONENT = "nginx-ingress-controller"
PORT_RECHECK = 10.0  # seconds between checks of listener ports another process holds
FREEZE_STEP = 100  # cached objects more than at the last gc.freeze before the next one
COALESCE = 0.1  # seconds after a sync before the next one starts, so a burst of changes is one sync


def settle_delay(last_sync_end: float, now: float, spacing: float = 0.0) -> float:
    """How long a woken loop waits before it syncs: a change after a quiet spell is synced at once, one
    right after a sync waits out the rest of COALESCE (the burst it belongs to then comes in one sync).
    In a burst (more than one change came during the last sync) `spacing` is how long that sync took,
    so nginx reloads at most half the time: back to back, syncs had it reload 176 times while 1 000
    objects were created, and that CPU went from the API server and the node."""
    return max(0.0, last_sync_end + max(COALESCE, spacing) - now)


@dataclass(frozen=True)
class Served:
    """What one sync served, handed to the status writes."""

    ingresses: list[Obj]
    served: frozenset[str]
    statuses: gateway.Statuses | None


@dataclass
class ControllerConfig:
    controller_name: str  # the IngressClass controller value we implement
    state_dir: Path
    listen: Listen
    publish_address: str  # written into the Ingresses' status
    election: LeaderElection = field(
        default_factory=lambda: LeaderElection("ingress-nginx-leader", namespace="ingress-nginx")
    )
    nginx_binary: str = "nginx"
    gateway_controller: str = "pykubelet.io/gateway-controller"  # the GatewayClass controllerName served
    gateway_class: str = ""  # a GatewayClass to create once its CRD exists ("" = none)
    reserved_ports: tuple[range, ...] = ()  # ports no Gateway listener may have (PortUnavailable)


class IngressController:
    def __init__(self, client: KubeClient, config: ControllerConfig) -> None:
        self.client = client
        self.config = config
        root = config.state_dir
        for sub in ("certs", "tmp"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        cert, key = ensure_self_signed(root / "certs", "ingress.local", [], "default-fake")
        self.files = Files(root, cert, key)
        self.nginx = Nginx(root, config.nginx_binary)
        self.classes = Informer(client, "/apis/networking.k8s.io/v1/ingressclasses")
        self.ingresses = Informer(client, INGRESSES)
        self.services = Informer(client, "/api/v1/services")
        self.slices = Informer(client, "/apis/discovery.k8s.io/v1/endpointslices")
        self.secrets = Informer(client, "/api/v1/secrets")
        self.namespaces = Informer(client, "/api/v1/namespaces")  # for allowedRoutes `from: Selector`
        self.informers = [
            self.classes,
            self.ingresses,
            self.services,
            self.slices,
            self.secrets,
            self.namespaces,
        ]
        # The Gateway API's kinds exist only once their CRDs are installed (maybe after the start):
        # their informers run while the CRDs are there, and the Gateway API is served once they listed.
        self.kinds = GatewayKinds(client, self._wake_up, config.gateway_controller, config.gateway_class)
        self.informers.append(self.kinds.crds)
        self.gateway_caches = self.kinds.caches
        self.gateway_status = StatusWriter(client, self.gateway_caches, config.gateway_controller)
        for informer in self.informers:
            informer.add_handler(
                on_add=lambda _o: self._wake_up(),
                on_update=lambda o, n: self._wake_up() if model.changes_config(o, n) else None,
                on_delete=lambda _o: self._wake_up(),
            )
        self.recorder = EventRecorder(client, EventSource(COMPONENT))
        self.status_work: StatusWork[Served] = StatusWork(self._write_statuses)
        self._wake = asyncio.Event()
        self.leading = False
        self.syncs = 0
        self.applied = ""  # digest of the configuration nginx runs
        self.refused: dict[str, tuple[str, str]] = {}  # ingress key -> (resourceVersion, nginx's complaint)
        self._reported: dict[str, tuple[str, str]] = {}  # ingress key -> (reason, message) said
        self._synced_versions: dict[str, int] = {}  # ingress key -> the generation a Sync event was said for
        self.served: list[str] = []
        self.listening: set[int] = set()  # Gateway listener ports the running nginx listens on
        self.blocked: dict[int, str] = {}  # listener ports another process holds (PortUnavailable)
        # Which listener ports another process holds (tests check a port taken right after this check).
        self.check_ports: Callable[[str, Iterable[int]], dict[int, str]] = held_elsewhere
        self.changes = 0  # changes that woke the loop so far
        self.frozen_at = -1  # objects cached when the GC last froze them (-1: never)

    # --- the sync ------------------------------------------------------------------------------------

    def _ours(self) -> list[Obj]:
        names, _ = model.our_classes(self.classes.list(), self.config.controller_name)
        return [i for i in self.ingresses.list() if model.is_ours(i, names)]

    def _cluster(self) -> model.Cluster:
        slices: dict[str, list[Obj]] = {}
        for slice_ in self.slices.list():
            meta = slice_.get("metadata") or {}
            service = (meta.get("labels") or {}).get(model.SERVICE_NAME_LABEL)
            if service:
                slices.setdefault(f"{meta.get('namespace', '')}/{service}", []).append(slice_)
        return model.Cluster(
            services={key_of(s): s for s in self.services.list()},
            slices=slices,
            secrets={key_of(s): s for s in self.secrets.list()},
            namespace_labels={
                n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in self.namespaces.list()
            },
        )

    def _build(
        self, ingresses: list[Obj], cluster: model.Cluster, taken: Mapping[int, str] | None = None
    ) -> tuple[model.Config, gateway.Statuses | None]:
        """The configuration and the Gateway API statuses; listener ports another process holds (checked
        by binding them, those the running nginx holds excepted) are left out as PortUnavailable, and so
        are those in `taken` (nginx could not listen there at this sync's reload: taken since the check;
        checked again at the next sync)."""
        self.blocked = dict(taken or {})
        config, statuses = self._build_once(ingresses, cluster)
        if not self.nginx.running and leftover_master(self.nginx.root / "nginx.pid", self.nginx.conf):
            return config, statuses  # an nginx an earlier run left holds its ports: the start stops it first
        wanted = {port for port, _ in config.ports} - self.listening
        held = self.check_ports(self.config.listen.address, sorted(wanted))
        if held:
            self.blocked.update(held)
            config, statuses = self._build_once(ingresses, cluster)
        return config, statuses

    def _build_once(
        self, ingresses: list[Obj], cluster: model.Cluster
    ) -> tuple[model.Config, gateway.Statuses | None]:
        config = model.build(ingresses, cluster, check_pair, excluded=frozenset(self.refused))
        caches = self.gateway_caches
        if not self.kinds.ready:
            return config, None
        statuses = gateway.build(
            config,
            caches["gatewayclasses"].list(),
            caches["gateways"].list(),
            caches["httproutes"].list(),
            cluster,
            self.config.gateway_controller,
            self.config.publish_address,
            grants=caches["referencegrants"].list(),
            check=check_pair,
            ports=Ports(
                self.config.listen.http_port,
                self.config.listen.https_port,
                self.blocked,
                self.config.reserved_ports,
            ),
        )
        return config, statuses

    def _write_certificates(self, config: model.Config) -> None:
        for certificate in config.certificates.values():
            for path, data in (
                (self.files.cert(certificate.name), certificate.cert),
                (self.files.key(certificate.name), certificate.key),
            ):
                if path.exists() and path.read_bytes() == data:
                    continue
                tmp = path.with_suffix(".tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)

    def _digest(self, text: str, config: model.Config) -> str:
        h = hashlib.sha256(text.encode())
        for name in sorted(config.certificates):
            h.update(config.certificates[name].cert + config.certificates[name].key)
        return h.hexdigest()

    async def _isolate(self, ingresses: list[Obj], cluster: model.Cluster) -> None:
        """nginx refused the whole configuration: try each served Ingress alone and leave out those it
        refuses (until they change)."""
        for ingress in ingresses:
            key = key_of(ingress)
            if key in self.refused:
                continue
            alone = model.build([ingress], cluster, check_pair)
            if not alone.served:
                continue
            self._write_certificates(alone)
            candidate = self.config.state_dir / "nginx.conf.probe"
            candidate.write_text(render(alone, self.config.listen, self.files))
            why = await self.nginx.test(candidate)
            if why is not None:
                self.refused[key] = (resource_version(ingress), why)

    async def _apply(
        self,
        ingresses: list[Obj],
        cluster: model.Cluster,
        config: model.Config,
        statuses: gateway.Statuses | None,
        text: str,
    ) -> tuple[model.Config, gateway.Statuses | None, str]:
        """nginx takes `text` (the configuration, its statuses and digest are returned as applied). When
        it cannot listen on a listener's port (another process took it after the check), that listener is
        left out (PortUnavailable) and the rest applied at once, so every other route stays served; when
        it refuses the configuration otherwise, each Ingress is tried alone and those refused are left
        out. Still refused: NginxError, the running configuration stays (the sync is retried)."""
        taken: dict[int, str] = {}
        isolated = False
        while True:
            self._write_certificates(config)
            try:
                await self.nginx.apply(text)
                return config, statuses, self._digest(text, config)
            except PortsTaken as err:
                listeners = {port for port, _ in config.ports}
                fresh = {p: why for p, why in err.ports.items() if p in listeners and p not in taken}
                if not fresh:
                    raise  # not a listener's port (the Ingress ports): nothing to leave out
                log.warning(
                    "listener ports taken since their check; applied without them ports=%s", sorted(fresh)
                )
                taken.update(
                    {p: f"port {p}: nginx could not listen on it: {why}" for p, why in fresh.items()}
                )
            except NginxError as err:
                if isolated:
                    raise
                isolated = True
                log.error("nginx refused the configuration error=%r; trying each Ingress alone", str(err))
                await self._isolate(ingresses, cluster)
            config, statuses = self._build(ingresses, cluster, taken)
            text = render(config, self.config.listen, self.files)

    def _wake_up(self) -> None:
        self.changes += 1
        self._wake.set()

    async def sync(self) -> None:
        self.syncs += 1
        self.kinds.reconcile()
        ingresses = self._ours()
        current = {key_of(i): resource_version(i) for i in ingresses}
        self.refused = {k: v for k, v in self.refused.items() if current.get(k) == v[0]}
        cluster = self._cluster()
        if not self.nginx.running:
            self.listening = set()  # every listener port is checked before nginx starts
        config, statuses = self._build(ingresses, cluster)
        text = render(config, self.config.listen, self.files)
        digest = self._digest(text, config)
        if digest != self.applied or not self.nginx.running:
            config, statuses, digest = await self._apply(ingresses, cluster, config, statuses, text)
            self.applied = digest
            self.listening = {port for port, _ in config.ports}
            log.info(
                "configuration applied servers=%d upstreams=%d ingresses=%d",
                len(config.servers),
                len(config.upstreams),
                len(config.served),
            )
        self.served = config.served
        problems = [
            *config.problems,
            *(
                model.Problem(k, "ConfigRefused", f"nginx refused it: {why}")
                for k, (_, why) in self.refused.items()
            ),
        ]
        self._report(ingresses, config.served, problems)
        self.status_work.hand_over(Served(ingresses, frozenset(config.served), statuses))

    async def _write_statuses(self, served: Served) -> None:
        """The Lease holder's writes for what a sync served (StatusWork runs them beside the syncs)."""
        if not self.leading:
            return
        await self._write_status(served.ingresses, served.served)
        await self.kinds.ensure_class()
        if served.statuses is not None:
            await self.gateway_status.write(served.statuses)

    def _report(self, ingresses: list[Obj], served: list[str], problems: list[model.Problem]) -> None:
        by_key = {
            key_of(i): {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", **i} for i in ingresses
        }
        troubled = {p.ingress for p in problems}
        serving = set(served)
        for problem in problems:
            said = (problem.reason, problem.message)
            if self._reported.get(problem.ingress) == said or problem.ingress not in by_key:
                continue
            self._reported[problem.ingress] = said
            self._synced_versions.pop(problem.ingress, None)
            kept = problem.ingress in serving  # served anyway (a missing Service, an unusable Secret)
            log.warning(
                "ingress %s ingress=%s reason=%s message=%r",
                "served with a problem" if kept else "left out",
                problem.ingress,
                problem.reason,
                problem.message,
            )
            self.recorder.event(
                by_key[problem.ingress],
                WARNING,
                problem.reason,
                problem.message if kept else f"left out of the configuration: {problem.message}",
            )
        for key in served:
            if key not in troubled:
                self._reported.pop(key, None)
            version = int(by_key[key]["metadata"].get("generation") or 0)
            if self._synced_versions.get(key) != version:
                self._synced_versions[key] = version
                self.recorder.event(by_key[key], NORMAL, "Sync", "Scheduled for sync")

    def freeze_if_grown(self) -> None:
        """The cached objects live as long as the process: once the caches hold a quarter more than
        when they were last frozen and at least FREEZE_STEP more (the first time: after the first sync), garbage is collected and
        every object left is frozen out of the cyclic GC's full passes (gc.freeze, as long-lived
        services do after start-up), which at thousands of cached objects took 0.1 to 0.3 s, often
        inside a change's sync. A frozen object is still freed by its reference count when its cache
        drops it; cached API objects (JSON) hold no reference cycles."""
        cached = sum(len(i.store) for i in (*self.informers, *self.gateway_caches.values()))
        if self.frozen_at >= 0 and cached <= max(self.frozen_at * 5 // 4, self.frozen_at + FREEZE_STEP):
            return
        gc.collect()
        gc.freeze()
        self.frozen_at = cached

    async def _write_status(self, ingresses: list[Obj], served: frozenset[str]) -> None:
        ours: list[Obj] = [{"ip": self.config.publish_address}]
        listen = self.config.listen
        if (listen.http_port, listen.https_port) != (80, 443):
            # Not the standard ports (several stacks on one host): said in the status, HTTP first.
            ours[0]["ports"] = [{"port": p, "protocol": "TCP"} for p in (listen.http_port, listen.https_port)]
        for seen in ingresses:
            key = key_of(seen)
            ingress = self.ingresses.get(key)  # as it is now: the hand-over may be older than the cache
            if ingress is None:
                continue
            have = ((ingress.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
            want = ours if key in served else [e for e in have if e.get("ip") != self.config.publish_address]
            if have == want:
                continue
            meta = ingress["metadata"]
            body = {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                **ingress,
                "status": {"loadBalancer": {"ingress": want} if want else {}},
            }
            path = (
                f"/apis/networking.k8s.io/v1/namespaces/{meta['namespace']}/ingresses/{meta['name']}/status"
            )
            try:
                await self.client.replace(path, body)
            except ApiError as err:
                log.info("status not written ingress=%s error=%r (retried on the next change)", key, str(err))

    # --- running -------------------------------------------------------------------------------------

    async def _lead(self, halt: asyncio.Event) -> None:
        self.leading = True
        self._wake.set()
        try:
            await halt.wait()
        finally:
            self.leading = False

    async def _elect(self, stop: asyncio.Event) -> None:
        elector = LeaderElector(self.client, self.config.election) if self.config.election.enabled else None
        while not stop.is_set():
            try:
                await run_as_leader(elector, stop, self._lead)
            except Exception as err:  # lost the lease: stand by and try again, serving meanwhile
                log.warning("leader election error=%r", str(err))
                await asyncio.sleep(self.config.election.retry_period)

    async def run(self, stop: asyncio.Event) -> None:
        tasks = [asyncio.create_task(i.run()) for i in self.informers]
        tasks.append(asyncio.create_task(self.status_work.run()))
        self.recorder.start()
        elector = asyncio.create_task(self._elect(stop))
        try:
            # Ingresses are served without waiting for the CRD list (an identity that may not list CRDs
            # still serves them; the Gateway API then waits).
            await asyncio.gather(*(i.synced.wait() for i in self.informers if i is not self.kinds.crds))
            log.info("caches synced controller=%s", self.config.controller_name)
            loop = asyncio.get_running_loop()
            while not stop.is_set():
                self._wake.clear()
                began, seen = loop.time(), self.changes
                try:
                    await self.sync()
                    self.freeze_if_grown()
                except (NginxError, OSError) as err:
                    log.error("sync failed error=%r; retried in 5 s", str(err))
                    await _either(stop, self._wake, 5.0)
                    self._wake.set()
                    continue
                ended = loop.time()
                spacing = ended - began if self.changes - seen > 1 else 0.0
                # A listener port another process holds is checked again now and then (it may be freed).
                await _either(stop, self._wake, PORT_RECHECK if self.blocked else None)
                await asyncio.sleep(settle_delay(ended, loop.time(), spacing))
        finally:
            elector.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(elector, *tasks, return_exceptions=True)
            await self.kinds.stop()
            await self.nginx.stop()
            await self.recorder.stop()


async def _either(stop: asyncio.Event, wake: asyncio.Event, limit: float | None) -> None:
    waiters = [asyncio.create_task(stop.wait()), asyncio.create_task(wake.wait())]
    await asyncio.wait(waiters, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waiters:
        waiter.cancel()
