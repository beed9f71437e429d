"""The CronJob controller's schedule arithmetic: next times in a time zone, the most recent due time and
the missed count (upstream's approximation), startingDeadlineSeconds, the wake-up delay, job names,
the scheduled-timestamp annotation, and which finished Jobs the history limits remove."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controlplane.controllers.cronjob import schedule as cs
from controlplane.controllers.cronjob.controller import history_to_delete, job_from_template

T0 = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC)


def cj(
    schedule: str = "*/5 * * * *", created: datetime = T0, last: datetime | None = None, **spec: object
) -> dict:
    status = {"lastScheduleTime": last.strftime("%Y-%m-%dT%H:%M:%SZ")} if last else {}
    return {
        "metadata": {
            "name": "tick",
            "namespace": "ns",
            "uid": "u1",
            "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "spec": {
            "schedule": schedule,
            **spec,
            "jobTemplate": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"template": {"spec": {"containers": []}}},
            },
        },
        "status": status,
    }


def test_next_in_a_time_zone() -> None:
    tokyo = cs.Schedule.parse("0 9 * * *", "Asia/Tokyo")
    assert tokyo.next(T0) == datetime(2026, 12, 2, 0, 0, tzinfo=UTC)
    utc = cs.Schedule.parse("0 9 * * *", None)
    assert utc.next(T0) == datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    assert cs.Schedule.parse("@hourly", None).next(T0) == datetime(2026, 12, 1, 13, 0, tzinfo=UTC)
    assert cs.Schedule.parse("@every 90s", None).next(T0) == T0 + timedelta(seconds=90)
    with pytest.raises(cs.ScheduleError):
        cs.Schedule.parse("0 9 * * *", "Mars/Olympus")
    with pytest.raises(cs.ScheduleError):
        cs.Schedule.parse("61 * * * *", None)


def test_most_recent_and_missed() -> None:
    sched = cs.Schedule.parse("*/5 * * * *", None)
    job = cj()
    assert cs.most_recent(job, T0 + timedelta(minutes=2), sched)[1:] == (None, 0)
    assert cs.most_recent(job, T0 + timedelta(minutes=5), sched)[1:] == (
        datetime(2026, 12, 1, 12, 5, tzinfo=UTC),
        1,
    )
    _, recent, missed = cs.most_recent(job, T0 + timedelta(minutes=61), sched)
    assert recent == datetime(2026, 12, 1, 13, 0, tzinfo=UTC) and missed == 12
    # After the last schedule, counting starts there.
    later = cj(last=datetime(2026, 12, 1, 13, 0, tzinfo=UTC))
    assert cs.most_recent(later, datetime(2026, 12, 1, 13, 3, tzinfo=UTC), sched)[1] is None
    # Days of missed minutes: far more than 100.
    minutely = cs.Schedule.parse("* * * * *", None)
    assert cs.most_recent(cj("* * * * *"), T0 + timedelta(days=1), minutely)[2] > cs.TOO_MANY_MISSED


def test_starting_deadline_limits_how_far_back_it_looks() -> None:
    sched = cs.Schedule.parse("*/5 * * * *", None)
    job = cj(startingDeadlineSeconds=60)
    # 12:05 is 3 minutes gone, past the deadline: not due any more.
    assert cs.most_recent(job, datetime(2026, 12, 1, 12, 8, tzinfo=UTC), sched)[1] is None
    assert cs.most_recent(job, datetime(2026, 12, 1, 12, 5, 30, tzinfo=UTC), sched)[1] == datetime(
        2026, 12, 1, 12, 5, tzinfo=UTC
    )


def test_next_delay() -> None:
    sched = cs.Schedule.parse("*/5 * * * *", None)
    assert cs.next_delay(cj(), T0, sched) == pytest.approx(270.1)
    assert cs.next_delay(
        cj(last=datetime(2026, 12, 1, 12, 5, tzinfo=UTC)), datetime(2026, 12, 1, 12, 6, tzinfo=UTC), sched
    ) == pytest.approx(240.1)


def test_job_for_a_scheduled_time() -> None:
    when = datetime(2026, 12, 2, 0, 0, tzinfo=UTC)
    tokyo = cs.Schedule.parse("0 9 * * *", "Asia/Tokyo")
    job = job_from_template({**cj(), "apiVersion": "batch/v1", "kind": "CronJob"}, when, tokyo)
    assert job["metadata"]["name"] == f"tick-{int(when.timestamp()) // 60}"
    assert job["metadata"]["annotations"] == {cs.SCHEDULED_TIMESTAMP: "2026-12-02T09:00:00+09:00"}
    assert job["metadata"]["labels"] == {"a": "b"}
    ref = job["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == ("CronJob", "tick", "u1", True)
    assert cs.scheduled_stamp(when, cs.Schedule.parse("0 0 * * *", None)) == "2026-12-02T00:00:00Z"
    assert cs.rfc1123z(when) == "Wed, 02 Dec 2026 00:00:00 +0000"


def test_history_limits_remove_the_oldest() -> None:
    def finished(name: str, started: str) -> dict:
        return {"metadata": {"name": name}, "status": {"startTime": started}}

    jobs = [
        finished("c", "2026-01-03T00:00:00Z"),
        finished("a", "2026-01-01T00:00:00Z"),
        finished("b", "2026-01-02T00:00:00Z"),
    ]
    assert [j["metadata"]["name"] for j in history_to_delete(jobs, 1)] == ["a", "b"]
    assert history_to_delete(jobs, 3) == [] and history_to_delete(jobs, None) == []
    assert len(history_to_delete(jobs, 0)) == 3
