"""controlplane/apiserver/loopstall.py: the debug watch names a long stretch of the loop, tells the loop's
own CPU from the time it waited, records GC passes and windows, and leaves nothing behind when stopped
or when it was never asked for."""

from __future__ import annotations

import asyncio
import gc
import json
import time
from asyncio import events
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controlplane.apiserver import loopstall


def spin(seconds: float) -> None:
    """A stretch of the loop's own CPU (not a sleep: the thread's CPU clock has to move)."""
    clock = time.thread_time()
    while time.thread_time() - clock < seconds:
        pass


def sleeping_stretch(seconds: float) -> None:
    """A stretch in which the loop's thread holds the loop but uses no CPU (as when not scheduled)."""
    time.sleep(seconds)


async def next_record(
    records: list[dict[str, Any]],
    kind: str,
    start: int = 0,
    where: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """The first record of `kind` (and `where`) after index `start`, once the watch has written it (on a
    loaded machine other late beats may come first)."""
    async with asyncio.timeout(5):
        while True:
            for record in records[start:]:
                if record["kind"] == kind and (where is None or where(record)):
                    return record
            await asyncio.sleep(0.01)


def ran(name: str) -> Callable[[dict[str, Any]], bool]:
    """A stall whose timed callbacks include `name`."""
    return lambda stall: any(name in what for _, what in stall.get("longest", []))


async def first_beat(watch: loopstall.LoopStallWatch) -> None:
    """Wait until the started watch's heartbeat has run once (lags are measured from a beat)."""
    started = watch._last_beat
    async with asyncio.timeout(5):
        while watch._last_beat == started:
            await asyncio.sleep(0.001)


async def stall_of(stretch: Callable[[], Any], name: str) -> dict[str, Any]:
    """The stall record of `stretch` (a callback the loop runs, or a coroutine it awaits), named `name`."""
    records: list[dict[str, Any]] = []
    watch = loopstall.LoopStallWatch(0.03, records.append, window=60)
    watch.start()
    try:
        await first_beat(watch)
        if asyncio.iscoroutinefunction(stretch):
            await asyncio.create_task(stretch())
        else:
            asyncio.get_running_loop().call_soon(stretch)
        return await next_record(records, "stall", where=ran(name))
    finally:
        watch.stop()


async def test_a_long_callback_is_a_stall_named_with_its_function_and_its_cpu() -> None:
    stall = await stall_of(lambda: spin(0.12), "<lambda>")
    assert stall["lag_ms"] >= 100
    assert stall["main_cpu_ms"] >= 100  # the loop's own work, not a wait for a CPU
    # asyncio's loop (pytest-asyncio's): every callback is timed, the longest named
    assert stall["longest"][0][0] >= 100
    assert "test_a_long_callback" in stall["longest"][0][1]
    # the watchdog's samples show the code the stretch ran
    assert any(frame.split(":")[1] == "spin" for stack in stall["stacks"] for frame in stack)


async def test_a_stretch_without_cpu_is_told_from_a_busy_one() -> None:
    stall = await stall_of(lambda: sleeping_stretch(0.12), "<lambda>")
    assert stall["lag_ms"] >= 100
    assert stall["main_cpu_ms"] < 30


async def test_a_task_step_is_named_by_its_coroutine() -> None:
    async def busy_task() -> None:
        spin(0.08)

    stall = await stall_of(busy_task, "busy_task")
    assert "task " in stall["longest"][0][1]
    assert "busy_task" in stall["longest"][0][1]


async def test_windows_and_gc_passes_are_recorded() -> None:
    records: list[dict[str, Any]] = []
    watch = loopstall.LoopStallWatch(0.0, records.append, window=0.1)
    watch.start()
    try:
        await first_beat(watch)
        gc.collect(0)
        gc_record = await next_record(records, "gc")
        window = await next_record(records, "window")
    finally:
        watch.stop()
    assert gc_record["generation"] == 0
    assert gc_record["cpu_ms"] >= 0
    assert window["beats"] > 0
    assert window["lag_p50_ms"] <= window["lag_p99_ms"] <= window["lag_max_ms"]
    assert window["gc_count"].get("0", 0) >= 1
    assert 0 <= window["gc_cpu_ms"]["0"] <= window["gc_ms"]["0"] + 1
    assert 0 <= window["main_cpu_share"] <= window["process_cpu_share"] + 0.05


async def test_stop_puts_everything_back() -> None:
    original = events.Handle._run
    callbacks = list(gc.callbacks)
    watch = loopstall.LoopStallWatch(0.03, lambda record: None)
    watch.start()
    assert events.Handle._run is not original
    watch.stop()
    assert events.Handle._run is original
    assert gc.callbacks == callbacks
    assert watch._thread is not None and not watch._thread.is_alive()


def test_nothing_runs_unless_asked(tmp_path: Path) -> None:
    assert loopstall.from_environment({}) is None
    assert loopstall.from_environment({loopstall.ENV_THRESHOLD: "0"}) is None
    assert loopstall.from_environment({loopstall.ENV_THRESHOLD: "fast"}) is None
    path = tmp_path / "stalls.jsonl"
    watch = loopstall.from_environment(
        {loopstall.ENV_THRESHOLD: "50", loopstall.ENV_FILE: str(path), loopstall.ENV_WINDOW: "3"}
    )
    assert watch is not None
    assert (watch.threshold, watch.window) == (0.05, 3.0)
    watch._sink({"kind": "window", "n": 1})
    assert json.loads(path.read_text()) == {"kind": "window", "n": 1}


def test_describe_names_a_plain_function_and_a_method() -> None:
    assert loopstall.describe(spin) == f"{__name__}.spin"
    assert (
        loopstall.describe(loopstall.LoopStallWatch.stop)
        == "controlplane.apiserver.loopstall.LoopStallWatch.stop"
    )


async def test_the_probe_is_recorded_and_its_failure_too() -> None:
    records: list[dict[str, Any]] = []
    answers: list[dict[str, Any]] = [{"catch_up_ms": 3.0}]

    async def probe() -> dict[str, Any]:
        if not answers:
            raise ConnectionError("etcd away")  # recorded, not raised
        return answers.pop()

    watch = loopstall.LoopStallWatch(0.05, records.append, window=60)
    watch.probe, watch.probe_period = probe, 0.01
    watch.start()
    try:
        first = await next_record(records, "probe")
        second = await next_record(records, "probe", records.index(first) + 1)
    finally:
        watch.stop()
    assert first["catch_up_ms"] == 3.0
    assert second["error"] == "ConnectionError: etcd away"
