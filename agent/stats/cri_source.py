"""What CRI says in one stats pass: the pods' sandboxes and their containers, asked at once, with what
upstream's CRI stats provider drops dropped (removeTerminatedPods, removeTerminatedContainers), plus
each sandbox's PID and cgroup parent from a verbose status, asked once per sandbox and remembered
(neither changes while the sandbox lives).

ListContainerStats is asked apart (container_stats): it is the dearest call (containerd 1.6 takes
about 90 ms at 110 pods, reading every task's metrics through its shim) and the CPU and memory it
carries are read from the containers' cgroups instead, as upstream's kubelet reads them from cadvisor.
What only it knows, the writable layer's bytes and inodes, is remembered for WRITABLE_LAYER_PERIOD:
containerd itself refreshes those figures from its snapshotter on that period (the CRI plugin's
stats_collect_period, 10 s by default), so asking more often would return the same numbers. The image
file system's usage (ImageFsInfo) comes from the same snapshotter sync and is remembered as long."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.cri import CRIClient, CRIError, pb

log = logging.getLogger("agent.stats")

WRITABLE_LAYER_PERIOD = 10.0


@dataclass(frozen=True)
class SandboxInfo:
    pid: int | None
    cgroup_parent: str


@dataclass(frozen=True)
class CriSnapshot:
    sandboxes: tuple[pb.PodSandbox, ...]
    containers: tuple[pb.Container, ...]
    info: dict[str, SandboxInfo]
    image_fs: tuple[pb.FilesystemUsage, ...] = ()
    stats: dict[str, pb.ContainerStats] = field(default_factory=dict)


def latest_sandboxes(sandboxes: list[pb.PodSandbox]) -> list[pb.PodSandbox]:
    """Per pod UID the ready sandboxes, or the newest when none is ready (upstream's removeTerminatedPods)."""
    by_uid: dict[str, list[pb.PodSandbox]] = {}
    for sb in sorted(sandboxes, key=lambda s: s.created_at):
        by_uid.setdefault(sb.metadata.uid, []).append(sb)
    out: list[pb.PodSandbox] = []
    for group in by_uid.values():
        ready = [s for s in group if s.state == pb.SANDBOX_READY]
        out.extend(ready or group[-1:])
    return out


def live_containers(containers: list[pb.Container]) -> list[pb.Container]:
    """Per (pod, container name) the running instances, or the newest when none runs
    (upstream's removeTerminatedContainers)."""
    groups: dict[tuple[str, str], list[pb.Container]] = {}
    for c in sorted(containers, key=lambda c: c.created_at):
        groups.setdefault((c.pod_sandbox_id, c.metadata.name), []).append(c)
    out: list[pb.Container] = []
    for group in groups.values():
        running = [c for c in group if c.state == pb.CONTAINER_RUNNING]
        out.extend(running or group[-1:])
    return out


def parse_sandbox_info(info: dict[str, str]) -> SandboxInfo:
    """PID and cgroup parent from containerd's verbose sandbox status (the "info" JSON)."""
    try:
        data = json.loads(info.get("info", "") or "{}")
    except ValueError:
        data = {}
    pid = data.get("pid")
    parent = ((data.get("config") or {}).get("linux") or {}).get("cgroup_parent", "")
    return SandboxInfo(pid if isinstance(pid, int) and pid > 0 else None, parent or "")


class CriSource:
    def __init__(self, cri: CRIClient, clock: Callable[[], float] = time.monotonic) -> None:
        self.cri = cri
        self.clock = clock
        self._info: dict[str, SandboxInfo] = {}
        self._stats: dict[str, pb.ContainerStats] = {}
        self._stats_at: float | None = None
        self._image_fs: tuple[pb.FilesystemUsage, ...] = ()
        self._image_fs_at: float | None = None

    async def snapshot(self, with_image_fs: bool = False) -> CriSnapshot:
        now = self.clock()
        ask_image_fs = with_image_fs and (
            self._image_fs_at is None or now - self._image_fs_at >= WRITABLE_LAYER_PERIOD
        )
        calls = [self.cri.list_pod_sandbox(), self.cri.list_containers()]
        if ask_image_fs:
            calls.append(self.cri.image_fs_info())
        results = await asyncio.gather(*calls)
        sandboxes = latest_sandboxes(results[0])
        containers = live_containers(results[1])
        if ask_image_fs:
            self._image_fs, self._image_fs_at = tuple(results[2].image_filesystems), now
        image_fs = self._image_fs if with_image_fs else ()
        await self._learn([s.id for s in sandboxes if s.state == pb.SANDBOX_READY])
        live = {s.id for s in sandboxes}
        for gone in [k for k in self._info if k not in live]:
            del self._info[gone]
        return CriSnapshot(tuple(sandboxes), tuple(containers), dict(self._info), image_fs)

    def stats_due(self, max_age: float) -> bool:
        """Whether container_stats(max_age) would ask CRI again (so a pass can ask it early, beside its
        other calls)."""
        return self._stats_at is None or self.clock() - self._stats_at >= max_age

    async def container_stats(
        self, max_age: float = 0.0, want: frozenset[str] = frozenset()
    ) -> dict[str, pb.ContainerStats]:
        """ListContainerStats by container ID; an answer younger than max_age seconds that holds every
        container in want is reused."""
        now = self.clock()
        fresh = self._stats_at is not None and now - self._stats_at < max_age
        if not fresh or not want <= self._stats.keys():
            self._stats = {s.attributes.id: s for s in await self.cri.list_container_stats()}
            self._stats_at = now
        return self._stats

    async def _learn(self, ids: list[str]) -> None:
        new = [i for i in ids if i not in self._info]
        if not new:
            return
        answers = await asyncio.gather(
            *(self.cri.pod_sandbox_status(i, verbose=True) for i in new), return_exceptions=True
        )
        for sandbox_id, answer in zip(new, answers, strict=True):
            if isinstance(answer, CRIError):
                log.debug("sandbox status for stats failed sandbox=%s error=%r", sandbox_id, str(answer))
                continue
            if isinstance(answer, BaseException):
                raise answer
            self._info[sandbox_id] = parse_sandbox_info(dict(answer.info))
