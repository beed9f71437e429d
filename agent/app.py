"""Wiring of the node agent: one event loop running the node status loop, the Lease heartbeat, the pod
informer, the PLEG relist, the event poster and the pod workers.

Stopping the agent (SIGTERM/SIGINT) stops only the agent: pods keep running and a restarted agent
adopts them, as with the upstream kubelet.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Any

from agent.cni.node import NodeNetwork
from agent.config import AgentConfig
from agent.cri import (
    CRIClient,
    CRIError,
    IncompatibleRuntimeError,
    RuntimeUnreachableError,
)
from agent.cri.client import Timeouts
from agent.csi.registry import DriverRegistry
from agent.csi.watcher import PluginWatcher
from agent.kube.objects import ObjectReader
from agent.kube.objectwatch import ObjectWatches
from agent.kube.pods import node_pod_informer, pod_by_name
from agent.kube.services import service_informer, services_of
from agent.kube.tokens import CredentialClient
from agent.metrics import KubeletMetrics
from agent.node.bootstrap import bootstrap_client, paths_for
from agent.node.certrotation import CertRotator
from agent.node.controller import NodeController
from agent.node.csinode import CSINodeWriter
from agent.node.images import node_images
from agent.node.lease import LeaseController
from agent.node.runtime import RuntimeTracker, runtime_status
from agent.node.servingcert import ServingCertManager
from agent.node.status import RuntimeHealth
from agent.pods.backoff import BackoffTable
from agent.pods.context import PodContext
from agent.pods.dns import DNS, parse_resolv_conf
from agent.pods.env import field_value, resource_value
from agent.pods.events import kubelet_recorder
from agent.pods.images import ImageManager
from agent.pods.logrotate import LogRotator, RotationPolicy
from agent.pods.manager import PodManager
from agent.pods.runtime import RuntimeInspector
from agent.pods.status_manager import StatusManager
from agent.probes.handlers import user_agent
from agent.probes.hooks import HookRunner
from agent.probes.manager import ProberManager
from agent.server import KubeletServer
from agent.server.auth import KubeletAuth
from agent.server.healthz import HealthzServer
from agent.server.tls import ensure_self_signed, server_context
from agent.staticpods.keys import is_mirror
from agent.staticpods.mirror import MirrorPods
from agent.staticpods.source import StaticPodSource
from agent.stats.provider import StatsConfig, StatsProvider, pods_cgroup
from agent.volumes import VolumeManager, default_table
from agent.volumes.csi import CSIPlugin
from agent.volumes.emptydir import allocatable_memory
from agent.volumes.tokens import TokenManager
from kubeclient import quantity
from kubeclient.backoff import Backoff
from kubeclient.client import KubeClient
from kubeclient.config import load_config
from kubeclient.errors import ApiError
from kubeclient.eventloop import termination_event
from kubeclient.events import WARNING
from kubeclient.informer import Informer
from kubeclient.version import KUBERNETES_VERSION

log = logging.getLogger("agent")
POD_CIDR_POLL = 0.5  # seconds between reads of the node while it waits for the control plane's pod CIDR
# Connections the API and event clients keep. Upstream's kubelet sends every call over one HTTP/2
# connection; over HTTP/1.1 a pool opens one per call in flight, and a 110-pod burst (token requests,
# status patches, events all at once) opened 64 for each client, a TLS handshake each. The rate limits
# (kubeAPIQPS, eventRecordQPS: 50/s) keep a handful busy; the two informer watches hold one each.
API_CONNECTIONS, EVENT_CONNECTIONS = 16, 8


async def connect_runtime(cfg: AgentConfig) -> CRIClient:
    """Connect to the runtime, waiting for it to come up (as upstream does at start)."""
    backoff = Backoff(initial=0.5, maximum=5.0)
    while True:
        try:
            return await CRIClient.connect(
                cfg.container_runtime_endpoint,
                cfg.image_service_endpoint,
                Timeouts(mutate=cfg.runtime_request_timeout),
            )
        except RuntimeUnreachableError as err:
            delay = backoff.next()
            log.warning(
                "runtime not reachable endpoint=%s error=%r retry_in=%.1fs",
                cfg.container_runtime_endpoint,
                str(err),
                delay,
            )
            await asyncio.sleep(delay)


def read_host_dns(path: str) -> DNS:
    if not path:
        return DNS()
    try:
        return parse_resolv_conf(Path(path).read_text())
    except OSError:
        log.warning("resolv.conf not readable path=%s", path)
        return DNS()


class Agent:
    def __init__(self, cfg: AgentConfig) -> None:
        self.cfg = cfg
        cluster = load_config(cfg.kubeconfig)
        self.client = KubeClient(
            cluster,
            qps=cfg.kube_api_qps,
            burst=cfg.kube_api_burst,
            component="kubelet",
            max_connections=API_CONNECTIONS,
        )
        self.event_client = KubeClient(
            cluster,
            qps=cfg.event_record_qps,
            burst=cfg.event_burst,
            component="kubelet",
            max_connections=EVENT_CONNECTIONS,
        )
        # ConfigMaps and Secrets the pods name are watched one by one (upstream's Watch strategy). Each
        # watch holds a connection (HTTP/1.1; upstream's HTTP/2 multiplexes them), so they have a pool of
        # their own without a bound, and cannot starve the node's other calls; the rate limit is shared.
        self.watch_client = KubeClient(cluster, component="kubelet", max_connections=0)
        self.watch_client.limiter = self.client.limiter
        self.objects = ObjectReader(self.client, ObjectWatches(self.watch_client))
        self.csi_drivers = DriverRegistry()
        self.plugin_watcher: PluginWatcher | None = None
        self.credentials = CredentialClient(self.client)
        self.cri: CRIClient | None = None
        self.node: NodeController | None = None
        self.lease: LeaseController | None = None
        self.pods: PodManager | None = None
        self.informer: Informer | None = None
        self.services: Informer | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self.server: KubeletServer | None = None
        self.rotator: CertRotator | None = None
        self.serving: ServingCertManager | None = None
        self.network: NodeNetwork | None = None
        self.metrics = KubeletMetrics(cfg.node_name)
        self.healthz: HealthzServer | None = None
        self.static: StaticPodSource | None = None

    async def start(self) -> None:
        cfg = self.cfg
        Path(cfg.root_dir).mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once, at start
        if cfg.healthz_port > 0:
            self.healthz = HealthzServer()
            self._spawn(self.healthz.serve(cfg.healthz_bind_address, cfg.healthz_port), "healthz")
        current = paths_for(cfg.root_dir, cfg.kubeconfig, cfg.cert_dir).current
        if cfg.rotate_certificates and current.exists():
            self.rotator = CertRotator(
                [self.client, self.event_client, self.watch_client], cfg.node_name, current
            )
            self.rotator.start()
        self.cri = cri = await connect_runtime(cfg)
        cri.observer = self.metrics.runtime_operation
        log.info(
            "runtime connected name=%s version=%s",
            cri.version.runtime_name if cri.version else "",
            cri.version.runtime_version if cri.version else "",
        )
        if cfg.pod_cidr:
            try:
                await cri.update_runtime_config(cfg.pod_cidr)
            except CRIError as err:
                log.warning("UpdateRuntimeConfig failed pod_cidr=%s error=%r", cfg.pod_cidr, str(err))
        runtime = RuntimeTracker(lambda: runtime_status(cri))

        async def health() -> RuntimeHealth:
            # Until the node is first posted Ready the runtime is asked each time (the fast status
            # update looks every 100 ms); afterwards the 5 s loop's judgement is read.
            ready = self.node is not None and self.node.ready()
            state = await (runtime.current() if ready else runtime.check())
            problem = self.pods.pleg_problem() if self.pods is not None else None
            return dataclasses.replace(state, pleg=problem) if problem else state

        recorder = kubelet_recorder(self.event_client, cfg.node_name)
        self.node = NodeController(
            self.client, cfg, health, lambda: node_images(cri), recorder, self._volumes_in_use
        )
        ctx = PodContext(
            cfg=cfg,
            cri=cri,
            inspector=RuntimeInspector(cri),
            images=ImageManager(
                cri,
                recorder,
                self.objects.fetch,
                cfg.serialize_image_pulls,
                BackoffTable(cfg.backoff_initial, cfg.backoff_max),
            ),
            recorder=recorder,
            status=StatusManager(self.client),
            crash_backoff=BackoffTable(cfg.backoff_initial, cfg.backoff_max),
            fetch=self.objects.fetch,
            host_ip=lambda: self.node.internal_ip if self.node else "",
            node_hostname=cfg.node_name,
            host_dns=await asyncio.to_thread(read_host_dns, cfg.resolv_conf),
            metrics=self.metrics,
        )
        csi = CSIPlugin(self.csi_drivers, cfg.node_name)
        ctx.volumes = VolumeManager(
            cfg.root_dir,
            self.objects.fetch,
            lambda pod, path: field_value(
                pod, path, ctx.host_ip(), (pod.get("status") or {}).get("podIP", "")
            ),
            # A volume item names its container (upstream requires containerName there).
            lambda pod, ref: resource_value(pod, {}, ref, ctx.node_allocatable()),
            tokens=TokenManager(self.credentials.request_token),
            node_memory=lambda: allocatable_memory(ctx.node_allocatable()),
            table=default_table(extra=[csi], claim_sources=[csi]),
            patch=lambda path, body: self.client.patch(path, body, "application/merge-patch+json"),
            record=recorder.event,
        )
        self.pods = PodManager(ctx)
        ctx.prober = ProberManager.for_runtime(
            cri, user_agent(KUBERNETES_VERSION), self.pods.wake, self.pods.container_event
        )
        ctx.hooks = HookRunner(cri, user_agent(KUBERNETES_VERSION, "lifecycle"))
        self.informer = node_pod_informer(self.client, cfg.node_name)
        services = self.services = service_informer(self.client)
        ctx.services = lambda: services_of(services)
        self._spawn(services.run(), "service-informer")  # early: pods wait for its first list
        self.pods.attach(self.informer)
        objects = self.objects  # its copies are kept while a pod on the node names them
        self.informer.add_handler(
            on_add=objects.register_pod,
            on_update=lambda _old, pod: objects.register_pod(pod),
            on_delete=lambda pod: objects.unregister_pod(pod["metadata"]["uid"]),
        )
        self._spawn(recorder.run(), "events")
        self._spawn(runtime.run(), "runtime-up")
        self._spawn(ctx.prober.run(), "prober-updates")
        self._spawn(ctx.status.run(), "pod-status")
        self._spawn(self.node.run(), "node-status")
        self._start_mirror_pods()
        if cfg.static_pod_path:
            await self._start_static_pods()
        await self.node.registered.wait()
        ctx.node_memory = self.node.facts.memory_bytes if self.node.facts else 0
        ctx.node_allocatable = lambda: (
            (((self.node.node if self.node else None) or {}).get("status") or {}).get("allocatable") or {}
        )
        ctx.node = lambda: self.node.current() if self.node else None
        ctx.fresh_node = self.node.refresh
        node_cidr = ((self.node.node or {}).get("spec") or {}).get("podCIDR", "")
        if not cfg.pod_cidr and node_cidr:
            # As upstream: a CIDR allocated to the Node by the control plane is handed to the runtime.
            try:
                await cri.update_runtime_config(node_cidr)
            except CRIError as err:
                log.warning("UpdateRuntimeConfig failed pod_cidr=%s error=%r", node_cidr, str(err))
        pod_cidr = cfg.pod_cidr or node_cidr
        if cfg.cni_conf_dir and pod_cidr:
            await self._start_network(pod_cidr)
        elif cfg.cni_conf_dir:
            self._spawn(self._await_pod_cidr(), "pod-cidr")
        self.lease = LeaseController(
            self.client,
            cfg.node_name,
            lambda: self.node.uid if self.node else "",
            cfg.node_lease_duration_seconds,
        )
        self._spawn(self.lease.run(), "lease")
        self._start_csi_plugins()
        if cfg.enable_server and cfg.port > 0:
            await self._start_server(cri)
        self._spawn(self.informer.run(), "pod-informer")
        if self.static is None:
            self._spawn(self.pods.run_pleg(), "pleg")
        rotation = RotationPolicy(
            quantity.value(cfg.container_log_max_size), max(cfg.container_log_max_files, 2)
        )
        self._spawn(LogRotator(cri, rotation).run(), "log-rotation")
        log.info("agent running node=%s", cfg.node_name)

    def _start_mirror_pods(self) -> None:
        """Mirror pods follow the static pods; without staticPodPath every mirror pod bound here is an
        orphan and goes, as upstream's pod cleanup does."""
        assert self.pods is not None and self.node is not None and self.informer is not None
        node = self.node
        mirrors = MirrorPods(
            self.client,
            self.cfg.node_name,
            lambda: node.uid,
            lambda: self.static.list() if self.static is not None else [],
            self.informer.list,
            self.informer.synced.is_set,
        )
        self.pods.mirrors = mirrors
        self._spawn(mirrors.run(), "mirror-pods")

    async def _start_static_pods(self) -> None:
        """staticPodPath's pods run from the disk at once, before the Node is registered (so while the
        API server is away, or not there yet), admitted against the Node built here until the API has
        it; their mirror pods follow once it does."""
        assert self.pods is not None and self.node is not None and self.informer is not None
        cfg, pods, node = self.cfg, self.pods, self.node
        await node.build_local()
        self.pods.ctx.node = node.current
        self.static = StaticPodSource(
            cfg.static_pod_path,
            cfg.node_name,
            cfg.file_check_frequency,
            pods.on_static_change,
            lambda reason, message: node.event(WARNING, reason, message),
        )
        pods.attach_static(self.static)
        await self.static.rescan()
        self._spawn(self.static.run(), "static-pods")
        self._spawn(pods.run_pleg(), "pleg")
        log.info("static pods read path=%s count=%d", cfg.static_pod_path, len(self.static.pods))

    async def _await_pod_cidr(self) -> None:
        """A node registered without a pod CIDR waits for the control plane's (the node IPAM's
        spec.podCIDR), as upstream's kubelet picks it up from its node status loop; then the runtime is
        told and the pod network started. Until then the node is NotReady (no network)."""
        log.warning("no pod CIDR yet (spec.podCIDR or podCIDR in the config): waiting for the node's")
        while True:
            try:
                node = await self.client.get(f"/api/v1/nodes/{self.cfg.node_name}", resourceVersion="0")
            except ApiError as err:
                log.debug("node read for its pod CIDR failed error=%r", str(err))
                node = {}
            pod_cidr = (node.get("spec") or {}).get("podCIDR", "")
            if pod_cidr:
                break
            await asyncio.sleep(POD_CIDR_POLL)
        log.info("pod CIDR allocated by the control plane pod_cidr=%s", pod_cidr)
        assert self.cri is not None
        try:
            await self.cri.update_runtime_config(pod_cidr)
        except CRIError as err:
            log.warning("UpdateRuntimeConfig failed pod_cidr=%s error=%r", pod_cidr, str(err))
        # No GC here: pod workers run by now (a sandbox may be half-made), and a network that never had
        # a range has nothing allocated to free (an agent restarted later finds spec.podCIDR at once).
        await self._start_network(pod_cidr, gc=False)

    async def _start_network(self, pod_cidr: str, gc: bool = True) -> None:
        """Host the node's pod network: the CNI service in this loop, and the conflist that makes the
        runtime report NetworkReady. Until a pod CIDR is known there is no range to hand out, and the
        node stays NotReady with the runtime's message, as upstream does without a network."""
        if not pod_cidr:
            log.warning("no pod CIDR (spec.podCIDR or podCIDR in the config): pod network not started")
            return
        cfg = self.cfg
        self.network = NodeNetwork(
            conf_dir=Path(cfg.cni_conf_dir),
            bin_dir=Path(cfg.cni_bin_dir),
            data_dir=Path(cfg.cni_data_dir),
            pod_cidr=pod_cidr,
            bridge=cfg.cni_bridge,
            socket_path=str(Path(cfg.root_dir) / "cni.sock"),
        )
        await self.network.start()
        log.info("pod network serving pod_cidr=%s conf_dir=%s", pod_cidr, cfg.cni_conf_dir)
        if not gc:
            return
        # Free what a reboot or a lost DEL left allocated: attachments of sandboxes the runtime no longer
        # has. Pod workers have not started yet, so no sandbox can be half-made by us at this point.
        try:
            assert self.cri is not None
            await self.network.gc({sandbox.id for sandbox in await self.cri.list_pod_sandbox()})
        except (CRIError, RuntimeError) as err:
            log.warning("pod network GC failed error=%r", str(err))

    async def _start_server(self, cri: CRIClient) -> None:
        cfg = self.cfg
        if cfg.tls_cert_file and cfg.tls_private_key_file:
            cert, key = Path(cfg.tls_cert_file), Path(cfg.tls_private_key_file)
        else:
            ips = [self.node.internal_ip] if self.node and self.node.internal_ip else []
            cert, key = await asyncio.to_thread(
                ensure_self_signed, Path(cfg.root_dir) / "pki", cfg.node_name, ips
            )
        context = await asyncio.to_thread(server_context, cert, key, cfg.client_ca_file or None)
        if cfg.server_tls_bootstrap and not cfg.tls_cert_file:
            # The self-signed pair only shapes the listening context; it is never served in this mode.
            self.serving = ServingCertManager(
                self.client,
                cfg.node_name,
                Path(cfg.root_dir) / "pki",
                context,
                lambda c, k: server_context(c, k, cfg.client_ca_file or None),
                self._serving_addresses,
            )
            self.serving.start()

        def lookup(namespace: str, name: str) -> dict[str, Any] | None:
            # A mirror pod's logs and exec are its static pod's (the one running, under its own UID).
            if self.static is not None and (static := self.static.by_full_name(f"{namespace}/{name}")):
                return static
            return pod_by_name(self.informer, namespace, name) if self.informer else None

        auth = KubeletAuth(
            cfg.node_name,
            x509=bool(cfg.client_ca_file),
            anonymous=cfg.anonymous_auth,
            review_token=self.credentials.review_token if cfg.webhook_authentication else None,
            token_ttl=cfg.webhook_authentication_cache_ttl,
            review_access=self.credentials.review_access if cfg.authorization_mode == "Webhook" else None,
            authorized_ttl=cfg.authorization_authorized_ttl,
            unauthorized_ttl=cfg.authorization_unauthorized_ttl,
        )
        self.server = KubeletServer(
            cri,
            lookup,
            self._pods_served,
            auth=auth,
            ssl_context=context,
            probe_metrics=self._probe_metrics,
            metrics=self.metrics,
            stats=StatsProvider(
                cri,
                StatsConfig(
                    cfg.node_name,
                    cfg.root_dir,
                    cfg.pod_logs_dir,
                    pods_cgroup(cfg.cgroup_root, cfg.cgroup_driver),
                    kubelet_cgroups=cfg.kubelet_cgroups,
                    runtime_cgroups=cfg.runtime_cgroups,
                    runtime_endpoint=cfg.container_runtime_endpoint,
                ),
                plugin_volumes=self.pods.ctx.volumes.stats if self.pods and self.pods.ctx.volumes else None,
            ),
        )
        await self.server.start(cfg.address, cfg.port)

    async def _volumes_in_use(self) -> list[str]:
        """node.status.volumesInUse, from the volume manager once the pods run."""
        volumes = self.pods.ctx.volumes if self.pods is not None else None
        return await volumes.in_use() if volumes is not None else []

    def _pods_served(self) -> list[dict[str, Any]]:
        """/pods: the pods this node runs, static pods as themselves rather than their mirror pods."""
        api = self.informer.list() if self.informer else []
        if self.static is None:
            return api
        return [p for p in api if not is_mirror(p)] + self.static.list()

    def _serving_addresses(self) -> tuple[list[str], list[str]]:
        """The serving certificate's SANs: the Node's Hostname addresses as names, the rest as IPs."""
        import ipaddress

        hostnames, ips = [], []
        status = ((self.node.node if self.node else None) or {}).get("status") or {}
        for address in status.get("addresses") or []:
            value = address.get("address", "")
            try:
                ipaddress.ip_address(value)
                ips.append(value)
            except ValueError:
                hostnames.append(value)
        if self.node and self.node.internal_ip and self.node.internal_ip not in ips:
            ips.append(self.node.internal_ip)
        return hostnames or [self.cfg.node_name], ips

    def _start_csi_plugins(self) -> None:
        """CSI drivers register through <root-dir>/plugins_registry (agent/csi/watcher.py); each one
        registered is written into the node's CSINode and labels (agent/node/csinode.py)."""
        csinode = CSINodeWriter(self.client, self.cfg.node_name)

        async def on_register(driver: Any) -> None:
            await csinode.install(
                driver.name, driver.node.node_id, driver.node.topology, driver.node.max_volumes
            )

        self.plugin_watcher = PluginWatcher(
            str(Path(self.cfg.root_dir) / "plugins_registry"),
            self.csi_drivers,
            on_register,
            csinode.uninstall,
        )
        self._spawn(self.plugin_watcher.run(), "csi-plugin-watcher")

    def _probe_metrics(self) -> bytes:
        prober = self.pods.ctx.prober if self.pods is not None else None
        return prober.metrics.exposition() if prober is not None else b""

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(self._task_done)
        self._tasks.append(task)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("agent loop died task=%s error=%r", task.get_name(), task.exception())

    async def stop(self) -> None:
        if self.rotator is not None:
            await self.rotator.stop()
        if self.serving is not None:
            await self.serving.stop()
        if self.server is not None:
            await self.server.stop()
        if self.healthz is not None:
            await self.healthz.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.objects.watches is not None:
            await self.objects.watches.close()
        await self.watch_client.close()
        if self.pods is not None:
            await self.pods.stop()
            if self.pods.ctx.prober is not None:
                await self.pods.ctx.prober.stop()
        if self.plugin_watcher is not None:
            await self.plugin_watcher.close()
        if self.network is not None:
            # Pods keep their network; CNI calls made while the agent is down run the plugin in-process.
            await self.network.stop()
        await self.client.close()
        await self.event_client.close()
        if self.cri is not None:
            await self.cri.close()


async def serve(cfg: AgentConfig) -> int:
    if cfg.bootstrap_kubeconfig:
        # TLS bootstrap first: the agent then runs on the node's own identity.
        cfg.kubeconfig = str(
            await bootstrap_client(
                cfg.root_dir, cfg.kubeconfig, cfg.bootstrap_kubeconfig, cfg.node_name, cfg.cert_dir
            )
        )
    agent = Agent(cfg)
    stop = termination_event()
    try:
        starting = asyncio.create_task(agent.start())
        waiter = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done() and starting.exception() is not None:
            raise starting.exception()  # type: ignore[misc]
        await stop.wait()
        starting.cancel()
        log.info("agent stopping (pods keep running)")
    except IncompatibleRuntimeError as err:
        log.error("runtime incompatible error=%r", str(err))
        return 1
    finally:
        await agent.stop()
    return 0
