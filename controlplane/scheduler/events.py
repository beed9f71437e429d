"""Events about pods (Scheduled, FailedScheduling), written off the scheduling path.

Events are for people reading `kubectl describe`; they must never slow a decision or a binding down. The
shared recorder (`kubeclient.events`) queues them for a few sender tasks, correlates repeats as
upstream's recorder does (a pod retried every 10 s bumps the count of one FailedScheduling event), and
while bindings are in flight the scheduler holds the senders back for up to MAX_LAG seconds per event, so
the API server's time goes to bindings first (under sustained load events simply trail by MAX_LAG). When
the queue is full the oldest intent is dropped, as upstream's recorder drops under pressure.
"""

from __future__ import annotations

import os
import socket

from kubeclient.client import KubeClient
from kubeclient.events import EventRecorder, EventSource

MAX_LAG = 2.0  # seconds an event may wait for the bindings in flight to finish
CAPACITY = 10_000
# kube-scheduler starts no logging of its events (only the sink), so they are not logged at the default
# verbosity: a line per Scheduled event was a log write per pod.
LOG_VERBOSITY = 5


def scheduler_events(client: KubeClient, component: str, workers: int) -> EventRecorder:
    return EventRecorder(
        client,
        EventSource(component),
        reporting_instance=f"{component}-{socket.gethostname()}-{os.getpid()}",
        workers=workers,
        capacity=CAPACITY,
        max_lag=MAX_LAG,
        verbosity=LOG_VERBOSITY,
    )
