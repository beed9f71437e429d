"""Register (or adopt) the Node and keep its status current.

Status is computed every nodeStatusUpdateFrequency (10 s) and patched when anything but heartbeat times
changed, or when nodeStatusReportFrequency (5 min) has passed since the last report, as upstream does,
so an idle node costs the API server one small write per five minutes besides its Lease. "Changed" is
judged against the Node as the API holds it (read from the server's cache each time, as upstream's
tryUpdateNodeStatus does), not only against our own last post: when the node lifecycle controller has
marked the conditions Unknown (we were unreachable for a while), the next sync puts them right at once.

Right after registration a node that is not ready yet is looked at every 100 ms and its status posted
the moment it is (upstream's fastStatusUpdateOnce), instead of at the next 10 s tick.

The Node's events are upstream's, from source kubelet: Starting, NodeAllocatableEnforced, Rebooted
when the boot ID changed, and each condition's change (NodeHasSufficientMemory, NodeHasNoDiskPressure,
NodeHasSufficientPID, NodeReady, NodeNotReady, ...) against the Node the API held.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agent.config import AgentConfig
from agent.node import facts as host
from agent.node.allocatable import enforce_node_allocatable
from agent.node.status import (
    DEFAULT_LABELS,
    RuntimeHealth,
    condition_events,
    condition_specs,
    node_labels,
    node_status,
    rebooted,
    status_event_message,
    without_heartbeats,
)
from kubeclient.backoff import Backoff
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL, WARNING, EventRecorder

log = logging.getLogger("agent.node")

HealthProbe = Callable[[], Awaitable[RuntimeHealth]]
ImageLister = Callable[[], Awaitable[list[dict[str, Any]]]]

FAST_UPDATE_PERIOD = 0.1  # upstream's fastStatusUpdateOnce tick
NODE_READY_GRACE = 120.0  # upstream's nodeReadyGracePeriod: give up on the fast update after this


def _conditions(conditions: list[dict[str, Any]] | None) -> list[tuple[str, str, str, str]]:
    """What a condition says, without its times: whether another writer changed ours."""
    return sorted(
        (str(c.get("type")), str(c.get("status")), str(c.get("reason", "")), str(c.get("message", "")))
        for c in conditions or []
    )


class NodeController:
    def __init__(
        self,
        client: KubeClient,
        cfg: AgentConfig,
        health: HealthProbe,
        images: ImageLister | None = None,
        recorder: EventRecorder | None = None,
        volumes_in_use: Callable[[], Awaitable[list[str]]] | None = None,
    ) -> None:
        self.client = client
        self.cfg = cfg
        self.health = health
        self.images = images
        self.recorder = recorder
        self.volumes_in_use = volumes_in_use  # the volume manager's attachable mounted volumes
        self.node: dict[str, Any] | None = None
        self.local: dict[str, Any] | None = None  # the Node built here before the API has one
        self.facts: host.HostFacts | None = None
        self.internal_ip = cfg.node_ip
        self._last_reported: dict[str, Any] | None = None
        self._last_report_at = 0.0
        self._pending_events: list[str] = []
        self.registered = asyncio.Event()

    @property
    def path(self) -> str:
        return f"/api/v1/nodes/{self.cfg.node_name}"

    @property
    def uid(self) -> str:
        return (self.node or {}).get("metadata", {}).get("uid", "")

    @property
    def ref(self) -> dict[str, Any]:
        """The Node as events name it (upstream's nodeRef: the node's name as its UID too)."""
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.cfg.node_name, "uid": self.cfg.node_name},
        }

    def event(self, type_: str, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.event(self.ref, type_, reason, message)

    async def _compute(self) -> dict[str, Any]:
        if self.facts is None:
            self.facts = await asyncio.to_thread(host.host_facts)
        if not self.internal_ip:
            self.internal_ip = await asyncio.to_thread(
                host.choose_node_ip, self.cfg.node_ip, self.cfg.node_name, self.cfg.node_name
            )
        use = await asyncio.to_thread(host.usage, self.cfg.root_dir)
        health = await self.health()
        held = (self.node or {}).get("status") or {}
        previous = held.get("conditions") or []
        status = node_status(self.cfg, self.facts, use, health, self.internal_ip, previous)
        self._pending_events = condition_events(previous, condition_specs(self.cfg, self.facts, use, health))
        if rebooted(held, self.facts):
            self._pending_events.append("Rebooted")
        if self.volumes_in_use is not None:
            # upstream's volumesInUse setter; null (strategic merge: removed) when there is none
            status["volumesInUse"] = await self.volumes_in_use() or None
        if self.images is not None and health.reachable:
            try:
                status["images"] = await self.images()
            except Exception as err:  # the runtime went away between the two calls: report without
                log.debug("image list failed error=%r", str(err))
        return status

    async def register(self) -> None:
        """Create the Node, or adopt the one that exists (updating the labels we own)."""
        backoff = Backoff(initial=0.2, maximum=7.0)
        while True:
            try:
                await self._register_once()
                self.registered.set()
                return
            except (ApiError, OSError, host.NodeIPError) as err:
                delay = backoff.next()
                log.warning(
                    "node registration failed node=%s error=%r retry_in=%.1fs",
                    self.cfg.node_name,
                    str(err),
                    delay,
                )
                await asyncio.sleep(delay)

    async def _register_once(self) -> None:
        if self.facts is None:
            self.facts = await asyncio.to_thread(host.host_facts)
        labels = node_labels(self.cfg, self.facts)
        try:
            existing = await self.client.get(self.path)
        except ApiError as err:
            if not err.not_found:
                raise
            existing = None
        if existing is None:
            body: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": self.cfg.node_name, "labels": labels},
                "spec": {},
            }
            if self.cfg.pod_cidr:
                body["spec"] = {"podCIDR": self.cfg.pod_cidr, "podCIDRs": [self.cfg.pod_cidr]}
            if self.cfg.provider_id:
                body["spec"]["providerID"] = self.cfg.provider_id
            if self.cfg.register_with_taints:
                # Only at creation, as upstream's initialNode: an adopted Node keeps the taints it has.
                body["spec"]["taints"] = [dict(t) for t in self.cfg.register_with_taints]
            # Created with its status, as upstream's registerWithAPIServer (setNodeStatus on the initial
            # Node): no reader ever sees this Node without one. The conditions are judged against none.
            self.node = None
            status = await self._compute()
            body["status"] = {k: v for k, v in status.items() if v is not None}
            try:
                self.node = await self.client.create("/api/v1/nodes", body)
            except ApiError as err:
                if not err.conflict:
                    raise
                self.node = await self.client.get(self.path)  # created meanwhile: adopted below
            else:
                log.info("node registered node=%s", self.cfg.node_name)
                self._reported(status)
                return
        else:
            held = existing.get("metadata", {}).get("labels") or {}
            # As upstream's updateDefaultLabels: only the default labels; an administrator's relabelling of
            # the rest stands.
            missing = {k: v for k, v in labels.items() if k in DEFAULT_LABELS and held.get(k) != v}
            self.node = existing
            if missing:
                self.node = await self.client.patch(self.path, {"metadata": {"labels": missing}})
            log.info("node adopted node=%s uid=%s", self.cfg.node_name, self.uid)
        # The status is judged against the Node the API holds (an adopted one keeps its conditions, so
        # only what changed is announced).
        await self._post(await self._compute())

    async def _post(self, status: dict[str, Any]) -> None:
        self.node = await self.client.patch(self.path + "/status", {"status": status})
        self._reported(status)

    def _reported(self, status: dict[str, Any]) -> None:
        """`status` is in the API now (created with the Node or posted): remembered, and the changes it
        made announced once."""
        self._last_reported = without_heartbeats(status)
        self._last_report_at = time.monotonic()
        for event in self._pending_events:
            if event == "Rebooted":
                assert self.facts is not None
                self.event(
                    WARNING,
                    "Rebooted",
                    f"Node {self.cfg.node_name} has been rebooted, boot id: {self.facts.boot_id}",
                )
            else:
                self.event(NORMAL, event, status_event_message(self.cfg.node_name, event))
        self._pending_events = []

    async def build_local(self) -> dict[str, Any]:
        """The Node as this agent would register it, built from the host alone (upstream's
        initialNode): what admission reads before the API has the Node, so static pods start while
        the control plane is away or not there yet (kubeadm's control plane is static pods)."""
        if self.facts is None:
            self.facts = await asyncio.to_thread(host.host_facts)
        try:
            status = await self._compute()
        except (OSError, ValueError, host.NodeIPError) as err:
            log.warning("local node status not computed error=%r", str(err))
            status = {"allocatable": {"pods": str(self.cfg.max_pods)}}
        self._pending_events = []  # announced at registration, against the Node the API holds
        self.local = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.cfg.node_name, "labels": node_labels(self.cfg, self.facts)},
            "spec": {"taints": [dict(t) for t in self.cfg.register_with_taints]},
            "status": status,
        }
        return self.local

    def current(self) -> dict[str, Any] | None:
        """The Node as last read or posted, else the one built here."""
        return self.node or self.local

    async def refresh(self) -> dict[str, Any] | None:
        """The Node read from the API's storage now (not its cache: at least as new as any write
        before this call), kept as the node's current view."""
        self.node = await self.client.get(self.path)
        return self.node

    def ready(self) -> bool:
        """Whether the Node as last posted says Ready."""
        conditions = ((self.node or {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    async def fast_status_update(self) -> None:
        """Until the node is ready (or two minutes passed): look every 100 ms and post the moment it is."""
        started = time.monotonic()
        while not self.ready() and time.monotonic() - started < NODE_READY_GRACE:
            await asyncio.sleep(FAST_UPDATE_PERIOD)
            try:
                status = await self._compute()
            except (OSError, ValueError, host.NodeIPError) as err:
                log.debug("fast node status not computed error=%r", str(err))
                continue
            if any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"]):
                try:
                    await self._post(status)
                    log.info("node ready node=%s after=%.1fs", self.cfg.node_name, time.monotonic() - started)
                except ApiError as err:
                    log.warning("node status update failed node=%s error=%r", self.cfg.node_name, str(err))

    async def sync_status(self) -> bool:
        """Compute the status; patch it if it changed or the report interval passed. True if posted."""
        self.node = await self.client.get(self.path, resourceVersion="0")
        status = await self._compute()
        stale = time.monotonic() - self._last_report_at >= self.cfg.node_status_report_frequency
        held = _conditions(((self.node or {}).get("status") or {}).get("conditions"))
        if (
            not stale
            and without_heartbeats(status) == self._last_reported
            and held == _conditions(status["conditions"])
        ):
            return False
        await self._post(status)
        return True

    async def run(self) -> None:
        self.event(NORMAL, "Starting", "Starting kubelet.")
        await self.register()
        assert self.facts is not None
        if await asyncio.to_thread(enforce_node_allocatable, self.cfg, self.facts):
            self.event(NORMAL, "NodeAllocatableEnforced", "Updated Node Allocatable limit across pods")
        await self.fast_status_update()
        while True:
            await asyncio.sleep(self.cfg.node_status_update_frequency)
            try:
                if await self.sync_status():
                    log.debug("node status posted node=%s", self.cfg.node_name)
            except ApiError as err:
                if err.not_found:
                    log.warning("node object deleted, registering again node=%s", self.cfg.node_name)
                    self.registered.clear()
                    await self.register()
                else:
                    log.warning("node status update failed node=%s error=%r", self.cfg.node_name, str(err))
            except (OSError, ValueError, host.NodeIPError) as err:
                log.warning("node status not computed node=%s error=%r", self.cfg.node_name, str(err))
