"""What CRI says about one pod: its sandboxes and containers, newest first, with full container status.

This is the "actual state" half of every sync. Statuses of exited containers never change, so they are
cached by container ID; a running container is asked again only when ListContainers shows its state
moved. The agent stores nothing else: labels and annotations carry everything needed after a restart.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from agent.cri import CRIClient, NotFoundError, pb
from agent.cri.logs import read_tail
from agent.pods import labels as L

STATE_NAMES = {
    pb.CONTAINER_CREATED: "created",
    pb.CONTAINER_RUNNING: "running",
    pb.CONTAINER_EXITED: "exited",
}


@dataclass(frozen=True)
class ContainerRecord:
    id: str
    name: str
    kind: str  # "init" or "app"
    sandbox_id: str
    restart_count: int
    hash: str
    state: str  # created / running / exited / unknown
    created_at: int  # ns
    started_at: int
    finished_at: int
    exit_code: int
    reason: str
    message: str
    image: str
    image_ref: str
    log_path: str


@dataclass(frozen=True)
class SandboxRecord:
    id: str
    attempt: int
    ready: bool
    created_at: int
    ip: str
    ips: tuple[str, ...]
    host_network: bool


# Every sandbox and container ID of one pod with its CRI state, sorted: what the relist compares to
# tell that a pod's runtime state moved.
Fingerprint = tuple[tuple[str, int], ...]


def fingerprint(items: Iterable[tuple[str, int]]) -> Fingerprint:
    return tuple(sorted(items))


@dataclass
class PodRuntime:
    uid: str
    sandboxes: list[SandboxRecord] = field(default_factory=list)  # newest first
    containers: dict[str, list[ContainerRecord]] = field(default_factory=dict)  # name -> newest first

    @property
    def latest_sandbox(self) -> SandboxRecord | None:
        return self.sandboxes[0] if self.sandboxes else None

    def all_containers(self) -> list[ContainerRecord]:
        return [c for recs in self.containers.values() for c in recs]

    def latest(self, name: str, sandbox_id: str | None = None) -> ContainerRecord | None:
        for rec in self.containers.get(name, []):
            if sandbox_id is None or rec.sandbox_id == sandbox_id:
                return rec
        return None

    def running(self) -> list[ContainerRecord]:
        """The containers a kill stops (upstream's ConvertPodStatusToRunningPod: running ones only)."""
        return [c for c in self.all_containers() if c.state == "running"]

    def active(self) -> list[ContainerRecord]:
        """Containers of the newest sandbox (upstream's ActiveContainerStatuses)."""
        sb = self.latest_sandbox
        return [c for c in self.all_containers() if sb is not None and c.sandbox_id == sb.id]

    def empty(self) -> bool:
        return not self.sandboxes and not any(self.containers.values())


class RuntimeInspector:
    def __init__(self, cri: CRIClient) -> None:
        self.cri = cri
        self._status_cache: dict[str, ContainerRecord] = {}
        self._sandbox_net: dict[str, tuple[str, tuple[str, ...], bool]] = {}
        self._observed: dict[str, Fingerprint] = {}  # pod uid -> its state as the last inspect saw it

    def observed(self, uid: str) -> Fingerprint | None:
        """The pod's runtime state as its last inspection listed it (None: nothing, or never looked)."""
        return self._observed.get(uid)

    async def inspect(self, uid: str) -> PodRuntime:
        selector = {L.POD_UID: uid}
        sandboxes = await self.cri.list_pod_sandbox(labels=selector)
        containers = await self.cri.list_containers(labels=selector)
        seen = fingerprint([(sb.id, sb.state) for sb in sandboxes] + [(c.id, c.state) for c in containers])
        if seen:
            self._observed[uid] = seen
        else:
            self._observed.pop(uid, None)
        rt = PodRuntime(uid)
        for sb in sorted(sandboxes, key=lambda s: s.created_at, reverse=True):
            ready = sb.state == pb.SANDBOX_READY
            net = self._sandbox_net.get(sb.id)
            if net is None and ready:
                try:
                    net = self._network((await self.cri.pod_sandbox_status(sb.id)).status)
                except NotFoundError:
                    continue
            ip, ips, host_net = net or ("", (), False)
            rt.sandboxes.append(
                SandboxRecord(sb.id, sb.metadata.attempt, ready, sb.created_at, ip, ips, host_net)
            )
        for c in containers:
            rec = await self._record(c)
            if rec is not None:
                rt.containers.setdefault(rec.name, []).append(rec)
        for recs in rt.containers.values():
            recs.sort(key=lambda r: r.created_at, reverse=True)
        return rt

    async def sandbox(self, sandbox_id: str) -> SandboxRecord | None:
        """One sandbox as PodSandboxStatus tells it (None: the runtime does not know it), as upstream
        reads a sandbox it has just created; its network is kept for the pod's next inspection."""
        try:
            st = (await self.cri.pod_sandbox_status(sandbox_id)).status
        except NotFoundError:
            return None
        ip, ips, host_net = self._network(st) if st.state == pb.SANDBOX_READY else ("", (), False)
        return SandboxRecord(
            st.id, st.metadata.attempt, st.state == pb.SANDBOX_READY, st.created_at, ip, ips, host_net
        )

    def _network(self, st: pb.PodSandboxStatus) -> tuple[str, tuple[str, ...], bool]:
        """A ready sandbox's (IP, additional IPs, host network), remembered by its ID."""
        host_net = st.linux.namespaces.options.network == pb.NODE
        net = (st.network.ip, tuple(ip.ip for ip in st.network.additional_ips), host_net)
        self._sandbox_net[st.id] = net
        return net

    async def _record(self, c: pb.Container) -> ContainerRecord | None:
        state = STATE_NAMES.get(c.state, "unknown")
        cached = self._status_cache.get(c.id)
        if cached is not None and cached.state == state:
            return cached
        try:
            st = (await self.cri.container_status(c.id)).status
        except NotFoundError:
            return None
        rec = _from_status(st, c.pod_sandbox_id)
        if rec.state == "exited":
            extra = await asyncio.to_thread(termination_message, st, rec)
            if extra:
                rec = replace(rec, message=f"{rec.message}: {extra}" if rec.message else extra)
        self._status_cache[c.id] = rec
        return rec

    def forget(self, container_ids: list[str] | None = None, sandbox_ids: list[str] | None = None) -> None:
        for cid in container_ids or []:
            self._status_cache.pop(cid, None)
        for sid in sandbox_ids or []:
            self._sandbox_net.pop(sid, None)


def _from_status(st: pb.ContainerStatus, sandbox_id: str) -> ContainerRecord:
    ann = st.annotations
    try:
        restarts = int(ann.get(L.RESTART_COUNT, st.metadata.attempt))
    except ValueError:
        restarts = st.metadata.attempt
    return ContainerRecord(
        id=st.id,
        name=st.labels.get(L.CONTAINER_NAME, st.metadata.name),
        kind=st.labels.get(L.CONTAINER_KIND, "app"),
        sandbox_id=sandbox_id,
        restart_count=restarts,
        hash=ann.get(L.CONTAINER_HASH, ""),
        state=STATE_NAMES.get(st.state, "unknown"),
        created_at=st.created_at,
        started_at=st.started_at,
        finished_at=st.finished_at,
        exit_code=st.exit_code,
        reason=st.reason,
        message=st.message,
        image=st.image.image,
        image_ref=st.image_ref,
        log_path=st.log_path,
    )


# upstream's MaxContainerTerminationMessageLength, MaxContainerTerminationMessageLogLines and
# MaxContainerTerminationMessageLogLength
MAX_MESSAGE_BYTES = 4096
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048


def termination_message(st: pb.ContainerStatus, rec: ContainerRecord) -> str:
    """What the container wrote to its terminationMessagePath (a host file mounted there: its last
    4096 bytes), or, with policy FallbackToLogsOnError, a failed exit and no such message, the end of
    its log as `kubectl logs --tail=80` prints it, cut to the last 2048 bytes (a last line without a
    newline stays without one), as upstream reports them."""
    path = st.annotations.get(L.TERMINATION_MESSAGE_PATH, "")
    data = b""
    for mount in st.mounts:
        if path and mount.container_path == path and mount.host_path:
            try:
                with open(mount.host_path, "rb") as f:
                    size = f.seek(0, os.SEEK_END)
                    f.seek(max(0, size - MAX_MESSAGE_BYTES))
                    data = f.read()
            except OSError:
                pass
            break
    policy = st.annotations.get(L.TERMINATION_MESSAGE_POLICY, "File")
    if not data and policy == "FallbackToLogsOnError" and rec.exit_code != 0 and st.log_path:
        data = read_tail(st.log_path, FALLBACK_LOG_LINES, FALLBACK_LOG_BYTES)  # b"" if unreadable
    return data.decode(errors="replace")


@dataclass(frozen=True)
class SandboxCheck:
    """upstream's PodSandboxChanged: whether a new sandbox is needed, its attempt number, and the
    sandbox the pod has now (empty when it has none, or the network mode changed)."""

    changed: bool
    attempt: int
    sandbox_id: str


def sandbox_changed(pod: dict[str, Any], rt: PodRuntime) -> SandboxCheck:
    """A new sandbox is needed when there is none, when more than one is ready, when the newest is not
    ready, when its network mode no longer matches the pod's, or when it has no IP (pod network)."""
    if not rt.sandboxes:
        return SandboxCheck(True, 0, "")
    newest = rt.sandboxes[0]
    if sum(1 for sb in rt.sandboxes if sb.ready) > 1 or not newest.ready:
        return SandboxCheck(True, newest.attempt + 1, newest.id)
    host = bool((pod.get("spec") or {}).get("hostNetwork"))
    if newest.host_network != host:
        return SandboxCheck(True, newest.attempt + 1, "")
    if not host and not newest.ip:
        return SandboxCheck(True, newest.attempt + 1, newest.id)
    return SandboxCheck(False, newest.attempt, newest.id)


def runtime_summary(rt: PodRuntime) -> dict[str, Any]:
    """A compact view for logs."""
    return {
        "sandboxes": [(s.id[:12], s.attempt, s.ready) for s in rt.sandboxes],
        "containers": {
            n: [(r.id[:12], r.state, r.restart_count) for r in recs] for n, recs in rt.containers.items()
        },
    }
