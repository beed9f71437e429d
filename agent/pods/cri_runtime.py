"""The runtime protocol (agent/pods/runtime_service.py) on containerd's CRI, with the host work that goes
with each step: the pod's log directory, its /etc/hosts and termination-message files, its volumes,
image pulls, and the log files that leave with a removed container.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import math
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.config import AgentConfig
from agent.cri import CRIClient, CRIError, NotFoundError, pb
from agent.pods.container import container_config
from agent.pods.dns import DNS
from agent.pods.env import ConfigError, Fetch, resolve_env
from agent.pods.events import WARNING, EventRecorder, container_field
from agent.pods.images import ImageError, ImageManager
from agent.pods.qos import cgroup_parent, remove_pod_cgroup
from agent.pods.runtime import ContainerRecord, Fingerprint, PodRuntime, RuntimeInspector, SandboxRecord
from agent.pods.runtime_service import SandboxError, StartError
from agent.pods.sandbox import HostnameError, hosts_file, pod_log_dir, sandbox_config
from agent.pods.service_env import NOT_SYNCED, service_env
from agent.pods.spec import pod_ref
from agent.probes.hooks import HookRunner
from agent.probes.result import Target
from agent.staticpods.keys import is_static
from agent.volumes import VolumeError, VolumeManager, container_mounts
from kubeclient.errors import ApiError

log = logging.getLogger("agent.pods.runtime")

RETRY_AFTER_ERROR = 5.0
_LOG_FILE = re.compile(r"^(\d+)\.log(\..*)?")


def restart_count_from_logs(log_dir: str) -> int:
    """upstream's calcRestartCountByLogDir: one more than the highest <n>.log (rotated ones count), 0
    for a missing or empty folder. After the runtime lost its state (a reboot, a wiped containerd) the
    next container then neither reuses nor appends to an old log, and restartCount does not restart."""
    try:
        names = os.listdir(log_dir)
    except OSError:
        return 0
    count = 0
    for name in names:
        m = _LOG_FILE.match(name)
        if m and not os.path.isdir(os.path.join(log_dir, name)):
            count = max(count, int(m.group(1)) + 1)
    return count


def remove_log_files(log_path: str) -> None:
    """A container's log and its rotated files (upstream's containerLogManager.Clean: <log>*)."""
    if not log_path:
        return
    for path in glob.glob(glob.escape(log_path) + "*"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


@dataclass
class CRIRuntime:
    cfg: AgentConfig
    cri: CRIClient
    inspector: RuntimeInspector
    images: ImageManager
    recorder: EventRecorder
    fetch: Fetch
    host_ip: Any  # Callable[[], str]
    node_hostname: str
    host_dns: DNS
    node_memory: Any  # Callable[[], int]
    node_allocatable: Any  # Callable[[], dict[str, str]]
    volumes: VolumeManager | None = None
    hooks: HookRunner | None = None
    services: Any = list  # Callable[[], list[dict] | None]: None while the informer has not listed
    # The volumes made ready by the pass's prepare_volumes, for the containers it starts.
    _ready: dict[str, Any] = field(default_factory=dict)

    @property
    def runtime_name(self) -> str:
        return self.cri.version.runtime_name if self.cri.version else "containerd"

    async def pod_state(self, uid: str) -> PodRuntime:
        return await self.inspector.inspect(uid)

    def observed(self, uid: str) -> Fingerprint | None:
        return self.inspector.observed(uid)

    # -- volumes and sandboxes -------------------------------------------------------------------

    async def prepare_volumes(self, pod: dict[str, Any]) -> bool:
        if self.volumes is None:
            return True
        try:
            self._ready[pod["metadata"]["uid"]] = await self.volumes.prepare(pod)
        except VolumeError as err:
            for message in err.messages:  # one per failed operation; none for a volume awaiting attach
                self.recorder.event(pod, WARNING, "FailedMount", message)
            return False
        except ApiError as err:
            self.recorder.event(pod, WARNING, "FailedMount", f"MountVolume.SetUp failed: {err}")
            return False
        return True

    async def refresh_volumes(self, pod: dict[str, Any]) -> float:
        if self.volumes is None:
            return math.inf
        try:
            await self.volumes.refresh(pod)
        except (VolumeError, ApiError) as err:
            self.recorder.event(pod, WARNING, "FailedMount", str(err))
            return RETRY_AFTER_ERROR
        due = self.volumes.refresh_in(pod["metadata"]["uid"])
        return math.inf if due is None else due

    async def local_storage_exceeded(self, pod: dict[str, Any]) -> str | None:
        if self.volumes is None:
            return None
        return await self.volumes.empty_dir_over_limit(pod)

    async def run_sandbox(self, pod: dict[str, Any], attempt: int) -> SandboxRecord:
        try:
            config = sandbox_config(self.cfg, pod, attempt, self.host_dns, self.node_hostname)
        except HostnameError as err:
            raise SandboxError(str(err)) from None
        handler = await self.runtime_handler(pod)
        await asyncio.to_thread(os.makedirs, pod_log_dir(self.cfg, pod), 0o755, True)
        try:
            sid = await self.cri.run_pod_sandbox(config, handler)
        except CRIError as err:
            log.warning("sandbox failed pod=%s error=%r", pod_ref(pod), str(err))
            raise SandboxError(err.rpc_text) from None
        log.info("sandbox started pod=%s sandbox=%s attempt=%d", pod_ref(pod), sid[:13], attempt)
        sandbox = await self.inspector.sandbox(sid)
        if sandbox is None:
            raise SandboxError(f"sandbox {sid} not found after it was created")
        return sandbox

    async def runtime_handler(self, pod: dict[str, Any]) -> str:
        """The CRI handler of the pod's RuntimeClass (upstream's runtimeClassManager.LookupRuntimeHandler):
        "" without one; a class that does not exist fails the sandbox with the API's NotFound text."""
        name = (pod.get("spec") or {}).get("runtimeClassName") or ""
        if not name:
            return ""
        try:
            runtime_class = await self.fetch("RuntimeClass", "", name)
        except ApiError as err:
            raise SandboxError(f"failed to lookup RuntimeClass {name}: {err}") from None
        if runtime_class is None:
            raise SandboxError(f'runtimeclass.node.k8s.io "{name}" not found')
        return str(runtime_class.get("handler") or "")

    async def stop_sandbox(self, sandbox_id: str) -> None:
        try:
            await self.cri.stop_pod_sandbox(sandbox_id)
        except NotFoundError:
            pass
        self.inspector.forget(sandbox_ids=[sandbox_id])

    async def remove_sandbox(self, sandbox_id: str) -> None:
        try:
            await self.cri.stop_pod_sandbox(sandbox_id)
            await self.cri.remove_pod_sandbox(sandbox_id)
        except NotFoundError:
            pass
        self.inspector.forget(sandbox_ids=[sandbox_id])

    # -- containers ------------------------------------------------------------------------------

    async def start_container(
        self,
        pod: dict[str, Any],
        container: dict[str, Any],
        kind: str,
        sandbox: SandboxRecord,
        restart_count: int,
    ) -> str:
        name = container["name"]
        field = container_field(kind, name)
        sb_config = sandbox_config(self.cfg, pod, sandbox.attempt, self.host_dns, self.node_hostname)
        try:
            image_ref = await self.images.ensure(pod, container, sb_config, field)
        except ImageError as err:
            self.recorder.event(pod, WARNING, "Failed", f"Error: {err.reason}", field)
            retry = self.images.backoff.remaining((pod["metadata"]["uid"], container.get("image", "")))
            raise StartError(err.reason, err.message, retry if retry > 0 else RETRY_AFTER_ERROR) from None
        try:
            config = await self._config(pod, container, kind, sandbox, restart_count, image_ref)
        except (ConfigError, ApiError, VolumeError) as err:
            self.recorder.event(pod, WARNING, "Failed", f"Error: {err}", field)
            raise StartError("CreateContainerConfigError", str(err)) from None
        try:
            cid = await self.cri.create_container(sandbox.id, config, sb_config)
        except CRIError as err:
            self.recorder.event(pod, WARNING, "Failed", f"Error: {err.details}", field)
            raise StartError("CreateContainerError", err.details) from None
        self.recorder.event(pod, "Normal", "Created", f"Created container: {name}", field)
        try:
            await self.cri.start_container(cid)
        except CRIError as err:
            self.recorder.event(pod, WARNING, "Failed", f"Error: {err.details}", field)
            raise StartError("RunContainerError", err.details) from None
        self.recorder.event(pod, "Normal", "Started", f"Started container {name}", field)
        log.info(
            "container started pod=%s container=%s id=%s restarts=%d",
            pod_ref(pod),
            name,
            cid[:13],
            restart_count,
        )
        return cid

    async def _config(
        self,
        pod: dict[str, Any],
        container: dict[str, Any],
        kind: str,
        sandbox: SandboxRecord,
        restart_count: int,
        image_ref: str,
    ) -> Any:
        volumes = self._ready.get(pod["metadata"]["uid"])
        if volumes is None:
            volumes = await self.volumes.prepare(pod) if self.volumes is not None else {}
        services = self.services()
        if services is None and not is_static(pod):  # a static pod does not wait for the API
            raise ConfigError(NOT_SYNCED)
        env = await resolve_env(
            pod,
            container,
            self.fetch,
            self.host_ip(),
            sandbox.ip,
            self.node_allocatable(),
            service_env(pod, services or []),
        )
        term_file, hosts, mounts = await asyncio.to_thread(
            self._host_files, pod, container, sandbox.ip, volumes, dict(env)
        )
        return container_config(
            pod, container, kind, restart_count, image_ref, env, self.node_memory(), term_file, hosts, mounts
        )

    def _host_files(
        self,
        pod: dict[str, Any],
        container: dict[str, Any],
        pod_ip: str,
        volumes: dict[str, Any],
        env: dict[str, str],
    ) -> tuple[str, str, list[pb.Mount]]:
        """The host side of a container about to be created, in one trip to a worker thread: its
        termination-message file, the pod's /etc/hosts (none on the host network), its mounts and its
        log folder. Returns (termination file, hosts file or "", mounts)."""
        term_file = self._termination_file(pod, container["name"])
        hosts = "" if (pod.get("spec") or {}).get("hostNetwork") else self._hosts_file(pod, pod_ip)
        mounts = container_mounts(container, volumes, env)
        os.makedirs(os.path.join(pod_log_dir(self.cfg, pod), container["name"]), 0o755, True)
        return term_file, hosts, mounts

    def _pod_dir(self, uid: str) -> Path:
        return Path(self.cfg.root_dir) / "pods" / uid

    def _termination_file(self, pod: dict[str, Any], name: str) -> str:
        """A fresh host file for the container's termination message, writable by any user in the
        container (as upstream makes it), under <root-dir>/pods/<uid>/containers/<name>/."""
        folder = self._pod_dir(pod["metadata"]["uid"]) / "containers" / name
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / uuid.uuid4().hex[:8]
        path.touch()
        path.chmod(0o666)
        return str(path)

    def _hosts_file(self, pod: dict[str, Any], pod_ip: str) -> str:
        path = self._pod_dir(pod["metadata"]["uid"]) / "etc-hosts"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(hosts_file(pod, pod_ip, self.cfg.cluster_domain))
        tmp.chmod(0o644)
        tmp.replace(path)
        return str(path)

    async def stop_container(self, container_id: str, grace: int) -> None:
        try:
            await self.cri.stop_container(container_id, grace)
        except NotFoundError:
            pass
        self.inspector.forget(container_ids=[container_id])

    async def remove_container(self, record: ContainerRecord) -> None:
        await asyncio.to_thread(remove_log_files, record.log_path)
        try:
            await self.cri.remove_container(record.id)
        except NotFoundError:
            pass
        self.inspector.forget(container_ids=[record.id])

    async def run_hook(
        self,
        pod: dict[str, Any],
        container: dict[str, Any],
        container_id: str,
        handler: dict[str, Any],
        pod_ip: str,
        budget: float = 0,
    ) -> str | None:
        if self.hooks is None:
            return None
        ip = self.host_ip() if (pod.get("spec") or {}).get("hostNetwork") else pod_ip
        return await self.hooks.run(
            handler, Target(ip, container_id), container["name"], pod_ref(pod), budget
        )

    async def logged_restarts(self, pod: dict[str, Any], name: str) -> int:
        return await asyncio.to_thread(
            restart_count_from_logs, os.path.join(pod_log_dir(self.cfg, pod), name)
        )

    # -- host files of a removed pod -------------------------------------------------------------

    async def release_volumes(self, uid: str) -> None:
        if self.volumes is None:
            return
        try:
            await self.volumes.teardown(uid)
        except OSError as err:
            log.warning("volume unmount failed uid=%s error=%r", uid, str(err))

    async def remove_pod_files(self, uid: str, pod: dict[str, Any] | None) -> None:
        """What the pod left on the host besides CRI objects: <root-dir>/pods/<uid>, its log folder
        (/var/log/pods/<ns>_<name>_<uid>, as upstream's log GC removes it) and its cgroups."""
        self._ready.pop(uid, None)
        if self.volumes is not None:
            self.volumes.forget(uid)
            try:
                await self.volumes.teardown(uid)
            except OSError as err:
                log.warning("volume unmount failed uid=%s error=%r", uid, str(err))
                raise
        await asyncio.to_thread(shutil.rmtree, self._pod_dir(uid), True)
        if pod is not None:
            await asyncio.to_thread(shutil.rmtree, pod_log_dir(self.cfg, pod), True)
        else:
            await asyncio.to_thread(remove_pod_log_dirs, self.cfg.pod_logs_dir, {uid})
        if self.cfg.cgroups_per_qos and self.cfg.cgroup_driver == "cgroupfs":
            fake = {"metadata": {"uid": uid}, "status": {}}
            for qos in ("Guaranteed", "Burstable", "BestEffort"):
                fake["status"]["qosClass"] = qos
                await asyncio.to_thread(remove_pod_cgroup, cgroup_parent(fake, self.cfg.cgroup_root))


def log_dir_uid(name: str) -> str:
    """The pod UID of a /var/log/pods entry named <namespace>_<name>_<uid> (names hold no "_")."""
    return name.rsplit("_", 1)[-1] if name.count("_") >= 2 else ""


def remove_pod_log_dirs(pod_logs_dir: str, uids: set[str]) -> list[str]:
    """Remove the log folders of these pod UIDs; the folders removed."""
    removed = []
    try:
        entries = os.listdir(pod_logs_dir)
    except OSError:
        return removed
    for name in entries:
        if log_dir_uid(name) in uids:
            shutil.rmtree(os.path.join(pod_logs_dir, name), True)
            removed.append(name)
    return removed
