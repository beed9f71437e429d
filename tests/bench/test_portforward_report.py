"""The port-forward benchmark's scheduler figures: each process's time on a CPU and time waiting for one,
summed over its threads from /proc (this test process's own threads: a busy thread born between two
samples counts from zero, so its whole run shows), and the table of them per path."""

from __future__ import annotations

import os
import threading
import time

from bench.streaming.portforward import (
    PROCESSES,
    per_mib,
    scheduled_delta,
    scheduled_seconds,
    scheduled_table,
)


def test_a_thread_born_between_two_samples_counts_its_whole_run() -> None:
    before = scheduled_seconds(os.getpid())
    assert before and all(run >= 0 and wait >= 0 for run, wait in before.values())
    spun, release = threading.Event(), threading.Event()

    def spin() -> None:
        end = time.thread_time() + 0.2
        while time.thread_time() < end:
            pass
        spun.set()
        release.wait(10)

    worker = threading.Thread(target=spin)
    worker.start()
    try:
        assert spun.wait(30)
        after = scheduled_seconds(os.getpid())  # the worker alive, its 0.2 s of CPU spent
    finally:
        release.set()
        worker.join()
    assert worker.native_id not in before and worker.native_id in after
    run, wait = scheduled_delta(before, after)
    assert after[worker.native_id][0] >= 0.2 and run >= 0.2 and wait >= 0


def test_a_gone_process_has_no_threads() -> None:
    assert scheduled_seconds(2**22 + 1) == {}  # above pid_max's ceiling: never a live process


def test_rounds_become_medians_per_mib_and_an_unmeasured_wait_stays_unmeasured() -> None:
    assert per_mib([(0.1, 0.2), (0.3, 0.4), (0.2, 0.6)], 100) == {"run": 2.0, "wait": 4.0}
    assert per_mib([(0.1, None), (0.3, None)], 100) == {"run": 2.0, "wait": None}


def test_the_table_sums_every_process_of_a_path() -> None:
    procs: dict[str, dict[str, float | None]] = {n: {"run": 1.0, "wait": 0.5} for n in PROCESSES}
    procs["httpd"] = {"run": 1.0, "wait": None}
    table = scheduled_table({"kubectl": procs})
    row = next(line for line in table.splitlines() if line.startswith("| kubectl"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1 : 1 + len(PROCESSES)] == ["1.0 / -"] + ["1.0 / 0.5"] * (len(PROCESSES) - 1)
    assert cells[-2:] == [str(float(len(PROCESSES))), str((len(PROCESSES) - 1) * 0.5)]
