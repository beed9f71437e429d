"""One worker per pod UID: a level-triggered sync loop that owns everything the agent does to that pod.

Each pass reads the pod (from the informer's cache) and what CRI reports, writes the status that follows,
and takes the next steps toward the spec: sandbox, images, init containers one at a time, app containers,
restarts under backoff, and termination. Because every pass starts from CRI, a missed event, a restarted
agent or a restarted containerd heals on the next pass, and running containers are adopted, not redone.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from agent.config import AgentConfig
from agent.cri import CRIClient, CRIError, NotFoundError
from agent.pods import labels as L
from agent.pods.backoff import BackoffTable, format_go_duration
from agent.pods.container import container_config
from agent.pods.dns import DNS
from agent.pods.env import ConfigError, Fetch, resolve_env
from agent.pods.events import NORMAL, WARNING, EventRecorder, container_field, field_of
from agent.pods.images import ImageError, ImageManager
from agent.pods.qos import cgroup_parent, remove_pod_cgroup
from agent.pods.runtime import ContainerRecord, PodRuntime, RuntimeInspector, SandboxRecord
from agent.pods.sandbox import hosts_file, pod_log_dir, sandbox_config
from agent.pods.status import TERMINAL, StatusInputs, compute_status, is_sidecar, should_restart
from agent.pods.status_manager import StatusManager
from agent.probes.hooks import HookRunner
from agent.probes.manager import ProberManager, probed_containers
from agent.probes.podview import ContainerView
from agent.probes.result import Target
from agent.volumes import VolumeError, VolumeManager, container_mounts
from agent.volumes.manager import ReadyVolume
from kubeclient.errors import ApiError

log = logging.getLogger("agent.pods.worker")

MIN_GRACE = 2
RETRY_AFTER_ERROR = 5.0
HOOK_CANCEL_CHECK = 1.0  # how often a running postStart hook looks whether its pod is being deleted


@dataclass
class PodContext:
    """What every worker shares: configuration, clients and the node-wide managers."""

    cfg: AgentConfig
    cri: CRIClient
    inspector: RuntimeInspector
    images: ImageManager
    recorder: EventRecorder
    status: StatusManager
    crash_backoff: BackoffTable
    fetch: Fetch
    host_ip: Callable[[], str]
    node_hostname: str
    host_dns: DNS
    node_memory: int = 0
    # The node's status.allocatable as last posted: the limits of a container that sets none, for
    # resourceFieldRef (upstream's defaultPodLimitsForDownwardAPI).
    node_allocatable: Callable[[], dict[str, str]] = dict
    volumes: VolumeManager | None = None
    prober: ProberManager | None = None
    hooks: HookRunner | None = None

    @property
    def runtime_name(self) -> str:
        return self.cri.version.runtime_name if self.cri.version else "containerd"


def pod_ref(pod: dict[str, Any]) -> str:
    """upstream's format.Pod: name_namespace(uid)"""
    m = pod["metadata"]
    return f"{m['name']}_{m['namespace']}({m['uid']})"


def _container_spec(pod: dict[str, Any], name: str) -> dict[str, Any] | None:
    spec = pod.get("spec") or {}
    return next((c for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])] if c["name"] == name), None)


def remaining_grace(pod: dict[str, Any], now: datetime | None = None) -> int:
    """The grace period to stop the pod's containers with, at least MIN_GRACE (upstream's minimum).

    A pod being deleted gets its deletionGracePeriodSeconds, counted from when the agent stops it, as
    the upstream kubelet's effective grace period is: the deletionTimestamp is only second-precise
    (and written by the server's clock), so a deadline derived from it can cut a 3 s grace to 2 s.
    The timestamp is the fallback for servers that do not set the period."""
    meta = pod["metadata"]
    ts = meta.get("deletionTimestamp")
    period = meta.get("deletionGracePeriodSeconds")
    if ts and period is not None:
        return max(MIN_GRACE, int(period))
    if not ts:
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        return max(MIN_GRACE, int(grace if grace is not None else 30))
    deadline = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    now = now or datetime.now(deadline.tzinfo)
    return max(MIN_GRACE, math.ceil((deadline - now).total_seconds()))


def active_deadline_left(pod: dict[str, Any], now: datetime | None = None) -> float | None:
    """Seconds until spec.activeDeadlineSeconds runs out (counted from status.startTime), or None."""
    deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    start = (pod.get("status") or {}).get("startTime")
    if not deadline or not start:
        return None
    started = datetime.fromisoformat(start.replace("Z", "+00:00"))
    now = now or datetime.now(started.tzinfo)
    return started.timestamp() + int(deadline) - now.timestamp()


@dataclass
class SyncResult:
    done: bool = False
    next_in: float = 0.0


class PodWorker:
    def __init__(self, ctx: PodContext, uid: str, get_pod: Callable[[], dict[str, Any] | None]) -> None:
        self.ctx = ctx
        self.uid = uid
        self.get_pod = get_pod
        self.last_pod: dict[str, Any] | None = None
        self.waiting: dict[str, tuple[str, str]] = {}
        self.finished = False  # reached Succeeded/Failed: never start anything again
        self.failure: tuple[str, str] | None = None  # set when the agent itself fails the pod
        self.syncs = 0
        self._volumes: dict[str, ReadyVolume] | None = None
        self._wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        self._wake.set()

    def start(self, on_exit: Callable[[PodWorker], None]) -> None:
        async def main() -> None:
            try:
                await self.run()
            finally:
                on_exit(self)

        self.task = asyncio.create_task(main(), name=f"pod-worker-{self.uid}")

    async def run(self) -> None:
        delay = 0.0
        errors = 0
        while True:
            if delay > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
                except TimeoutError:
                    pass
            self._wake.clear()
            try:
                result = await self.sync()
                errors = 0
            except (CRIError, ApiError, OSError) as err:
                errors += 1
                delay = min(RETRY_AFTER_ERROR * errors, 30.0)
                log.warning("pod sync failed pod=%s error=%r retry_in=%.0fs", self._name(), str(err), delay)
                continue
            except Exception:
                # A bug or a spec we do not understand: keep the worker (a dead one would be restarted at
                # once by the manager, in a tight loop) and retry slowly.
                errors += 1
                delay = min(RETRY_AFTER_ERROR * errors, 60.0)
                log.exception("pod sync crashed pod=%s retry_in=%.0fs", self._name(), delay)
                continue
            if result.done:
                return
            delay = result.next_in

    def _name(self) -> str:
        pod = self.last_pod
        if pod is None:
            return self.uid
        return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"

    # -- the sync pass ---------------------------------------------------------------------------

    async def sync(self) -> SyncResult:
        self.syncs += 1
        self._volumes = None  # volumes are made ready (again) only in a pass that needs them
        ctx = self.ctx
        pod = self.get_pod()
        if pod is not None:
            self.last_pod = pod
        rt = await ctx.inspector.inspect(self.uid)
        if pod is None:
            # Gone from the API (force-deleted, or never ours): stop and remove whatever runs.
            self._forget_probes()
            await self._kill(rt, MIN_GRACE, None)
            await self._remove_all(await ctx.inspector.inspect(self.uid))
            if ctx.volumes is not None:
                ctx.volumes.forget(self.uid)
            return SyncResult(done=True)
        if pod["metadata"].get("deletionTimestamp"):
            return await self._terminate(pod, rt)
        if self.finished or (pod.get("status") or {}).get("phase") in TERMINAL:
            self.finished = True
            self._forget_probes()
            if await self._release(pod, rt):
                rt = await ctx.inspector.inspect(self.uid)
            await ctx.status.update(pod, self._status(pod, rt, terminal=True))
            return SyncResult(next_in=ctx.cfg.sync_frequency)
        deadline_in = active_deadline_left(pod)
        if deadline_in is not None and deadline_in <= 0:
            return await self._fail(pod, rt, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
        self._tell_prober(pod, rt)
        status = self._status(pod, rt)
        await ctx.status.update(pod, status)
        if status["phase"] in TERMINAL:
            self.finished = True
            self._forget_probes()
            return SyncResult(next_in=0)
        acted, next_in = await self._converge(pod, rt)
        if not acted:
            await self._gc(rt)
            next_in = min(next_in, await self._refresh_volumes(pod))
        if deadline_in is not None:
            next_in = min(next_in, deadline_in)
        return SyncResult(next_in=0 if acted else next_in)

    async def _fail(self, pod: dict[str, Any], rt: PodRuntime, reason: str, message: str) -> SyncResult:
        """The agent fails the pod itself (activeDeadlineSeconds): kill it, report Failed with why."""
        self.finished = True
        self.failure = (reason, message)
        self.ctx.recorder.event(pod, WARNING, reason, message)
        await self._kill(rt, remaining_grace(pod), pod)
        rt = await self.ctx.inspector.inspect(self.uid)
        await self.ctx.status.update(pod, self._status(pod, rt, terminal=True))
        return SyncResult(next_in=self.ctx.cfg.sync_frequency)

    def _status(self, pod: dict[str, Any], rt: PodRuntime, terminal: bool = False) -> dict[str, Any]:
        started: dict[str, bool] = {}
        readiness: dict[str, bool] = {}
        prober = self.ctx.prober
        if prober is not None and not terminal:
            for c in probed_containers(pod):
                rec = rt.latest(c["name"])
                if rec is not None and rec.state == "running":
                    started[c["name"]] = prober.started(self.uid, c["name"], rec.id)
                    readiness[c["name"]] = started[c["name"]] and prober.ready(self.uid, c["name"], rec.id)
        return compute_status(
            StatusInputs(
                pod=pod,
                runtime=rt,
                waiting=self.waiting,
                host_ip=self.ctx.host_ip(),
                runtime_name=self.ctx.runtime_name,
                terminal=terminal,
                readiness=readiness,
                started=started,
                failure=self.failure,
            )
        )

    # -- probes ----------------------------------------------------------------------------------

    def _pod_ip(self, pod: dict[str, Any], sb: SandboxRecord | None) -> str:
        if (pod.get("spec") or {}).get("hostNetwork"):
            return self.ctx.host_ip()
        return sb.ip if sb is not None else ""

    def _tell_prober(self, pod: dict[str, Any], rt: PodRuntime) -> None:
        """Hand the prober what runs now, so its workers probe the right container at the right IP."""
        prober = self.ctx.prober
        if prober is None:
            return
        sb = rt.latest_sandbox
        views: dict[str, ContainerView] = {}
        for c in probed_containers(pod):
            rec = rt.latest(c["name"], sb.id if sb is not None else None)
            if rec is not None:
                views[c["name"]] = ContainerView(rec.id, rec.state, rec.started_at / 1e9)
        prober.sync_pod(pod, self._pod_ip(pod, sb), views)

    def _forget_probes(self) -> None:
        if self.ctx.prober is not None:
            self.ctx.prober.remove_pod(self.uid)

    def _started(self, name: str, rec: ContainerRecord) -> bool:
        prober = self.ctx.prober
        return rec.state == "running" and (prober is None or prober.started(self.uid, name, rec.id))

    async def _kill_if_unhealthy(self, pod: dict[str, Any], c: dict[str, Any], kind: str, rec: ContainerRecord) -> bool:
        """Stop a running container its liveness or startup probe failed; the normal restart path
        (restartPolicy, crash backoff) brings up the next one. True when it was stopped."""
        prober = self.ctx.prober
        failed = prober.failed(self.uid, c["name"], rec.id) if prober is not None else None
        if failed is None:
            return False
        probe, probe_grace = failed
        policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
        message = f"Container {c['name']} failed {probe.value.lower()} probe"
        if policy != "Never" or is_sidecar(c):
            message += ", will be restarted"
        self.ctx.recorder.event(pod, NORMAL, "Killing", message, container_field(kind, c["name"]))
        grace = max(MIN_GRACE, probe_grace) if probe_grace is not None else remaining_grace(pod)
        log.info("container unhealthy pod=%s container=%s probe=%s grace=%ds", self._name(), c["name"], probe.value, grace)
        await self._stop_container(rec, grace, pod)
        return True

    # -- converging toward the spec --------------------------------------------------------------

    async def _converge(self, pod: dict[str, Any], rt: PodRuntime) -> tuple[bool, float]:
        ctx = self.ctx
        spec = pod.get("spec") or {}
        policy = spec.get("restartPolicy") or "Always"
        idle = ctx.cfg.sync_frequency
        sb = rt.latest_sandbox
        if sb is None or not sb.ready:
            if sb is not None and policy == "Never" and rt.all_containers():
                # Upstream: a Never pod whose containers ran gets no new sandbox; what still runs in the
                # dead one is stopped, and the pod's phase follows from the exits.
                return await self._kill(rt, remaining_grace(pod), pod), idle
            if await self._ready_volumes(pod) is None:
                return False, RETRY_AFTER_ERROR
            if sb is not None:
                ctx.recorder.event(pod, NORMAL, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
                await self._kill(rt, remaining_grace(pod), pod)
            created = await self._create_sandbox(pod, sb.attempt + 1 if sb else 0)
            if not created:
                return False, RETRY_AFTER_ERROR
            rt = await ctx.inspector.inspect(self.uid)
            sb = rt.latest_sandbox
            if sb is None or not sb.ready:
                return True, 0
        for extra in rt.sandboxes[1:]:
            if extra.ready:
                await self._stop_sandbox(extra.id)
        sb_config = sandbox_config(ctx.cfg, pod, sb.attempt, ctx.host_dns, ctx.node_hostname)

        app = list(spec.get("containers") or [])
        app_started = any(rt.latest(c["name"], sb.id) for c in app)
        acted = False
        next_in = idle
        if app_started:
            # Sidecars keep running beside the app containers: restart them (under backoff) when they exit.
            for c in spec.get("initContainers") or []:
                if is_sidecar(c):
                    acted_sc, wait_sc = await self._keep_sidecar(pod, c, sb, sb_config, rt)
                    acted = acted or acted_sc
                    next_in = min(next_in, wait_sc) if not acted_sc else next_in
        if not app_started:
            for c in spec.get("initContainers") or []:
                rec = rt.latest(c["name"], sb.id)
                if is_sidecar(c):
                    acted_sc, wait_sc = await self._keep_sidecar(pod, c, sb, sb_config, rt)
                    if acted_sc or rec is None or not self._started(c["name"], rec):
                        # The next init container waits until this sidecar has started (startup probe).
                        return acted_sc, wait_sc
                    continue
                if rec is None:
                    ok, retry = await self._start(pod, c, "init", sb, sb_config, self._next_count(rt, c["name"]))
                    return ok, retry
                if rec.state in ("running",):
                    return False, idle
                if rec.state == "created":
                    return await self._start_created(pod, c, "init", rec), idle
                if rec.exit_code == 0 and rec.state == "exited":
                    continue
                if policy == "Never":
                    return False, idle
                wait = self._crash_backoff(pod, c["name"])
                if wait > 0:
                    return False, wait
                ok, retry = await self._start(pod, c, "init", sb, sb_config, self._next_count(rt, c["name"]))
                return ok, retry

        for c in app:
            name = c["name"]
            rec = rt.latest(name, sb.id)
            if rec is None:
                ok, retry = await self._start(pod, c, "app", sb, sb_config, self._next_count(rt, name))
                acted = acted or ok
                if not ok:
                    next_in = min(next_in, retry)
                continue
            if rec.state == "running":
                if await self._kill_if_unhealthy(pod, c, "app", rec):
                    acted = True
                    continue
                if rec.hash and rec.hash != L.container_hash(c):
                    ctx.recorder.event(
                        pod, NORMAL, "Killing", f"Container {name} definition changed, will be restarted",
                        container_field("app", name),
                    )
                    await self._stop_container(rec, remaining_grace(pod), pod)
                    ok, retry = await self._start(pod, c, "app", sb, sb_config, self._next_count(rt, name))
                    acted = True
                    if not ok:
                        next_in = min(next_in, retry)
                continue
            if rec.state == "created":
                acted = await self._start_created(pod, c, "app", rec) or acted
                continue
            if not should_restart(policy, rec.exit_code):
                continue
            wait = self._crash_backoff(pod, name)
            if wait > 0:
                next_in = min(next_in, wait)
                continue
            ok, retry = await self._start(pod, c, "app", sb, sb_config, self._next_count(rt, name))
            acted = acted or ok
            if not ok:
                next_in = min(next_in, retry)
        return acted, next_in

    async def _keep_sidecar(
        self, pod: dict[str, Any], c: dict[str, Any], sb: SandboxRecord, sb_config: Any, rt: PodRuntime
    ) -> tuple[bool, float]:
        """Start the sidecar if it is not running; (acted, seconds until worth looking again)."""
        rec = rt.latest(c["name"], sb.id)
        if rec is not None and rec.state == "running":
            if await self._kill_if_unhealthy(pod, c, "init", rec):
                return True, 0.0
            return False, self.ctx.cfg.sync_frequency
        if rec is not None and rec.state == "created":
            return await self._start_created(pod, c, "init", rec), self.ctx.cfg.sync_frequency
        if rec is not None:
            wait = self._crash_backoff(pod, c["name"])
            if wait > 0:
                return False, wait
        return await self._start(pod, c, "init", sb, sb_config, self._next_count(rt, c["name"]))

    @staticmethod
    def _next_count(rt: PodRuntime, name: str) -> int:
        latest = rt.latest(name)
        return latest.restart_count + 1 if latest is not None else 0

    def _crash_backoff(self, pod: dict[str, Any], name: str) -> float:
        """Seconds to wait before restarting `name` (0: go now, and the backoff grows)."""
        table = self.ctx.crash_backoff
        key = (self.uid, name)
        wait = table.remaining(key)
        if wait > 0:
            delay = format_go_duration(table.delay(key))
            self.waiting[name] = (
                "CrashLoopBackOff",
                f"back-off {delay} restarting failed container={name} pod={pod_ref(pod)}",
            )
            self.ctx.recorder.event(
                pod, WARNING, "BackOff", f"Back-off restarting failed container {name} in pod {pod_ref(pod)}",
                field_of(pod, name),
            )
            return wait
        table.next(key)
        return 0.0

    async def _create_sandbox(self, pod: dict[str, Any], attempt: int) -> bool:
        ctx = self.ctx
        config = sandbox_config(ctx.cfg, pod, attempt, ctx.host_dns, ctx.node_hostname)
        await asyncio.to_thread(os.makedirs, pod_log_dir(ctx.cfg, pod), 0o755, True)
        try:
            sid = await ctx.cri.run_pod_sandbox(config)
        except CRIError as err:
            ctx.recorder.event(pod, WARNING, "FailedCreatePodSandBox", f"Failed to create pod sandbox: {err}")
            log.warning("sandbox failed pod=%s error=%r", self._name(), str(err))
            return False
        log.info("sandbox started pod=%s sandbox=%s attempt=%d", self._name(), sid[:13], attempt)
        return True

    async def _start(
        self,
        pod: dict[str, Any],
        c: dict[str, Any],
        kind: str,
        sb: SandboxRecord,
        sb_config: Any,
        restart_count: int,
    ) -> tuple[bool, float]:
        """Image, config, CreateContainer, StartContainer. Returns (started, retry_in)."""
        ctx = self.ctx
        name = c["name"]
        field = container_field(kind, name)
        volumes = await self._ready_volumes(pod)
        if volumes is None:
            return False, RETRY_AFTER_ERROR
        try:
            image_ref = await ctx.images.ensure(pod, c, sb_config, field)
        except ImageError as err:
            self.waiting[name] = (err.reason, err.message)
            ctx.recorder.event(pod, WARNING, "Failed", f"Error: {err.reason}", field)
            retry = ctx.images.backoff.remaining((self.uid, c.get("image", "")))
            return False, retry if retry > 0 else RETRY_AFTER_ERROR
        try:
            env = await resolve_env(pod, c, ctx.fetch, ctx.host_ip(), sb.ip, ctx.node_allocatable())
            term_file = await asyncio.to_thread(self._termination_file, name)
            hosts = "" if (pod.get("spec") or {}).get("hostNetwork") else await asyncio.to_thread(self._hosts_file, pod, sb.ip)
            mounts = await asyncio.to_thread(container_mounts, c, volumes)
            config = container_config(
                pod, c, kind, restart_count, image_ref, env, ctx.node_memory, term_file, hosts, mounts
            )
        except (ConfigError, ApiError, VolumeError) as err:
            self.waiting[name] = ("CreateContainerConfigError", str(err))
            ctx.recorder.event(pod, WARNING, "Failed", f"Error: {err}", field)
            return False, RETRY_AFTER_ERROR
        try:
            cid = await ctx.cri.create_container(sb.id, config, sb_config)
        except CRIError as err:
            self.waiting[name] = ("CreateContainerError", err.details)
            ctx.recorder.event(pod, WARNING, "Failed", f"Error: {err.details}", field)
            return False, RETRY_AFTER_ERROR
        ctx.recorder.event(pod, NORMAL, "Created", f"Created container: {name}", field)
        try:
            await ctx.cri.start_container(cid)
        except CRIError as err:
            self.waiting[name] = ("RunContainerError", err.details)
            ctx.recorder.event(pod, WARNING, "Failed", f"Error: {err.details}", field)
            return False, RETRY_AFTER_ERROR
        ctx.recorder.event(pod, NORMAL, "Started", f"Started container {name}", field)
        self.waiting.pop(name, None)
        log.info("container started pod=%s container=%s id=%s restarts=%d", self._name(), name, cid[:13], restart_count)
        hook = (c.get("lifecycle") or {}).get("postStart")
        if hook and ctx.hooks is not None:
            failure = await self._post_start(pod, c, hook, Target(self._pod_ip(pod, sb), cid))
            if failure is not None:
                # Upstream: the container is killed and its status waits with PostStartHookError; the
                # usual restart path (policy, backoff) decides what comes next.
                ctx.recorder.event(pod, WARNING, "FailedPostStartHook", failure, field)
                ctx.recorder.event(pod, NORMAL, "Killing", "FailedPostStartHook", field)
                await self._stop_id(cid, name, remaining_grace(pod), pod)
                self.waiting[name] = ("PostStartHookError", failure)
        return True, 0.0

    async def _post_start(self, pod: dict[str, Any], c: dict[str, Any], hook: dict[str, Any], target: Target) -> str | None:
        """Run the postStart hook to its end, as upstream does (no timeout of its own), unless the pod is
        deleted meanwhile: then it is abandoned and the pod's termination takes over."""
        assert self.ctx.hooks is not None
        task = asyncio.create_task(self.ctx.hooks.run(hook, target, c["name"], pod_ref(pod)))
        while True:
            done, _ = await asyncio.wait({task}, timeout=HOOK_CANCEL_CHECK)
            if done:
                return task.result()
            current = self.get_pod()
            if current is None or current["metadata"].get("deletionTimestamp"):
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                return None

    async def _ready_volumes(self, pod: dict[str, Any]) -> dict[str, ReadyVolume] | None:
        """The pod's volumes, set up once per pass; None (with a FailedMount event) if one is not ready."""
        if self._volumes is not None:
            return self._volumes
        if self.ctx.volumes is None:
            self._volumes = {}
            return self._volumes
        try:
            self._volumes = await self.ctx.volumes.prepare(pod)
        except VolumeError as err:
            self.ctx.recorder.event(pod, WARNING, "FailedMount", str(err))
            return None
        except ApiError as err:
            self.ctx.recorder.event(pod, WARNING, "FailedMount", f"MountVolume.SetUp failed: {err}")
            return None
        return self._volumes

    async def _refresh_volumes(self, pod: dict[str, Any]) -> float:
        """Rewrite the projected volumes whose service-account token is due (upstream remounts them on
        its periodic sync); seconds until the next one is due."""
        volumes = self.ctx.volumes
        if volumes is None:
            return math.inf
        try:
            await volumes.refresh(pod)
        except (VolumeError, ApiError) as err:
            self.ctx.recorder.event(pod, WARNING, "FailedMount", str(err))
            return RETRY_AFTER_ERROR
        due = volumes.refresh_in(self.uid)
        return math.inf if due is None else due

    def _pod_dir(self) -> Path:
        return Path(self.ctx.cfg.root_dir) / "pods" / self.uid

    def _termination_file(self, name: str) -> str:
        """A fresh host file for the container's termination message, writable by any user in the
        container (as upstream makes it), under <root-dir>/pods/<uid>/containers/<name>/."""
        folder = self._pod_dir() / "containers" / name
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / uuid.uuid4().hex[:8]
        path.touch()
        path.chmod(0o666)
        return str(path)

    def _hosts_file(self, pod: dict[str, Any], pod_ip: str) -> str:
        path = self._pod_dir() / "etc-hosts"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(hosts_file(pod, pod_ip, self.ctx.cfg.cluster_domain))
        tmp.chmod(0o644)
        tmp.replace(path)
        return str(path)

    async def _start_created(self, pod: dict[str, Any], c: dict[str, Any], kind: str, rec: ContainerRecord) -> bool:
        """A container created but never started (the agent died in between): start it now."""
        try:
            await self.ctx.cri.start_container(rec.id)
        except CRIError as err:
            self.waiting[c["name"]] = ("RunContainerError", err.details)
            return False
        self.ctx.recorder.event(pod, NORMAL, "Started", f"Started container {c['name']}", container_field(kind, c["name"]))
        self.waiting.pop(c["name"], None)
        return True

    # -- stopping --------------------------------------------------------------------------------

    async def _stop_container(self, rec: ContainerRecord, grace: int, pod: dict[str, Any] | None = None) -> None:
        await self._stop_id(rec.id, rec.name, grace, pod if rec.state == "running" else None)

    async def _stop_id(self, cid: str, name: str, grace: int, pod: dict[str, Any] | None) -> None:
        """StopContainer with `grace`, after the container's preStop hook (when a pod is given), which
        spends part of that grace as upstream's does: what is left, at least MIN_GRACE, goes to SIGTERM."""
        spec = _container_spec(pod, name) if pod is not None else None
        hook = ((spec or {}).get("lifecycle") or {}).get("preStop")
        if pod is not None and hook and self.ctx.hooks is not None and grace > 0:
            grace = max(MIN_GRACE, grace - await self._pre_stop(pod, name, hook, cid, grace))
        try:
            await self.ctx.cri.stop_container(cid, grace)
        except NotFoundError:
            pass
        self.ctx.inspector.forget(container_ids=[cid])

    async def _pre_stop(self, pod: dict[str, Any], name: str, hook: dict[str, Any], cid: str, grace: int) -> int:
        """Run the preStop hook for at most `grace` seconds; returns the whole seconds it took."""
        assert self.ctx.hooks is not None
        started = time.monotonic()
        sb_ip = (pod.get("status") or {}).get("podIP", "")
        target = Target(self.ctx.host_ip() if (pod.get("spec") or {}).get("hostNetwork") else sb_ip, cid)
        try:
            failure = await asyncio.wait_for(self.ctx.hooks.run(hook, target, name, pod_ref(pod), grace), timeout=grace)
        except TimeoutError:
            log.info("preStop hook not completed in grace period pod=%s container=%s grace=%ds", self._name(), name, grace)
            failure = None
        if failure is not None:
            self.ctx.recorder.event(pod, WARNING, "FailedPreStopHook", failure, field_of(pod, name))
        return int(time.monotonic() - started)

    async def _stop_sandbox(self, sandbox_id: str) -> None:
        try:
            await self.ctx.cri.stop_pod_sandbox(sandbox_id)
        except NotFoundError:
            pass
        self.ctx.inspector.forget(sandbox_ids=[sandbox_id])

    async def _kill(self, rt: PodRuntime, grace: int, pod: dict[str, Any] | None) -> bool:
        """Stop every live container (in parallel, with `grace`), then every ready sandbox."""
        live = rt.running()
        if pod is not None:
            for rec in live:
                if rec.state == "running":
                    self.ctx.recorder.event(
                        pod, NORMAL, "Killing", f"Stopping container {rec.name}", container_field(rec.kind, rec.name)
                    )
        # App containers first, then sidecars (init containers still running), as upstream orders it.
        await asyncio.gather(*(self._stop_container(rec, grace, pod) for rec in live if rec.kind != "init"))
        await asyncio.gather(*(self._stop_container(rec, grace, pod) for rec in live if rec.kind == "init"))
        ready = [s for s in rt.sandboxes if s.ready]
        for sb in ready:
            await self._stop_sandbox(sb.id)
        return bool(live or ready)

    async def _release(self, pod: dict[str, Any], rt: PodRuntime) -> bool:
        """A finished pod keeps its containers (for logs) but gives back its sandbox and network."""
        return await self._kill(rt, remaining_grace(pod), pod)

    async def _terminate(self, pod: dict[str, Any], rt: PodRuntime) -> SyncResult:
        ctx = self.ctx
        grace = remaining_grace(pod)
        log.info("terminating pod=%s grace=%ds", self._name(), grace)
        if ctx.prober is not None:
            ctx.prober.stop_liveness_and_startup(self.uid)
        await self._kill(rt, grace, pod)
        rt = await ctx.inspector.inspect(self.uid)
        await ctx.status.update(pod, self._status(pod, rt, terminal=True))
        await ctx.status.delete(pod)
        self._forget_probes()
        await self._remove_all(rt)
        return SyncResult(done=True)

    async def _remove_all(self, rt: PodRuntime) -> None:
        ctx = self.ctx
        for rec in rt.all_containers():
            try:
                await ctx.cri.remove_container(rec.id)
            except NotFoundError:
                pass
        for sb in rt.sandboxes:
            try:
                await ctx.cri.stop_pod_sandbox(sb.id)
                await ctx.cri.remove_pod_sandbox(sb.id)
            except NotFoundError:
                pass
        ctx.inspector.forget([r.id for r in rt.all_containers()], [s.id for s in rt.sandboxes])
        ctx.crash_backoff.forget_prefix(self.uid)
        ctx.images.backoff.forget_prefix(self.uid)
        ctx.status.forget(self.uid)
        await asyncio.to_thread(shutil.rmtree, self._pod_dir(), True)
        if ctx.cfg.cgroups_per_qos and ctx.cfg.cgroup_driver == "cgroupfs":
            fake = {"metadata": {"uid": self.uid}, "status": {}}
            for qos in ("Guaranteed", "Burstable", "BestEffort"):
                fake["status"]["qosClass"] = qos
                await asyncio.to_thread(remove_pod_cgroup, cgroup_parent(fake, ctx.cfg.cgroup_root))
        log.info("pod removed from runtime uid=%s pod=%s", self.uid, self._name())

    async def _gc(self, rt: PodRuntime) -> None:
        """Remove dead containers but the newest dead one per container, and dead sandboxes left empty."""
        ctx = self.ctx
        removed: list[str] = []
        for recs in rt.containers.values():
            dead = [r for r in recs if r.state == "exited"]
            for rec in dead[1:]:
                try:
                    await ctx.cri.remove_container(rec.id)
                except NotFoundError:
                    pass
                removed.append(rec.id)
        if removed:
            ctx.inspector.forget(container_ids=removed)
        kept = {r.sandbox_id for r in rt.all_containers() if r.id not in removed}
        for sb in rt.sandboxes[1:]:
            if not sb.ready and sb.id not in kept:
                try:
                    await ctx.cri.remove_pod_sandbox(sb.id)
                except NotFoundError:
                    pass
                ctx.inspector.forget(sandbox_ids=[sb.id])


