"""A CronJob's schedule and time zone as the API server judges them: upstream parses schedules with
robfig/cron's ParseStandard (five fields, names for months and weekdays, `?`, ranges, steps, the
@yearly .. @hourly descriptors and `@every <duration>`) and reports its error text in the 422; a time
zone must be one `time.LoadLocation` knows (here: zoneinfo, the same IANA database).

Only the grammar is checked here; when a schedule fires is the controller's business (croniter).
"""

from __future__ import annotations

import re
import zoneinfo

DESCRIPTORS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
_MONTHS = {
    m: i
    for i, m in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1
    )
}
_DAYS = {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# (minimum, maximum, names) of minute, hour, day of month, month, day of week.
_FIELDS: tuple[tuple[int, int, dict[str, int]], ...] = (
    (0, 59, {}),
    (0, 23, {}),
    (1, 31, {}),
    (1, 12, _MONTHS),
    (0, 6, _DAYS),
)
_DURATION = re.compile(r"^([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+$")
_TZ_PART = re.compile(r"^[A-Za-z\.\-_0-9+]{1,14}$")


class ScheduleError(ValueError):
    pass


def _number(text: str, names: dict[str, int]) -> int:
    if text.lower() in names:
        return names[text.lower()]
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ScheduleError(
            f'failed to parse int from {text}: strconv.Atoi: parsing "{text}": invalid syntax'
        )
    return int(text)


def _range(expr: str, low: int, high: int, names: dict[str, int]) -> None:
    """robfig's getRange, its errors word for word."""
    range_and_step = expr.split("/")
    low_and_high = range_and_step[0].split("-")
    single = len(low_and_high) == 1
    if low_and_high[0] in ("*", "?"):
        start, end = low, high
    else:
        start = _number(low_and_high[0], names)
        if len(low_and_high) == 1:
            end = start
        elif len(low_and_high) == 2:
            end = _number(low_and_high[1], names)
        else:
            raise ScheduleError(f"too many hyphens: {expr}")
    if len(range_and_step) == 2:
        step = _number(range_and_step[1], {})
        if single and low_and_high[0] not in ("*", "?"):
            end = high
        if step <= 0:
            raise ScheduleError(f"step of range should be a positive number: {expr}")
    elif len(range_and_step) > 2:
        raise ScheduleError(f"too many slashes: {expr}")
    if start < low:
        raise ScheduleError(f"beginning of range ({start}) below minimum ({low}): {expr}")
    if end > high:
        raise ScheduleError(f"end of range ({end}) above maximum ({high}): {expr}")
    if start > end:
        raise ScheduleError(f"beginning of range ({start}) beyond end of range ({end}): {expr}")


def parse_standard(schedule: str) -> None:
    """Raise ScheduleError with robfig/cron's message when ParseStandard would refuse `schedule`."""
    spec = schedule
    if spec.startswith(("TZ=", "CRON_TZ=")):
        zone, _, spec = spec.partition(" ")
        try:
            zoneinfo.ZoneInfo(zone.split("=", 1)[1])
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ScheduleError(
                f"provided bad location {zone.split('=', 1)[1]}: unknown time zone {zone.split('=', 1)[1]}"
            ) from None
    if spec.startswith("@"):
        if spec.startswith("@every "):
            if not _DURATION.match(spec[len("@every ") :].strip()):
                raise ScheduleError(
                    f'failed to parse duration {spec}: time: invalid duration "{spec[len("@every ") :]}"'
                )
            return
        if spec not in DESCRIPTORS:
            raise ScheduleError(f"unrecognized descriptor: {spec}")
        return
    fields = spec.split()
    if len(fields) != 5:
        raise ScheduleError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    for text, (low, high, names) in zip(fields, _FIELDS, strict=True):
        for part in text.split(","):
            _range(part, low, high, names)


def time_zone_error(zone: str) -> str | None:
    """validateTimeZone's detail for a bad zone, None for a good one."""
    if not zone:
        return "timeZone must be nil or non-empty string"
    for part in zone.split("/"):
        if part in (".", "..") or part.startswith("-") or not _TZ_PART.match(part):
            return f"unknown time zone {zone}"
    if zone.lower() == "local":
        return "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return f"unknown time zone {zone}"
    return None
