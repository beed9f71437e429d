"""The prober's counting rules (pkg/kubelet/prober/worker.go doProbe) with a scripted handler in place
of the network: thresholds, initial verdicts, hold after a liveness failure, a new container resetting
everything, startup gating, initial delay, events. The real handlers and the agent are exercised in
tests/probes/test_handlers*.py and e2e/test_probes.py."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agent.probes.manager import ProberManager
from agent.probes.podview import ContainerView
from agent.probes.result import Outcome, Result, Target
from agent.probes.spec import Kind, ProbeSpec, container_probes


class Script:
    """Handler results in order; records the targets it was called with."""

    def __init__(self, *results: Result) -> None:
        self.results = list(results)
        self.calls: list[Target] = []

    async def __call__(self, action: dict[str, Any], target: Target, timeout: float) -> Outcome:
        self.calls.append(target)
        result = self.results.pop(0) if self.results else Result.SUCCESS
        return Outcome(result, f"out-{len(self.calls)}")


def pod(uid: str = "u1", restart: str = "Always", **probes: dict[str, Any]) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "busybox",
        "ports": [{"name": "http", "containerPort": 8080}],
        **probes,
    }
    return {
        "metadata": {"uid": uid, "name": "p", "namespace": "ns"},
        "spec": {"restartPolicy": restart, "containers": [container]},
    }


EXEC = {"exec": {"command": ["true"]}}


class Harness:
    def __init__(self, script: Script) -> None:
        self.updates: list[str] = []
        self.events: list[tuple[str, str, str]] = []
        self.manager = ProberManager(
            script, lambda uid: None, lambda p, n, t, r, m: self.events.append((t, r, m))
        )

    @property
    def woken(self) -> list[str]:
        """The pods of every verdict change so far: what the manager's run() wakes, read off the
        results store's updates queue (no run() task here: the tests drive the workers by hand)."""
        queue = self.manager.results.updates
        while not queue.empty():
            self.updates.append(queue.get_nowait().pod_uid)
        return self.updates

    def sync(
        self, body: dict[str, Any], cid: str = "c1", state: str = "running", started_at: float | None = None
    ) -> None:
        view = ContainerView(cid, state, time.time() - 60 if started_at is None else started_at)
        self.manager.sync_pod(body, "10.0.0.5", {"main": view})
        for worker in self.manager.workers.values():  # drive them by hand, not on their timers
            if worker.task is not None:
                worker.task.cancel()

    def worker(self, kind: Kind):
        return self.manager.workers[("u1", "main", kind)]


def test_defaults_as_upstream():
    spec = ProbeSpec.from_api({"exec": {"command": ["x"]}})
    assert (
        spec.initial_delay,
        spec.period,
        spec.timeout,
        spec.success_threshold,
        spec.failure_threshold,
    ) == (0, 10, 1, 1, 3)
    assert spec.termination_grace is None and spec.action == {"exec": {"command": ["x"]}}
    probes = container_probes(
        {"name": "c", "livenessProbe": {"tcpSocket": {"port": 1}, "terminationGracePeriodSeconds": 7}}
    )
    assert list(probes) == [Kind.LIVENESS] and probes[Kind.LIVENESS].termination_grace == 7


async def test_readiness_starts_unready_and_needs_success_threshold():
    h = Harness(Script(Result.SUCCESS, Result.SUCCESS, Result.FAILURE))
    h.sync(pod(readinessProbe={**EXEC, "successThreshold": 2}))
    w = h.worker(Kind.READINESS)
    assert h.manager.ready("u1", "main", "c1") is False  # not probed yet: not ready, as upstream
    await w.do_probe()
    assert h.manager.ready("u1", "main", "c1") is False  # one success of two
    await w.do_probe()
    assert h.manager.ready("u1", "main", "c1") is True
    assert h.woken == ["u1", "u1"]  # the initial FAILURE, then SUCCESS: each wakes the pod worker
    await w.do_probe()
    assert h.manager.ready("u1", "main", "c1") is True  # one failure of failureThreshold 3


async def test_failure_threshold_counts_consecutive_failures():
    h = Harness(
        Script(Result.FAILURE, Result.FAILURE, Result.SUCCESS, Result.FAILURE, Result.FAILURE, Result.FAILURE)
    )
    h.sync(pod(livenessProbe=EXEC))
    w = h.worker(Kind.LIVENESS)
    for _ in range(5):
        await w.do_probe()
        assert h.manager.failed("u1", "main", "c1") is None
    await w.do_probe()
    assert h.manager.failed("u1", "main", "c1") == (Kind.LIVENESS, None)
    assert [m for _, r, m in h.events if r == "Unhealthy"] == [
        "Liveness probe failed: out-1",
        "Liveness probe failed: out-2",
        "Liveness probe failed: out-4",
        "Liveness probe failed: out-5",
        "Liveness probe failed: out-6",
    ]


async def test_liveness_failure_holds_until_a_new_container():
    script = Script(Result.FAILURE)
    h = Harness(script)
    h.sync(pod(livenessProbe={**EXEC, "failureThreshold": 1, "terminationGracePeriodSeconds": 4}))
    w = h.worker(Kind.LIVENESS)
    await w.do_probe()
    assert h.manager.failed("u1", "main", "c1") == (Kind.LIVENESS, 4)
    await w.do_probe()
    await w.do_probe()
    assert len(script.calls) == 1  # on hold: the one failure leads to one kill, not a probe storm
    h.sync(pod(livenessProbe={**EXEC, "failureThreshold": 1}), cid="c2")
    assert h.manager.failed("u1", "main", "c2") is None  # the successor starts alive
    assert h.manager.failed("u1", "main", "c1") is None  # and the verdict about c1 is gone with it
    await w.do_probe()
    assert len(script.calls) == 2 and h.manager.failed("u1", "main", "c2") is None


async def test_failed_only_for_the_running_container():
    h = Harness(Script(Result.FAILURE))
    h.sync(pod(livenessProbe={**EXEC, "failureThreshold": 1}))
    await h.worker(Kind.LIVENESS).do_probe()
    h.sync(pod(livenessProbe={**EXEC, "failureThreshold": 1}), state="exited")
    assert h.manager.failed("u1", "main", "c1") is None


async def test_startup_gates_liveness_and_readiness():
    script = Script(Result.FAILURE, Result.SUCCESS)
    h = Harness(script)
    h.sync(pod(startupProbe={**EXEC, "failureThreshold": 5}, livenessProbe=EXEC, readinessProbe=EXEC))
    live, ready, startup = h.worker(Kind.LIVENESS), h.worker(Kind.READINESS), h.worker(Kind.STARTUP)
    await live.do_probe()
    await ready.do_probe()
    assert script.calls == []  # waiting for startup
    assert h.manager.started("u1", "main", "c1") is False
    await startup.do_probe()  # FAILURE 1 of 5
    assert h.manager.started("u1", "main", "c1") is False
    await startup.do_probe()  # SUCCESS
    assert h.manager.started("u1", "main", "c1") is True
    await startup.do_probe()  # started: no more startup probing
    assert len(script.calls) == 2
    await ready.do_probe()
    assert len(script.calls) == 3 and h.manager.ready("u1", "main", "c1") is True


async def test_initial_delay_counts_from_container_start():
    script = Script()
    h = Harness(script)
    h.sync(pod(readinessProbe={**EXEC, "initialDelaySeconds": 30}), started_at=time.time() - 5)
    await h.worker(Kind.READINESS).do_probe()
    assert script.calls == []
    h.sync(pod(readinessProbe={**EXEC, "initialDelaySeconds": 30}), started_at=time.time() - 31)
    await h.worker(Kind.READINESS).do_probe()
    assert len(script.calls) == 1 and script.calls[0] == Target("10.0.0.5", "c1", (("http", 8080),))


async def test_errored_probe_is_retried_then_thrown_away():
    script = Script(Result.UNKNOWN, Result.UNKNOWN, Result.UNKNOWN)
    h = Harness(script)
    h.sync(pod(livenessProbe={**EXEC, "failureThreshold": 1}))
    await h.worker(Kind.LIVENESS).do_probe()
    assert len(script.calls) == 3  # upstream's maxProbeRetries
    assert h.manager.failed("u1", "main", "c1") is None  # an error is not a failure
    assert ("Warning", "Unhealthy", "Liveness probe errored and resulted in unknown state: out-3") in h.events


async def test_warning_counts_as_success_with_an_event():
    h = Harness(Script(Result.WARNING))
    h.sync(pod(readinessProbe=EXEC))
    await h.worker(Kind.READINESS).do_probe()
    assert h.manager.ready("u1", "main", "c1") is True
    assert ("Warning", "ProbeWarning", "Readiness probe warning: out-1") in h.events


@pytest.mark.parametrize(
    ("restart", "keeps_going"), [("Never", False), ("OnFailure", True), ("Always", True)]
)
async def test_exited_container_ends_the_worker_only_under_never(restart, keeps_going):
    h = Harness(Script())
    h.sync(pod(restart=restart, readinessProbe=EXEC), state="exited")
    assert await h.worker(Kind.READINESS).do_probe() is keeps_going
    assert h.manager.ready("u1", "main", "c1") is False


async def test_remove_pod_stops_workers_and_verdicts():
    h = Harness(Script())
    h.sync(pod(readinessProbe=EXEC, livenessProbe=EXEC))
    assert len(h.manager.workers) == 2
    h.manager.stop_liveness_and_startup("u1")
    assert list(h.manager.workers) == [("u1", "main", Kind.READINESS)]
    h.manager.remove_pod("u1")
    assert h.manager.workers == {} and h.manager.view("u1", "main") is None


async def test_metrics_exposition_counts_results():
    h = Harness(Script(Result.SUCCESS, Result.FAILURE))
    h.sync(pod(readinessProbe=EXEC))
    await h.worker(Kind.READINESS).do_probe()
    await h.worker(Kind.READINESS).do_probe()
    text = h.manager.metrics.exposition().decode()
    assert 'prober_probe_total{probe_type="Readiness",result="successful"} 1' in text
    assert 'prober_probe_total{probe_type="Readiness",result="failed"} 1' in text
    assert 'prober_probe_duration_seconds_count{handler="exec",probe_type="Readiness"} 2.0' in text


async def test_exec_command_expands_literal_env_only():
    h = Harness(Script())
    body = pod(readinessProbe={"exec": {"command": ["check", "$(PORT)", "$(SECRET)", "$$(PORT)"]}})
    body["spec"]["containers"][0]["env"] = [
        {"name": "PORT", "value": "8080"},
        {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]
    h.sync(body)
    assert h.worker(Kind.READINESS).spec.action == {
        "exec": {"command": ["check", "8080", "$(SECRET)", "$(PORT)"]}
    }


async def test_trigger_cuts_the_wait_short_and_is_remembered():
    h = Harness(Script())
    h.sync(pod(readinessProbe=EXEC))
    w = h.worker(Kind.READINESS)
    waiting = asyncio.create_task(w._wait(30))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    w.trigger()
    await asyncio.wait_for(waiting, 1)
    w.trigger()  # while nobody waits: the next wait returns at once
    await asyncio.wait_for(w._wait(30), 1)
    started = time.monotonic()
    await w._wait(0.05)  # and the one after waits again
    assert time.monotonic() - started >= 0.04


async def test_verdicts_travel_through_the_results_store():
    h = Harness(Script(Result.SUCCESS))
    h.sync(pod(readinessProbe=EXEC))
    w = h.worker(Kind.READINESS)
    await w.do_probe()
    assert h.manager.results.get(Kind.READINESS, "c1") is Result.SUCCESS
    h.sync(pod(readinessProbe=EXEC), cid="c2")
    await w.do_probe()
    assert h.manager.results.get(Kind.READINESS, "c1") is None  # the replaced container is forgotten
    assert h.manager.results.get(Kind.READINESS, "c2") is Result.SUCCESS
    h.manager.remove_pod("u1")
    assert h.manager.results.get(Kind.READINESS, "c2") is None


async def test_run_wakes_each_changed_pod_once_per_batch():
    woken: list[str] = []
    arrived = asyncio.Event()

    def on_change(uid: str) -> None:
        woken.append(uid)
        arrived.set()

    manager = ProberManager(Script(), on_change, lambda *_: None)
    for uid in ("u1", "u2"):
        manager.sync_pod(pod(uid, readinessProbe=EXEC), "10.0.0.5", {})
    for worker in manager.workers.values():
        worker.task.cancel()
    runner = asyncio.create_task(manager.run())
    manager.results.set(Kind.READINESS, "c1", Result.FAILURE, "u1")
    manager.results.set(Kind.READINESS, "c1", Result.SUCCESS, "u1")
    manager.results.set(Kind.READINESS, "c9", Result.SUCCESS, "u2")
    manager.results.set(Kind.READINESS, "c9", Result.SUCCESS, "u2")  # no change: no update
    manager.results.set(Kind.READINESS, "c5", Result.SUCCESS, "gone")  # a removed pod wakes nobody
    await asyncio.wait_for(arrived.wait(), 5)
    assert woken == ["u1", "u2"]
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)


async def test_stopped_startup_probe_counts_as_started():
    """As upstream: a terminating pod's startup probe stops and its container counts as started, so
    readiness goes on being probed while the pod shuts down."""
    script = Script(Result.FAILURE, Result.SUCCESS)
    h = Harness(script)
    h.sync(pod(startupProbe={**EXEC, "failureThreshold": 5}, readinessProbe=EXEC))
    startup, ready = h.worker(Kind.STARTUP), h.worker(Kind.READINESS)
    await startup.do_probe()
    await ready.do_probe()
    assert len(script.calls) == 1 and h.manager.started("u1", "main", "c1") is False
    h.manager.stop_liveness_and_startup("u1")
    assert h.manager.started("u1", "main", "c1") is True
    await ready.do_probe()
    assert len(script.calls) == 2 and h.manager.ready("u1", "main", "c1") is True
