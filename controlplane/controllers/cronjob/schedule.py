"""When a CronJob fires, without I/O (upstream's cronjob utils.go of the v2 controller): its schedule in
its time zone (croniter for the five-field grammar and the @descriptors, a fixed interval for `@every`),
the most recent time it should have fired and how many it missed, how long until the next one, and the
name and annotation of the Job made for a scheduled time.
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from croniter import croniter

from controlplane.controllers.podutil import parse_time

Obj = dict[str, Any]

TOO_MANY_MISSED = 100
NEXT_SCHEDULE_DELTA = 0.1  # seconds past the next time, so the sync sees it due
SCHEDULED_TIMESTAMP = "batch.kubernetes.io/cronjob-scheduled-timestamp"
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?)(ns|us|µs|ms|s|m|h)")


class ScheduleError(ValueError):
    pass


def _duration(text: str) -> float:
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ScheduleError(f"failed to parse duration {text}")
    return sum(float(n) * _UNITS[u] for n, u in parts)


@dataclass(frozen=True)
class Schedule:
    expr: str
    zone: tzinfo
    every: float | None = None

    @classmethod
    def parse(cls, schedule: str, time_zone: str | None) -> Schedule:
        """ScheduleError for a schedule or zone this cannot run (the UnparseableSchedule and
        UnknownTimeZone events)."""
        try:
            zone: tzinfo = zoneinfo.ZoneInfo(time_zone) if time_zone else UTC
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as err:
            raise ScheduleError(f"unknown time zone {time_zone}: {err}") from None
        expr = schedule.strip()
        if expr.startswith("@every "):
            every = _duration(expr[len("@every ") :].strip())
            if every < 1:
                every = 1.0  # robfig's ConstantDelaySchedule never fires more often than each second
            return cls(expr, zone, every)
        if not croniter.is_valid(expr):
            raise ScheduleError(f"unparseable schedule: {schedule!r}")
        return cls(expr, zone)

    def next(self, after: datetime) -> datetime:
        """The first time strictly after `after` (UTC)."""
        if self.every is not None:
            # robfig: the delay from `after`, rounded down to the second.
            step = after.replace(microsecond=0) + timedelta(seconds=self.every)
            return step.astimezone(UTC)
        local = after.astimezone(self.zone)
        return croniter(self.expr, local).get_next(datetime).astimezone(UTC)

    def previous(self, at_or_before: datetime) -> datetime:
        """The last time at or before `at_or_before` (UTC); for cron expressions only."""
        local = (at_or_before + timedelta(seconds=1)).astimezone(self.zone).replace(microsecond=0)
        return croniter(self.expr, local).get_prev(datetime).astimezone(UTC)


def earliest(cj: Obj, now: datetime, deadline: bool) -> datetime:
    """Where looking for missed times starts: the last schedule (or creation), no earlier than
    startingDeadlineSeconds before now."""
    status, spec = cj.get("status") or {}, cj.get("spec") or {}
    start = (
        parse_time(status.get("lastScheduleTime"))
        or parse_time(cj["metadata"].get("creationTimestamp"))
        or now
    )
    sds = spec.get("startingDeadlineSeconds")
    if deadline and sds is not None:
        cutoff = now - timedelta(seconds=int(sds))
        if cutoff > start:
            start = cutoff
    return start


def most_recent(
    cj: Obj, now: datetime, sched: Schedule, deadline: bool = True
) -> tuple[datetime, datetime | None, int]:
    """mostRecentScheduleTime: (earliest, the most recent time due at or before now or None, how many
    were missed since earliest, counted as upstream does from the first two times' spacing)."""
    first = earliest(cj, now, deadline)
    t1 = sched.next(first)
    if now < t1:
        return first, None, 0
    t2 = sched.next(t1)
    if now < t2:
        return first, t1, 1
    between = round((t2 - t1).total_seconds())
    if between < 1:
        raise ScheduleError("time difference between two schedules is less than 1 second")
    missed = int((now - t1).total_seconds()) // between + 1
    if sched.every is not None:
        recent = t1 + timedelta(seconds=(missed - 1) * between)
    else:
        recent = sched.previous(now)
    return first, recent, missed


def next_delay(cj: Obj, now: datetime, sched: Schedule) -> float:
    """nextScheduleTimeDuration: seconds until just after the next time the CronJob fires."""
    first, recent, _ = most_recent(cj, now, sched, deadline=False)
    base = recent or first
    return (sched.next(base) - now).total_seconds() + NEXT_SCHEDULE_DELTA


def job_name(cj: Obj, scheduled: datetime) -> str:
    """`<cronjob>-<scheduled time in minutes since the epoch>` (getJobName)."""
    return f"{cj['metadata']['name']}-{int(scheduled.timestamp()) // 60}"


def scheduled_stamp(scheduled: datetime, sched: Schedule) -> str:
    """The scheduled time in the CronJob's zone, RFC 3339 (the cronjob-scheduled-timestamp annotation)."""
    local = scheduled.astimezone(sched.zone)
    text = local.strftime("%Y-%m-%dT%H:%M:%S%z")
    if local.utcoffset() == timedelta(0):
        return text[:-5] + "Z"  # Go's Z07:00 writes Z for a zero offset
    return text[:-2] + ":" + text[-2:]


def rfc1123z(when: datetime) -> str:
    """Go's time.RFC1123Z of a UTC time (the MissSchedule event)."""
    return when.astimezone(UTC).strftime("%a, %d %b %Y %H:%M:%S +0000")
