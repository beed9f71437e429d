"""What a request's SLI latency leaves out, as upstream's request.LatencyTrackers keeps it
(k8s.io/apiserver/pkg/endpoints/request/webhook_duration.go): the time spent in mutating admission
webhooks (called one after another: summed), in validating admission webhooks (called in parallel: the
longest call) and waiting in a priority-and-fairness queue (summed). apiserver_request_sli_duration_seconds
is a request's duration less these, because they depend on the cluster's configuration (its webhooks,
its flow schemas), not on the server.

The metrics middleware opens one tracker per request; the webhook caller and the flow-control filter add
to whichever tracker the running request holds. A context variable carries it: aiohttp runs each request
in one task, and the tasks a request starts (parallel webhook calls) copy its context, so they add to
the same tracker. Writes the server makes itself (no HTTP request) have none, and adding is a no-op.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass


@dataclass(slots=True)
class LatencyTrackers:
    mutating_webhooks: float = 0.0
    validating_webhooks: float = 0.0
    apf_queue_wait: float = 0.0

    def excluded(self) -> float:
        """The seconds the SLI leaves out of the request's duration."""
        return self.mutating_webhooks + self.validating_webhooks + self.apf_queue_wait


_CURRENT: contextvars.ContextVar[LatencyTrackers | None] = contextvars.ContextVar(
    "latency_trackers", default=None
)


def begin() -> tuple[LatencyTrackers, contextvars.Token[LatencyTrackers | None]]:
    """A new request's tracker, current until `end(token)`."""
    trackers = LatencyTrackers()
    return trackers, _CURRENT.set(trackers)


def end(token: contextvars.Token[LatencyTrackers | None]) -> None:
    _CURRENT.reset(token)


def webhook(mutating: bool, seconds: float) -> None:
    """One admission webhook call took `seconds`."""
    trackers = _CURRENT.get()
    if trackers is None:
        return
    if mutating:
        trackers.mutating_webhooks += seconds
    else:
        trackers.validating_webhooks = max(trackers.validating_webhooks, seconds)


def apf_wait(seconds: float) -> None:
    """The request waited `seconds` in a priority level's queue before it was dispatched."""
    trackers = _CURRENT.get()
    if trackers is not None:
        trackers.apf_queue_wait += seconds
