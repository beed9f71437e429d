"""The CronJob controller against the real API server, on a clock the test moves (no waiting for
minutes): Jobs named by their scheduled minute with the scheduled-timestamp annotation, status active /
lastScheduleTime / lastSuccessfulTime, history limits, Forbid and Replace, suspend, time zones, the
too-many-missed warning and startingDeadlineSeconds. The test plays the Job controller by writing the
Jobs' status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from kubernetes import client

from controlplane.controllers.cronjob import schedule as cs
from tests.controllers.conftest import eventually, running


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def to_next_minute(self, minutes: int = 1, extra: float = 5) -> datetime:
        """Move to `extra` seconds past the minute `minutes` minutes ahead; the minute itself is returned."""
        base = self.now.replace(second=0, microsecond=0) + timedelta(minutes=minutes)
        self.now = base + timedelta(seconds=extra)
        return base


@pytest.fixture(scope="module")
def batch(api: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api)


def cronjob(name: str, schedule: str = "* * * * *", **spec: object) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": schedule,
            **spec,
            "jobTemplate": {
                "metadata": {"labels": {"from": name}},
                "spec": {
                    "template": {
                        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
                    }
                },
            },
        },
    }


def jobs_of(batch: client.BatchV1Api, ns: str, name: str) -> list[client.V1Job]:
    return sorted(
        (
            j
            for j in batch.list_namespaced_job(ns, label_selector=f"from={name}").items
            if not j.metadata.deletion_timestamp
        ),
        key=lambda j: j.metadata.name,
    )


def finish(batch: client.BatchV1Api, ns: str, job: client.V1Job, kind: str = "Complete") -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"startTime": now, "conditions": [{"type": kind, "status": "True", "lastTransitionTime": now}]}
    if kind == "Complete":
        status["completionTime"] = now
    batch.patch_namespaced_job_status(job.metadata.name, ns, {"status": status})


def reasons(v1: client.CoreV1Api, ns: str, name: str) -> list[tuple[str, str]]:
    return [
        (e.reason, e.message) for e in v1.list_namespaced_event(ns).items if e.involved_object.name == name
    ]


def poke(manager, ns: str, name: str) -> None:
    """Wake the controller after moving the clock (its own timer waits in real time)."""
    controller = next(c for c in manager.controllers if c.name == "cronjob")
    controller.queue.add(f"{ns}/{name}")


async def started(manager) -> None:
    """Until the manager has built its controllers (it does once its informers listed)."""
    await eventually(
        lambda: any(c.name == "cronjob" for c in manager.controllers), what="the cronjob controller"
    )


async def test_jobs_status_and_history(apiserver, v1, batch, namespace):
    clock = Clock()
    async with running(apiserver, "cronjob", cronjob_clock=clock) as manager:
        await started(manager)
        cj = batch.create_namespaced_cron_job(namespace, cronjob("tick", successfulJobsHistoryLimit=2))
        made = []
        for _ in range(4):
            minute = clock.to_next_minute()
            poke(manager, namespace, "tick")
            name = f"tick-{int(minute.timestamp()) // 60}"
            job = await eventually(
                lambda n=name: next(
                    (j for j in jobs_of(batch, namespace, "tick") if j.metadata.name == n), None
                ),
                what=name,
            )
            made.append(job)
            assert job.metadata.annotations[cs.SCHEDULED_TIMESTAMP] == minute.strftime("%Y-%m-%dT%H:%M:%SZ")
            assert job.metadata.owner_references[0].uid == cj.metadata.uid
            assert job.spec.template.metadata.labels["batch.kubernetes.io/job-name"] == name
            status = (
                await eventually(
                    lambda n=name: (
                        (c := batch.read_namespaced_cron_job_status("tick", namespace))
                        and c.status
                        and any(a.name == n for a in c.status.active or [])
                        and c
                    )
                )
            ).status
            assert status.last_schedule_time == minute
            finish(batch, namespace, job)
        # The last one finished: off the active list, lastSuccessfulTime set, two kept of four.
        done = await eventually(
            lambda: (
                (c := batch.read_namespaced_cron_job_status("tick", namespace))
                and not c.status.active
                and c.status.last_successful_time
                and c
            )
        )
        assert done.status.last_successful_time is not None
        kept = await eventually(
            lambda: (j := jobs_of(batch, namespace, "tick")) and len(j) == 2 and j, what="history limit 2"
        )
        assert [j.metadata.name for j in kept] == [j.metadata.name for j in made[2:]]
        said = reasons(v1, namespace, "tick")
        assert ("SuccessfulCreate", f"Created job {made[0].metadata.name}") in said
        assert ("SawCompletedJob", f"Saw completed job: {made[3].metadata.name}, condition: Complete") in said
        assert ("SuccessfulDelete", f"Deleted job {made[0].metadata.name}") in said
        assert not [m for r, m in said if r == "UnexpectedJob"]  # its own Jobs, however fast they are seen


async def test_forbid_and_replace(apiserver, v1, batch, namespace):
    clock = Clock()
    async with running(apiserver, "cronjob", cronjob_clock=clock) as manager:
        await started(manager)
        batch.create_namespaced_cron_job(namespace, cronjob("solo", concurrencyPolicy="Forbid"))
        batch.create_namespaced_cron_job(namespace, cronjob("swap", concurrencyPolicy="Replace"))
        clock.to_next_minute()
        poke(manager, namespace, "solo")
        poke(manager, namespace, "swap")
        first_solo = (await eventually(lambda: jobs_of(batch, namespace, "solo")))[0]
        first_swap = (await eventually(lambda: jobs_of(batch, namespace, "swap")))[0]
        await eventually(
            lambda: (c := batch.read_namespaced_cron_job_status("swap", namespace)).status and c.status.active
        )
        clock.to_next_minute()
        poke(manager, namespace, "solo")
        poke(manager, namespace, "swap")
        await eventually(
            lambda: (
                (
                    "JobAlreadyActive",
                    "Not starting job because prior execution is running and concurrency policy is Forbid",
                )
                in reasons(v1, namespace, "solo")
            )
        )
        assert [j.metadata.name for j in jobs_of(batch, namespace, "solo")] == [first_solo.metadata.name]
        replaced = await eventually(
            lambda: (
                (j := jobs_of(batch, namespace, "swap"))
                and first_swap.metadata.name not in {x.metadata.name for x in j}
                and j
            )
        )
        assert len(replaced) == 1
        status = batch.read_namespaced_cron_job_status("swap", namespace).status
        assert [a.name for a in status.active] == [replaced[0].metadata.name]
        assert ("SuccessfulDelete", f"Deleted job {first_swap.metadata.name}") in reasons(
            v1, namespace, "swap"
        )


async def test_suspend_time_zone_and_missed_times(apiserver, v1, batch, namespace):
    clock = Clock()
    async with running(apiserver, "cronjob", cronjob_clock=clock) as manager:
        await started(manager)
        batch.create_namespaced_cron_job(namespace, cronjob("paused", suspend=True))
        batch.create_namespaced_cron_job(namespace, cronjob("late", startingDeadlineSeconds=2))
        batch.create_namespaced_cron_job(namespace, cronjob("tokyo", "0 9 * * *", timeZone="Asia/Tokyo"))
        # A day and a bit later: the minutely ones missed over 1 400 times.
        start = clock.now
        clock.now = (start + timedelta(days=1)).replace(
            hour=0, minute=0, second=20, microsecond=0
        ) + timedelta(days=1)
        for name in ("paused", "late", "tokyo"):
            poke(manager, namespace, name)
        tokyo = (await eventually(lambda: jobs_of(batch, namespace, "tokyo"), what="the Tokyo job"))[0]
        nine = clock.now.replace(second=0)
        assert tokyo.metadata.name == f"tokyo-{int(nine.timestamp()) // 60}"
        assert tokyo.metadata.annotations[cs.SCHEDULED_TIMESTAMP] == nine.astimezone(
            ZoneInfo("Asia/Tokyo")
        ).strftime("%Y-%m-%dT%H:%M:%S+09:00")
        # 20 s past the minute with a 2 s deadline: nothing for "late".
        assert not jobs_of(batch, namespace, "late") and not jobs_of(batch, namespace, "paused")
        # The paused one, resumed, starts the latest missed time only, and says how many it missed.
        batch.patch_namespaced_cron_job("paused", namespace, {"spec": {"suspend": False}})
        resumed = await eventually(lambda: jobs_of(batch, namespace, "paused"))
        assert len(resumed) == 1 and resumed[0].metadata.name == f"paused-{int(nine.timestamp()) // 60}"
        said = await eventually(
            lambda: [m for r, m in reasons(v1, namespace, "paused") if r == "TooManyMissedTimes"]
        )
        assert said[0].startswith("too many missed start times: ")
        assert int(said[0].split(": ")[1].split(".")[0]) > 100
