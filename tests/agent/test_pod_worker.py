"""The pod worker's phases (sync, terminating, terminated, finished) on a fake runtime: what it starts
and stops, with which grace periods, which events it records, and which status reaches the API when.

Each behaviour here is one where the agent used to differ from the upstream kubelet; the fake runtime
(tests/agent/fakeruntime.py) makes them fast and exact. tests/agent/test_worker_cri.py and e2e/ drive the
same code against containerd and through the API.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent.pods import worker as worker_module
from agent.pods.podstate import Phase
from agent.pods.runtime_service import StartError
from tests.agent.fakeruntime import FakeRuntime, events, fake_context, make_pod


def PodWorker(ctx, uid, get_pod, *admit):
    """A worker the status manager asks, as the pod manager wires them, whether it could still run."""
    worker = worker_module.PodWorker(ctx, uid, get_pod, *admit)
    ctx.status.could_have_running = lambda _uid: worker.could_have_running()
    return worker


async def steps(worker: worker_module.PodWorker, count: int = 12) -> bool:
    """Run passes of the worker until it is done (True) or `count` passes ran."""
    for _ in range(count):
        done, _delay = await worker.step()
        if done:
            return True
    return False


async def until(worker: worker_module.PodWorker, check, count: int = 20) -> None:
    for _ in range(count):
        if check():
            return
        done, _ = await worker.step()
        assert not done, "worker finished early"
    assert check(), "not reached"


def started(fake: FakeRuntime, count: int):
    return lambda: len(fake.names_called("start")) == count


def shown(ctx, uid: str = "u1") -> dict[str, Any]:
    """The status as the API would hold it: the last one the status manager let through."""
    writes = ctx.status.writes.get(uid) or [{}]
    return writes[-1]


def main_status(status: dict[str, Any], name: str = "main") -> dict[str, Any]:
    return next(cs for cs in status.get("containerStatuses") or [] if cs["name"] == name)


# -- crash-loop backoff ---------------------------------------------------------------------------


async def test_crash_backoff_is_counted_from_the_exit_not_from_the_restart():
    fake = FakeRuntime()
    ctx = fake_context(fake)
    pod = make_pod()
    worker = PodWorker(ctx, "u1", lambda: pod)
    await until(worker, lambda: fake.names_called("start") == ["main"])
    fake.exit("u1", "main", 1, after=5)
    await until(worker, lambda: fake.names_called("start") == ["main", "main"])  # the first restart is free
    # It ran 30 s this time: the 10 s window starts at this exit, so it waits (the old count from the
    # last restart would have let it start at once).
    fake.exit("u1", "main", 1, after=30)
    await steps(worker, 3)
    assert fake.names_called("start") == ["main", "main"]
    waiting = main_status(ctx.status.last("u1"))["state"]["waiting"]
    assert waiting["reason"] == "CrashLoopBackOff"
    assert waiting["message"] == "back-off 10s restarting failed container=main pod=pod-u1_ns(u1)"
    assert ("Warning", "BackOff", "Back-off restarting failed container main in pod pod-u1_ns(u1)") in events(
        ctx, "u1"
    )
    fake.clock.advance(10)
    await until(worker, lambda: len(fake.names_called("start")) == 3)


async def test_a_fixed_image_restarts_at_once_and_ten_minutes_of_running_start_over():
    fake = FakeRuntime()
    ctx = fake_context(fake)
    pod = make_pod()
    worker = PodWorker(ctx, "u1", lambda: pod)
    await until(worker, lambda: len(fake.names_called("start")) == 1)
    for _ in range(3):  # crash a few times: the window grows to 40 s
        fake.exit("u1", "main", 1, after=1)
        fake.clock.advance(300)
        await until(worker, started(fake, len(fake.names_called("start")) + 1))
    fake.exit("u1", "main", 1, after=1)
    await steps(worker, 2)
    starts = len(fake.names_called("start"))
    assert "CrashLoopBackOff" in str(main_status(ctx.status.last("u1"))["state"])
    # The image was fixed: the backoff belongs to the old definition (keyed by its hash), so it starts now.
    pod["spec"]["containers"][0]["image"] = "busybox:1.37"
    await until(worker, lambda: len(fake.names_called("start")) == starts + 1)
    # Ten minutes of running between the restart and the next exit: the window starts over at 10 s.
    fake.exit("u1", "main", 1, after=601)
    await until(worker, lambda: len(fake.names_called("start")) == starts + 2)
    fake.exit("u1", "main", 1, after=1)
    await steps(worker, 2)
    assert main_status(ctx.status.last("u1"))["state"]["waiting"]["message"].startswith("back-off 10s ")


# -- terminal phases ------------------------------------------------------------------------------


async def test_never_pod_with_a_sidecar_is_running_until_sidecar_and_sandbox_are_stopped():
    fake = FakeRuntime()
    ctx = fake_context(fake)
    pod = make_pod(restart="Never", init=("side",), sidecars=("side",), grace=7)
    worker = PodWorker(ctx, "u1", lambda: pod)
    await until(worker, lambda: fake.names_called("start") == ["side", "main"])
    fake.exit("u1", "main", 0)
    await worker.step()
    # The app container is done, the sidecar still runs: Running, and the sidecar is stopped with the
    # pod's grace period (upstream's KillPod for a pod with nothing left to run).
    assert shown(ctx)["phase"] == "Running"
    assert ("stop", "side", 7) in fake.calls and ("stop_sandbox", "sb1") in fake.calls
    assert ("Normal", "Killing", "Stopping container side") in events(ctx, "u1")
    await until(worker, lambda: worker.phase is Phase.FINISHED)
    assert shown(ctx)["phase"] == "Succeeded"


async def test_terminal_phase_reaches_the_api_only_after_the_sandbox_is_stopped():
    fake = FakeRuntime()
    ctx = fake_context(fake)
    pod = make_pod(restart="Never")
    worker = PodWorker(ctx, "u1", lambda: pod)
    phases_before_stop: list[str] = []
    real_stop = fake.stop_sandbox

    async def stop_sandbox(sandbox_id: str) -> None:
        phases_before_stop.append(shown(ctx)["phase"])
        await real_stop(sandbox_id)

    fake.stop_sandbox = stop_sandbox  # type: ignore[method-assign]
    await until(worker, lambda: shown(ctx).get("phase") == "Running")
    fake.exit("u1", "main", 0)
    await worker.step()
    assert ctx.status.last("u1")["phase"] == "Succeeded"  # computed...
    assert shown(ctx)["phase"] == "Running"  # ...but held back while the sandbox still runs
    await until(worker, lambda: worker.phase is Phase.FINISHED)
    assert phases_before_stop == ["Running"]
    assert shown(ctx)["phase"] == "Succeeded"
    assert not worker.could_have_running()


async def test_deleted_pending_pod_ends_failed():
    fake = FakeRuntime(fail_start={"main": StartError("ErrImagePull", "not found")})
    ctx = fake_context(fake)
    pod = make_pod()
    worker = PodWorker(ctx, "u1", lambda: pod)
    await until(worker, lambda: shown(ctx).get("phase") == "Pending" and fake.names_called("start"))
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    pod["metadata"]["deletionGracePeriodSeconds"] = 30
    await until(worker, lambda: worker.phase is Phase.FINISHED)
    final = shown(ctx)
    assert final["phase"] == "Failed"
    assert main_status(final)["state"]["terminated"]["reason"] == "ContainerStatusUnknown"
    assert ctx.status.deleted == ["u1"]  # then the final DELETE


# -- deletion -------------------------------------------------------------------------------------


async def test_force_deleted_pod_is_killed_with_its_last_known_spec():
    fake = FakeRuntime(hooks={("main", "preStop"): (None, 1.05)})
    ctx = fake_context(fake)
    pod: dict[str, Any] | None = make_pod(grace=7)
    assert pod is not None
    pod["spec"]["containers"][0]["lifecycle"] = {"preStop": {"exec": {"command": ["true"]}}}
    worker = PodWorker(ctx, "u1", lambda: pod)
    await until(worker, lambda: fake.names_called("start") == ["main"])
    pod = None  # gone from the API at once (kubectl delete --force --grace-period=0)
    assert await steps(worker, 8)
    # The pod's own terminationGracePeriodSeconds, its preStop hook taking a second of it, a Killing
    # event, then everything removed.
    assert ("hook", "main", "preStop") in fake.calls
    assert ("stop", "main", 6) in fake.calls
    assert ("Normal", "Killing", "Stopping container main") in events(ctx, "u1")
    assert ("remove_pod_files", "u1") in fake.calls and fake.containers["u1"] == []


async def test_shorter_grace_period_cancels_the_stop_under_way():
    fake = FakeRuntime(stop_seconds=3.0)
    ctx = fake_context(fake)
    pod = make_pod(grace=30)
    worker = PodWorker(ctx, "u1", lambda: pod)
    await until(worker, lambda: fake.names_called("start") == ["main"])
    pod["metadata"].update(deletionTimestamp="2026-01-01T00:00:30Z", deletionGracePeriodSeconds=30)
    worker.start(lambda w: None)
    worker.wake()
    while ("stop", "main", 30) not in fake.calls:
        await asyncio.sleep(0.01)
    fake.stop_seconds = 0.0
    pod["metadata"].update(deletionTimestamp="2026-01-01T00:00:01Z", deletionGracePeriodSeconds=1)
    worker.wake()
    await asyncio.wait_for(_finished(worker), 5)
    stops = [c for c in fake.calls if c[0] in ("stop", "stopped")]
    # The first stop (30 s) never completed; the second asked for the shorter period (at least 2 s).
    assert stops[:3] == [("stop", "main", 30), ("stop", "main", 2), ("stopped", "main", 2)]
    assert worker.state.grace == 1
    assert worker.task is not None
    worker.task.cancel()
    await asyncio.gather(worker.task, return_exceptions=True)


async def _finished(worker: worker_module.PodWorker) -> None:
    while worker.phase is not Phase.FINISHED:
        await asyncio.sleep(0.01)


async def test_sidecars_stop_after_the_app_within_the_same_grace_period():
    fake = FakeRuntime(stop_seconds=2.2)
    ctx = fake_context(fake)
    pod = make_pod(init=("side",), sidecars=("side",), grace=10)
    worker = PodWorker(ctx, "u1", lambda: pod)
    await until(worker, lambda: fake.names_called("start") == ["side", "main"])
    pod["metadata"].update(deletionTimestamp="2026-01-01T00:00:10Z", deletionGracePeriodSeconds=10)
    await until(worker, lambda: worker.phase is Phase.TERMINATED)
    order = [(c[0], c[1]) for c in fake.calls if c[0] in ("stop", "stopped")]
    assert order[:2] == [("stop", "main"), ("stopped", "main")]
    side = next(c for c in fake.calls if c[0] == "stop" and c[1] == "side")
    # The sidecar waited about 2 s for the app container: it gets what is left, not a second 10 s.
    assert side[2] == 8


# -- starting ---------------------------------------------------------------------------------------


async def test_restart_count_continues_from_the_log_folder_after_the_runtime_lost_state():
    fake = FakeRuntime(restarts_in_logs={"main": 4})
    ctx = fake_context(fake)
    worker = PodWorker(ctx, "u1", lambda: make_pod())
    await until(worker, lambda: fake.names_called("start"))
    assert ("start", "main", 4) in fake.calls


async def test_post_start_failure_event_names_no_output():
    secret = 'Exec lifecycle hook ([sh -c echo s3cret; exit 3]) ... message: "s3cret\\n"'
    fake = FakeRuntime(hooks={("main", "postStart"): (secret, 0.0)})
    ctx = fake_context(fake)
    pod = make_pod(grace=5)
    pod["spec"]["containers"][0]["lifecycle"] = {
        "postStart": {"exec": {"command": ["sh", "-c", "echo s3cret; exit 3"]}}
    }
    worker = PodWorker(ctx, "u1", lambda: pod)
    await until(worker, lambda: ("stop", "main", 5) in fake.calls)
    recorded = events(ctx, "u1")
    assert ("Warning", "FailedPostStartHook", "PostStartHook failed") in recorded
    assert ("Normal", "Killing", "FailedPostStartHook") in recorded
    assert not any("s3cret" in m for _t, _r, m in recorded)
    await steps(worker, 1)
    waiting = main_status(ctx.status.last("u1"))["state"]["waiting"]
    assert (waiting["reason"], waiting["message"]) == (
        "PostStartHookError",
        secret,
    )  # the status keeps the details


async def test_pre_stop_failure_event_names_no_output():
    fake = FakeRuntime(hooks={("main", "preStop"): ('Exec lifecycle hook ... message: "token=abc"', 0.0)})
    ctx = fake_context(fake)
    pod = make_pod(grace=5)
    pod["spec"]["containers"][0]["lifecycle"] = {"preStop": {"exec": {"command": ["false"]}}}
    worker = PodWorker(ctx, "u1", lambda: pod)
    await until(worker, lambda: fake.names_called("start"))
    pod["metadata"].update(deletionTimestamp="2026-01-01T00:00:05Z", deletionGracePeriodSeconds=5)
    await until(worker, lambda: worker.phase is Phase.FINISHED)
    recorded = events(ctx, "u1")
    assert ("Warning", "FailedPreStopHook", "PreStopHook failed") in recorded
    assert not any("token=abc" in m for _t, _r, m in recorded)


async def test_on_failure_pod_does_not_rerun_a_succeeded_container_in_a_new_sandbox():
    fake = FakeRuntime()
    ctx = fake_context(fake)
    pod = make_pod(restart="OnFailure", containers=("done", "work"))
    worker = PodWorker(ctx, "u1", lambda: pod)
    await until(worker, lambda: sorted(fake.names_called("start")) == ["done", "work"])
    fake.exit("u1", "done", 0)
    fake.lose_sandbox("u1")  # "work" dies with the sandbox (137)
    await until(
        worker, lambda: len(fake.names_called("run_sandbox")) == 2 and len(fake.names_called("start")) == 3
    )
    assert fake.names_called("start")[2:] == ["work"]
    assert ("Normal", "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.") in events(
        ctx, "u1"
    )


async def test_rejected_pod_fails_with_the_admission_reason_and_never_starts():
    fake = FakeRuntime()
    ctx = fake_context(fake)

    async def refuse(pod: dict[str, Any]) -> tuple[bool, str, str]:
        return (
            False,
            "OutOfcpu",
            "Node didn't have enough resource: cpu, requested: 4000, used: 0, capacity: 2000",
        )

    worker = PodWorker(ctx, "u1", lambda: make_pod(), refuse)
    await until(worker, lambda: worker.phase is Phase.FINISHED)
    final = shown(ctx)
    assert (final["phase"], final["reason"]) == ("Failed", "OutOfcpu")
    assert (
        final["message"]
        == "Pod was rejected: Node didn't have enough resource: cpu, requested: 4000, used: 0, capacity: 2000"
    )
    assert fake.calls == []
    # As upstream's rejectPod: that status and nothing more (no worker ever looked at containers).
    assert "containerStatuses" not in final and not final.get("conditions")
    assert (
        "Warning",
        "OutOfcpu",
        "Node didn't have enough resource: cpu, requested: 4000, used: 0, capacity: 2000",
    ) in events(ctx, "u1")


@pytest.mark.parametrize("code", [0, 1])
async def test_active_deadline_fails_the_pod(code):
    fake = FakeRuntime(stop_exit_code=code)
    ctx = fake_context(fake)
    pod = make_pod(activeDeadlineSeconds=1)
    pod["status"] = {"startTime": "2020-01-01T00:00:00Z"}
    worker = PodWorker(ctx, "u1", lambda: pod)
    await until(worker, lambda: worker.phase is Phase.FINISHED)
    final = shown(ctx)
    assert (final["phase"], final["reason"]) == ("Failed", "DeadlineExceeded")
    assert (
        "Normal",
        "DeadlineExceeded",
        "Pod was active on the node longer than the specified deadline",
    ) in events(ctx, "u1")


async def test_liveness_failure_under_never_kills_the_whole_pod_with_the_plain_stop_text():
    """upstream's computePodActions: a container failing liveness under Never leaves nothing to run, so
    the pod is killed (KillPod), and that kill's event names no cause: `Stopping container main`."""
    from agent.pods.actions import FAILURE, compute_pod_actions
    from agent.pods.executor import apply_actions
    from tests.agent.test_pod_actions import Verdicts

    fake = FakeRuntime()
    ctx = fake_context(fake)
    pod = make_pod(restart="Never")
    worker = PodWorker(ctx, "u1", lambda: pod)
    await until(worker, started(fake, 1))
    rt = await fake.pod_state("u1")
    record = rt.latest("main")
    assert record is not None
    actions = compute_pod_actions(pod, rt, Verdicts(liveness={record.id: FAILURE}))
    assert actions.kill_pod
    await apply_actions(fake, ctx.recorder, ctx.crash_backoff, {}, pod, rt, actions)
    killing = [m for _t, r, m in events(ctx, "u1") if r == "Killing"]
    assert killing == ["Stopping container main"]


async def test_an_ephemeral_container_starts_once_and_is_never_restarted():
    fake = FakeRuntime()
    ctx = fake_context(fake)
    pod = make_pod()
    worker = PodWorker(ctx, "u1", lambda: pod)
    await until(worker, started(fake, 1))
    pod["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox", "command": ["true"]}]
    await until(worker, lambda: fake.names_called("start") == ["main", "debugger"])
    await until(
        worker,
        lambda: "running" in ((shown(ctx).get("ephemeralContainerStatuses") or [{}])[0].get("state") or {}),
    )
    [eph] = shown(ctx)["ephemeralContainerStatuses"]
    assert eph["name"] == "debugger"
    assert [cs["name"] for cs in shown(ctx)["containerStatuses"]] == ["main"]
    fake.exit("u1", "debugger", code=1)
    await until(worker, lambda: "terminated" in shown(ctx)["ephemeralContainerStatuses"][0]["state"])
    for _ in range(3):
        await worker.step()
    assert fake.names_called("start") == ["main", "debugger"]  # under Always too: never again
    [eph] = shown(ctx)["ephemeralContainerStatuses"]
    assert eph["state"]["terminated"]["exitCode"] == 1 and shown(ctx)["phase"] == "Running"


async def test_an_empty_dir_over_its_size_limit_evicts_the_pod_with_upstreams_message():
    fake = FakeRuntime()
    ctx = fake_context(fake)
    pod = make_pod(grace=30, volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}])
    worker = PodWorker(ctx, "u1", lambda: pod)
    await until(worker, started(fake, 1))
    _, delay = await worker.step()
    assert delay <= 10.0  # measured as often as upstream's eviction manager looks
    message = 'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". '
    fake.storage_over_limit = message
    await until(worker, lambda: worker.phase is Phase.FINISHED)
    final = shown(ctx)
    assert (final["phase"], final["reason"], final["message"]) == ("Failed", "Evicted", message)
    assert ("Warning", "Evicted", message) in events(ctx, "u1")
    assert ("stop", "main", 2) in fake.calls  # no grace beyond the minimum


async def test_a_finished_pod_releases_its_volume_mounts_before_its_final_status():
    fake = FakeRuntime()
    ctx = fake_context(fake)
    pod = make_pod(restart="Never")
    worker = PodWorker(ctx, "u1", lambda: pod)
    await until(worker, started(fake, 1))
    fake.exit("u1", "main", code=0)
    await until(worker, lambda: worker.phase is Phase.FINISHED)
    assert ("release_volumes", "u1") in fake.calls
    assert shown(ctx)["phase"] == "Succeeded"
