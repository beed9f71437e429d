"""Where the server's event loop stalls: a debug-only watch, off unless PYKUBELET_LOOP_STALL_MS is set.

A single-object GET costs well under a millisecond of CPU, so a p99 of a second means the request waited:
behind one long synchronous stretch of the loop (a big list's encoding, a feed batch, a GC pass), or for
a CPU the process was not given. Which of the two decides the fix, and the latency histograms cannot
tell them apart. This watch can:

- a heartbeat on the loop every `period` measures the loop's lag (how late it wakes);
- a watchdog thread samples the main thread's Python stack while the heartbeat is overdue, which names
  the code of the stretch on any loop (uvloop's handles cannot be timed from Python);
- the main thread's own CPU time over each late beat says whether the loop was busy (CPU close to the
  gap: one long stretch) or not scheduled (CPU far below it: the machine's other load);
- on asyncio's own loop (PYKUBELET_EVENT_LOOP=asyncio) every callback is timed too, so a stall names its
  callbacks (a task's coroutine, a handle's function) with their durations;
- gc.callbacks time every collection by generation (the server freezes its startup heap: a gen2 pass
  still walks every object made since);
- a probe the server gives (`probe`, every second) times what a consistent read waits for besides the
  loop: etcd's current revision, then the watch cache catching up to it.

Records are JSON lines, to PYKUBELET_LOOP_STALL_FILE when set (else this module's logger at WARNING):
`stall` for each beat later than the threshold (lag, main-thread CPU, stacks, callbacks), `gc` for each
collection longer than the threshold, `probe` for each probe, and `window` every PYKUBELET_LOOP_STALL_WINDOW seconds (10): lag
p50/p99/max over the window, the process's and the main thread's CPU share, GC passes, wall and CPU time by
generation. `bench/apiserver/loopstall_report.py` turns a file of them into tables.

Cost when off: none (nothing is started, nothing patched). When on: a heartbeat every 10 ms, a thread
waking every threshold/2, and on asyncio's loop a clock read around every callback.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import sys
import threading
import time
from asyncio import events
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("controlplane.apiserver.loopstall")

ENV_THRESHOLD = "PYKUBELET_LOOP_STALL_MS"
ENV_FILE = "PYKUBELET_LOOP_STALL_FILE"
ENV_WINDOW = "PYKUBELET_LOOP_STALL_WINDOW"
STACK_DEPTH = 40  # innermost frames kept per sample
SAMPLES_PER_STALL = 6
PROJECT_ROOT = __file__.rsplit("controlplane/apiserver/", 1)[0]
CALLBACKS_PER_STALL = 5  # the longest callbacks of a stall that are named in its record


def describe(callback: Any) -> str:
    """What a loop callback runs: a task's coroutine (and where it now waits), else the function."""
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        name = getattr(coro, "__qualname__", type(coro).__name__)
        frame = getattr(coro, "cr_frame", None)
        where = f" @{frame.f_code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno}" if frame else ""
        return f"task {name}{where}"
    func = getattr(callback, "__func__", callback)
    module = getattr(func, "__module__", "") or ""
    return f"{module}.{getattr(func, '__qualname__', type(callback).__name__)}"


def short_path(filename: str) -> str:
    """A module's path from its package root: `controlplane/storage/cache.py`, `aiohttp/web_protocol.py`,
    `asyncio/events.py`."""
    for marker in ("/site-packages/", f"/python{sys.version_info[0]}.{sys.version_info[1]}/"):
        if marker in filename:
            return filename.rsplit(marker, 1)[1]
    return filename.removeprefix(PROJECT_ROOT)


def stack_of(frame: Any) -> list[str]:
    """A thread's current Python stack, innermost last, as `path:function:line`."""
    frames: list[str] = []
    while frame is not None and len(frames) < STACK_DEPTH:
        code = frame.f_code
        frames.append(f"{short_path(code.co_filename)}:{code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    frames.reverse()
    return frames


def quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


class LoopStallWatch:
    """The watch on the running loop of the thread that calls `start` (see the module docstring)."""

    def __init__(
        self,
        threshold: float,
        sink: Callable[[dict[str, Any]], None],
        period: float = 0.01,
        window: float = 10.0,
    ) -> None:
        self.probe: Callable[[], Awaitable[dict[str, Any]]] | None = None  # set by the server
        self.probe_period = 1.0
        self._probe_task: asyncio.Task[None] | None = None
        self.threshold = threshold
        self.period = period
        self.window = window
        self._sink = sink
        self._loop: asyncio.AbstractEventLoop | None = None
        self._beat_handle: asyncio.TimerHandle | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._main_ident = threading.get_ident()
        self._main_clock = time.pthread_getcpuclockid(self._main_ident)
        # The current beat: when it was due, the main thread's CPU then, stacks sampled while overdue.
        self._due = 0.0
        self._last_beat = time.monotonic()
        self._beat_cpu = 0.0
        self._samples: list[list[str]] = []
        self._lock = threading.Lock()
        # The window's figures.
        self._lags: list[float] = []
        self._window_start = time.monotonic()
        self._window_cpu = (time.process_time(), 0.0)
        self._gc_started = 0.0
        self._gc_cpu = 0.0
        self._gc_time: Counter[int] = Counter()
        self._gc_count: Counter[int] = Counter()
        self._gc_cpu_time: Counter[int] = Counter()
        # asyncio's own loop: the callbacks run since the last beat (count, total, the longest).
        self._patched: Any = None
        self._callbacks = 0
        self._callback_time = 0.0
        self._longest: list[tuple[float, str]] = []

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._main_ident = threading.get_ident()
        self._main_clock = time.pthread_getcpuclockid(self._main_ident)
        self._window_cpu = (time.process_time(), self._thread_cpu())
        self._beat_cpu = self._thread_cpu()
        self._due = self._loop.time()
        self._last_beat = time.monotonic()
        self._schedule()
        gc.callbacks.append(self._on_gc)
        if isinstance(self._loop, asyncio.BaseEventLoop) and type(self._loop).__module__.startswith(
            "asyncio"
        ):
            self._patch_handles()
        self._thread = threading.Thread(target=self._watchdog, name="loop-stall-watchdog", daemon=True)
        self._thread.start()
        if self.probe is not None:
            self._probe_task = asyncio.create_task(self._probe_loop(self.probe), name="loop-stall-probe")
        log.info(
            "event=loop-stall-watch threshold_ms=%d timed_callbacks=%s",
            self.threshold * 1000,
            bool(self._patched),
        )

    def stop(self) -> None:
        self._stop.set()
        if self._probe_task is not None:
            self._probe_task.cancel()
        if self._beat_handle is not None:
            self._beat_handle.cancel()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._patched is not None:
            events.Handle._run = self._patched  # type: ignore[method-assign]
            self._patched = None
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    async def _probe_loop(self, probe: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        while True:
            await asyncio.sleep(self.probe_period)
            try:
                found = await probe()
            except Exception as err:  # a diagnosis never takes the server down
                found = {"error": f"{type(err).__name__}: {err}"}
            self._sink({"kind": "probe", "at": round(time.time(), 3), **found})

    # --- the heartbeat (on the loop) -----------------------------------------------------------------

    def _schedule(self) -> None:
        assert self._loop is not None
        self._due = self._loop.time() + self.period
        self._beat_handle = self._loop.call_at(self._due, self._beat)

    def _thread_cpu(self) -> float:
        return time.clock_gettime(self._main_clock)

    def _beat(self) -> None:
        assert self._loop is not None
        lag = max(0.0, self._loop.time() - self._due)
        cpu = self._thread_cpu()
        self._lags.append(lag)
        if lag > self.threshold:
            with self._lock:
                samples, self._samples = self._samples, []
            record: dict[str, Any] = {
                "kind": "stall",
                "at": round(time.time(), 3),
                "lag_ms": round(lag * 1000, 1),
                # CPU the loop's thread used from the beat before to this one (a period plus the lag)
                "main_cpu_ms": round((cpu - self._beat_cpu) * 1000, 1),
                "gap_ms": round((time.monotonic() - self._last_beat) * 1000, 1),
                "stacks": samples,
            }
            if self._patched is not None:
                record["callbacks"] = self._callbacks
                record["callbacks_ms"] = round(self._callback_time * 1000, 1)
                record["longest"] = [[round(d * 1000, 1), what] for d, what in self._longest]
            self._sink(record)
        else:
            with self._lock:
                self._samples = []
        self._callbacks, self._callback_time, self._longest = 0, 0.0, []
        self._beat_cpu = cpu
        self._last_beat = time.monotonic()
        if self._last_beat - self._window_start >= self.window:
            self._close_window()
        if not self._stop.is_set():
            self._schedule()

    def _close_window(self) -> None:
        now = time.monotonic()
        elapsed = now - self._window_start
        process_cpu, main_cpu = time.process_time(), self._thread_cpu()
        ordered = sorted(self._lags)
        self._sink(
            {
                "kind": "window",
                "at": round(time.time(), 3),
                "seconds": round(elapsed, 2),
                "beats": len(ordered),
                "lag_p50_ms": round(quantile(ordered, 0.5) * 1000, 1),
                "lag_p99_ms": round(quantile(ordered, 0.99) * 1000, 1),
                "lag_max_ms": round((ordered[-1] if ordered else 0.0) * 1000, 1),
                "process_cpu_share": round((process_cpu - self._window_cpu[0]) / elapsed, 3),
                "main_cpu_share": round((main_cpu - self._window_cpu[1]) / elapsed, 3),
                "gc_count": {str(g): n for g, n in sorted(self._gc_count.items())},
                "gc_ms": {str(g): round(t * 1000, 1) for g, t in sorted(self._gc_time.items())},
                "gc_cpu_ms": {str(g): round(t * 1000, 1) for g, t in sorted(self._gc_cpu_time.items())},
            }
        )
        self._lags = []
        self._window_start = now
        self._window_cpu = (process_cpu, main_cpu)
        self._gc_count.clear()
        self._gc_time.clear()
        self._gc_cpu_time.clear()

    # --- the watchdog (its own thread) ---------------------------------------------------------------

    def _watchdog(self) -> None:
        step = max(self.threshold / 2, 0.005)
        while not self._stop.wait(step):
            overdue = time.monotonic() - self._last_beat - self.period
            if overdue < self.threshold / 2:
                continue
            frame = sys._current_frames().get(self._main_ident)
            if frame is None:
                continue
            stack = stack_of(frame)
            del frame
            with self._lock:
                if len(self._samples) < SAMPLES_PER_STALL:
                    self._samples.append(stack)

    # --- GC ------------------------------------------------------------------------------------------

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        on_loop = threading.get_ident() == self._main_ident
        if phase == "start":
            self._gc_started = time.perf_counter()
            self._gc_cpu = self._thread_cpu() if on_loop else 0.0
            return
        took = time.perf_counter() - self._gc_started
        generation = info.get("generation", -1)
        self._gc_count[generation] += 1
        self._gc_time[generation] += took
        if on_loop:
            self._gc_cpu_time[generation] += self._thread_cpu() - self._gc_cpu
        if took > self.threshold and on_loop:
            self._sink(
                {
                    "kind": "gc",
                    "at": round(time.time(), 3),
                    "generation": generation,
                    "ms": round(took * 1000, 1),
                    "cpu_ms": round((self._thread_cpu() - self._gc_cpu) * 1000, 1),
                    "collected": info.get("collected", 0),
                }
            )

    # --- asyncio's own loop: every callback timed ----------------------------------------------------

    def _patch_handles(self) -> None:
        original = events.Handle._run
        watch = self

        def timed_run(handle: events.Handle) -> None:
            started = time.perf_counter()
            try:
                original(handle)
            finally:
                took = time.perf_counter() - started
                watch._callbacks += 1
                watch._callback_time += took
                if took > 0.001 and threading.get_ident() == watch._main_ident:
                    longest = watch._longest
                    if len(longest) < CALLBACKS_PER_STALL or took > longest[-1][0]:
                        longest.append((took, describe(handle._callback)))
                        longest.sort(key=lambda entry: -entry[0])
                        del longest[CALLBACKS_PER_STALL:]

        self._patched = original
        events.Handle._run = timed_run  # type: ignore[method-assign]


def file_sink(path: str) -> Callable[[dict[str, Any]], None]:
    """Append each record as a JSON line (opened per record: records are rare, and a killed server
    keeps every one it wrote)."""

    def write(record: dict[str, Any]) -> None:
        with open(path, "a") as stream:
            stream.write(json.dumps(record) + "\n")

    return write


def log_sink(record: dict[str, Any]) -> None:
    log.warning("event=loop-%s %s", record["kind"], json.dumps(record))


def from_environment(environ: dict[str, str] | None = None) -> LoopStallWatch | None:
    """The watch PYKUBELET_LOOP_STALL_MS asks for (None: not asked, or not a positive number)."""
    env = os.environ if environ is None else environ
    text = env.get(ENV_THRESHOLD, "")
    if not text:
        return None
    try:
        threshold_ms = float(text)
    except ValueError:
        log.warning("event=loop-stall-watch-off reason=%r", f"{ENV_THRESHOLD}={text!r} is not a number")
        return None
    if threshold_ms <= 0:
        return None
    path = env.get(ENV_FILE, "")
    window = float(env.get(ENV_WINDOW, "") or 10.0)
    return LoopStallWatch(threshold_ms / 1000, file_sink(path) if path else log_sink, window=window)
