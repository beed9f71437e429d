"""A fake of the pod workers' runtime protocol (agent/pods/runtime_service.py), for unit tests of the
decisions and phases without containerd: sandboxes and containers live in dicts, every call is written
down, and a test moves containers on (exits, stops taking time, hooks failing) by hand.

It lives with the tests: the agent itself only ever talks to containerd.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from agent.config import AgentConfig
from agent.pods import labels as L
from agent.pods.backoff import BackoffTable
from agent.pods.context import PodContext
from agent.pods.events import kubelet_recorder
from agent.pods.runtime import ContainerRecord, Fingerprint, PodRuntime, SandboxRecord
from agent.pods.runtime_service import SandboxError, StartError
from agent.pods.status_manager import StatusManager

NS = 1_000_000_000


class Clock:
    """Wall time the test moves on by hand (seconds since the epoch)."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeRuntime:
    clock: Clock = field(default_factory=Clock)
    runtime_name: str = "containerd"
    stop_seconds: float = 0.0  # how long (real) a stop takes, for ordering and cancellation tests
    stop_exit_code: int = 137
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    fail_start: dict[str, StartError] = field(default_factory=dict)  # container name -> error
    fail_sandbox: str = ""
    hooks: dict[tuple[str, str], tuple[str | None, float]] = field(
        default_factory=dict
    )  # (container, kind) -> (failure, seconds)
    restarts_in_logs: dict[str, int] = field(default_factory=dict)
    volumes_ready: bool = True
    storage_over_limit: str | None = None  # the eviction message local_storage_exceeded answers
    sandboxes: dict[str, list[SandboxRecord]] = field(default_factory=dict)  # uid -> records
    containers: dict[str, list[ContainerRecord]] = field(default_factory=dict)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def _ns(self) -> int:
        return int(self.clock() * NS)

    # -- what tests do to the "runtime" ------------------------------------------------------

    def record(self, uid: str, name: str) -> ContainerRecord:
        """The newest instance of a container."""
        return max((r for r in self.containers.get(uid, []) if r.name == name), key=lambda r: r.created_at)

    def _replace(self, uid: str, rec: ContainerRecord, **changes: Any) -> ContainerRecord:
        new = replace(rec, **changes)
        self.containers[uid] = [new if r.id == rec.id else r for r in self.containers[uid]]
        return new

    def exit(self, uid: str, name: str, code: int = 0, after: float = 0.0) -> ContainerRecord:
        """The container exits `after` seconds of (fake) running."""
        rec = self.record(uid, name)
        self.clock.advance(after)
        return self._replace(
            uid,
            rec,
            state="exited",
            exit_code=code,
            finished_at=self._ns(),
            reason="Completed" if code == 0 else "Error",
        )

    def lose_sandbox(self, uid: str) -> None:
        self.sandboxes[uid] = [replace(sb, ready=False) for sb in self.sandboxes.get(uid, [])]
        for rec in list(self.containers.get(uid, [])):
            if rec.state == "running":
                self._replace(uid, rec, state="exited", exit_code=137, finished_at=self._ns(), reason="Error")

    def names_called(self, verb: str) -> list[Any]:
        return [c[1] for c in self.calls if c[0] == verb]

    # -- the protocol --------------------------------------------------------------------------

    async def pod_state(self, uid: str) -> PodRuntime:
        rt = PodRuntime(uid)
        rt.sandboxes = sorted(self.sandboxes.get(uid, []), key=lambda s: s.created_at, reverse=True)
        for rec in sorted(self.containers.get(uid, []), key=lambda r: r.created_at, reverse=True):
            rt.containers.setdefault(rec.name, []).append(rec)
        return rt

    def observed(self, uid: str) -> Fingerprint | None:
        return None  # the fake keeps no record of what was looked at

    async def prepare_volumes(self, pod: dict[str, Any]) -> bool:
        return self.volumes_ready

    async def refresh_volumes(self, pod: dict[str, Any]) -> float:
        return math.inf

    async def local_storage_exceeded(self, pod: dict[str, Any]) -> str | None:
        return self.storage_over_limit

    async def release_volumes(self, uid: str) -> None:
        self.calls.append(("release_volumes", uid))

    async def run_sandbox(self, pod: dict[str, Any], attempt: int) -> SandboxRecord:
        uid = pod["metadata"]["uid"]
        self.calls.append(("run_sandbox", attempt))
        if self.fail_sandbox:
            raise SandboxError(self.fail_sandbox)
        n = next(self._ids)
        host = bool((pod.get("spec") or {}).get("hostNetwork"))
        sb = SandboxRecord(f"sb{n}", attempt, True, self._ns() + n, "" if host else f"10.0.0.{n}", (), host)
        self.sandboxes.setdefault(uid, []).append(sb)
        return sb

    async def stop_sandbox(self, sandbox_id: str) -> None:
        self.calls.append(("stop_sandbox", sandbox_id))
        for uid, sbs in self.sandboxes.items():
            self.sandboxes[uid] = [replace(sb, ready=False) if sb.id == sandbox_id else sb for sb in sbs]

    async def remove_sandbox(self, sandbox_id: str) -> None:
        self.calls.append(("remove_sandbox", sandbox_id))
        for uid, sbs in self.sandboxes.items():
            self.sandboxes[uid] = [sb for sb in sbs if sb.id != sandbox_id]

    async def start_container(
        self,
        pod: dict[str, Any],
        container: dict[str, Any],
        kind: str,
        sandbox: SandboxRecord,
        restart_count: int,
    ) -> str:
        name = container["name"]
        self.calls.append(("start", name, restart_count))
        if name in self.fail_start:
            raise self.fail_start[name]
        uid = pod["metadata"]["uid"]
        n = next(self._ids)
        now = self._ns() + n
        rec = ContainerRecord(
            f"{name}-{n}",
            name,
            kind,
            sandbox.id,
            restart_count,
            L.container_hash(container),
            "running",
            now,
            now,
            0,
            0,
            "",
            "",
            container.get("image", ""),
            "sha256:img",
            f"/logs/{name}/{restart_count}.log",
        )
        self.containers.setdefault(uid, []).append(rec)
        return rec.id

    async def stop_container(self, container_id: str, grace: int) -> None:
        name = next((r.name for recs in self.containers.values() for r in recs if r.id == container_id), "?")
        self.calls.append(("stop", name, grace))
        if self.stop_seconds:
            await asyncio.sleep(self.stop_seconds)
        for uid, recs in self.containers.items():
            for rec in recs:
                if rec.id == container_id and rec.state == "running":
                    self._replace(
                        uid,
                        rec,
                        state="exited",
                        exit_code=self.stop_exit_code,
                        finished_at=self._ns(),
                        reason="Error" if self.stop_exit_code else "Completed",
                    )
        self.calls.append(("stopped", name, grace))

    async def remove_container(self, record: ContainerRecord) -> None:
        self.calls.append(("remove", record.name))
        for uid, recs in self.containers.items():
            self.containers[uid] = [r for r in recs if r.id != record.id]

    async def run_hook(
        self,
        pod: dict[str, Any],
        container: dict[str, Any],
        container_id: str,
        handler: dict[str, Any],
        pod_ip: str,
        budget: float = 0,
    ) -> str | None:
        lifecycle = container.get("lifecycle") or {}
        kind = "postStart" if lifecycle.get("postStart") is handler else "preStop"
        self.calls.append(("hook", container["name"], kind))
        failure, seconds = self.hooks.get((container["name"], kind), (None, 0.0))
        if seconds:
            await asyncio.sleep(seconds)
        return failure

    async def logged_restarts(self, pod: dict[str, Any], name: str) -> int:
        return self.restarts_in_logs.get(name, 0)

    async def remove_pod_files(self, uid: str, pod: dict[str, Any] | None) -> None:
        self.calls.append(("remove_pod_files", uid))


class RecordingStatus(StatusManager):
    """The status manager without an API: every status it would have written, and the final DELETEs."""

    def __init__(self) -> None:
        super().__init__(None)
        self.writes: dict[str, list[dict[str, Any]]] = {}
        self.deleted: list[str] = []

    async def update(self, pod: dict[str, Any], status: dict[str, Any]) -> bool:
        changed = await super().update(pod, status)
        uid = pod["metadata"]["uid"]
        if changed:
            self.writes.setdefault(uid, []).append(self.shown(uid) or {})
        return changed

    async def delete(self, pod: dict[str, Any]) -> bool:
        self.deleted.append(pod["metadata"]["uid"])
        return await super().delete(pod)


def fake_context(runtime: FakeRuntime, **cfg: Any) -> PodContext:
    """A PodContext on the fake runtime: events and status kept in memory."""
    config = AgentConfig(node_name="fake-node", sync_frequency=60.0, **cfg)
    return PodContext(
        cfg=config,
        recorder=kubelet_recorder(None, "fake-node"),
        status=RecordingStatus(),
        crash_backoff=BackoffTable(10, 300, clock=runtime.clock),
        host_ip=lambda: "192.0.2.1",
        runtime=runtime,
    )


def make_pod(
    uid: str = "u1",
    restart: str = "Always",
    containers: tuple[str, ...] = ("main",),
    init: tuple[str, ...] = (),
    sidecars: tuple[str, ...] = (),
    grace: int | None = 30,
    **spec: Any,
) -> dict[str, Any]:
    def c(name: str, **extra: Any) -> dict[str, Any]:
        return {"name": name, "image": "busybox:1.36", **extra}

    inits = [c(n, restartPolicy="Always") if n in sidecars else c(n) for n in init]
    body: dict[str, Any] = {
        "metadata": {"name": f"pod-{uid}", "namespace": "ns", "uid": uid},
        "spec": {
            "restartPolicy": restart,
            "containers": [c(n) for n in containers],
            "initContainers": inits,
            **spec,
        },
        "status": {},
    }
    if grace is not None:
        body["spec"]["terminationGracePeriodSeconds"] = grace
    return body


def events(ctx: PodContext, uid: str) -> list[tuple[str, str, str]]:
    return [(t, r, m) for u, t, r, m in ctx.recorder.recorded if u == uid]


Getter = Callable[[], dict[str, Any] | None]
