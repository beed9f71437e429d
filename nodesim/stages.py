"""How a simulated pod moves through its life (kwok's Stages, as annotations on the pod).

Pure functions of the pod and what the simulator remembers of it, so each rule is tested without a
server. A pod bound to a simulated node starts after the start delay; its containers then run until the
pod is deleted, unless they are to exit: a Job's pods exit 0 after `job_duration`, and any pod can say
when and how with annotations:

- `nodesim.pykubelet.io/start-delay: 2s`   Pending -> Running after this long (default: the settings').
- `nodesim.pykubelet.io/run-for: 5s`       its containers exit after running this long.
- `nodesim.pykubelet.io/exit-code: "1"`    ... with this code (default 0).
- `nodesim.pykubelet.io/ignore-sigterm: "true"`  on deletion it takes the whole grace period, as a
  process that ignores SIGTERM does, instead of stopping at once.

What exiting leads to is the pod's restartPolicy, as the kubelet decides it: Never ends the pod
(Succeeded on 0, Failed otherwise), OnFailure ends it on 0 and restarts it otherwise, Always restarts it;
restarts wait the kubelet's crash back-off (10 s doubling to 300 s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubeclient.duration import parse_duration
from nodesim.settings import SimSettings

PREFIX = "nodesim.pykubelet.io/"
START_DELAY = PREFIX + "start-delay"
RUN_FOR = PREFIX + "run-for"
EXIT_CODE = PREFIX + "exit-code"
IGNORE_SIGTERM = PREFIX + "ignore-sigterm"

BACKOFF_INITIAL = 10.0
BACKOFF_MAX = 300.0


@dataclass
class PodRecord:
    """What the simulator knows of one of its pods (monotonic seconds)."""

    node: str
    seen_at: float
    ip: str = ""
    started_at: float | None = None  # when its containers (last) started
    start_stamp: str = ""  # the same, as the API shows it
    restarts: int = 0
    last_exit: tuple[int, str, str] | None = None  # (code, startedAt, finishedAt) of the last run
    waiting_until: float | None = None  # in crash back-off until then
    ended: bool = False  # Succeeded or Failed: nothing more happens until it is deleted
    status_written: str = ""  # the phase/restart state last written, so an unchanged state is not rewritten


def _annotations(pod: dict[str, Any]) -> dict[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def _seconds(text: str | None, default: float | None) -> float | None:
    if text is None:
        return default
    try:
        return max(0.0, parse_duration(text))
    except ValueError:
        return default


def start_delay(pod: dict[str, Any], settings: SimSettings) -> float:
    value = _seconds(_annotations(pod).get(START_DELAY), settings.start_delay)
    return settings.start_delay if value is None else value


def owned_by_job(pod: dict[str, Any]) -> bool:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("kind") == "Job" and o.get("controller") for o in owners)


def run_for(pod: dict[str, Any], settings: SimSettings) -> float | None:
    """How long its containers run before they exit (None: until the pod is deleted)."""
    default = settings.job_duration if owned_by_job(pod) else None
    return _seconds(_annotations(pod).get(RUN_FOR), default)


def exit_code(pod: dict[str, Any]) -> int:
    try:
        return int(_annotations(pod).get(EXIT_CODE, "0"))
    except ValueError:
        return 0


def restarts_after_exit(pod: dict[str, Any], code: int) -> bool:
    policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
    return policy == "Always" or (policy == "OnFailure" and code != 0)


def crash_backoff(restarts: int) -> float:
    """The kubelet's back-off before restart number `restarts + 1`."""
    return min(BACKOFF_MAX, BACKOFF_INITIAL * (2 ** max(0, restarts)))


def termination_wait(pod: dict[str, Any]) -> float:
    """How long a deleted pod takes to stop: at once, or its grace period when it ignores SIGTERM."""
    if _annotations(pod).get(IGNORE_SIGTERM) != "true":
        return 0.0
    meta = pod.get("metadata") or {}
    grace = meta.get("deletionGracePeriodSeconds")
    if grace is None:
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
    return float(grace or 0)
