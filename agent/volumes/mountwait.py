"""How long a pod has waited for its volumes, and upstream's log line when the wait times out.

Upstream's kubelet waits in WaitForAttachAndMount up to podAttachAndMountTimeout (2 min 3 s) for the
pod's volumes; when that passes, SyncPod returns the error `unmounted volumes=[...], unattached
volumes=[...], failed to process volumes=[...]: context deadline exceeded` and records no event for it
(1.32 skips the `Unable to attach or mount volumes` event and log for an interrupted wait: the
reconciler's own FailedMount events say what failed); the pod worker logs `Error syncing pod, skipping`
with that error and syncs the pod again, which waits anew. The agent does not block a pass on the
volumes (it tries again on the next pass), so this keeps when each pod's wait began and, on the first
failed pass at or after the timeout, logs upstream's line and begins a new wait.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("agent.volumes")

MOUNT_TIMEOUT = 123.0  # upstream's podAttachAndMountTimeout: 2 min 3 s
TIMED_OUT = "context deadline exceeded"  # Go's text of the wait's expired context


@dataclass
class MountWaits:
    clock: Callable[[], float] = time.monotonic
    timeout: float = MOUNT_TIMEOUT
    _since: dict[str, float] = field(default_factory=dict)  # pod uid -> when its current wait began

    def failed(self, pod_ref: str, uid: str, lists: str) -> bool:
        """A pass found the pod's volumes not ready (`lists`: the unmounted, unattached and unprocessed
        volumes as upstream's error names them). True when its wait timed out (and was logged)."""
        now = self.clock()
        since = self._since.setdefault(uid, now)
        if now - since < self.timeout:
            return False
        self._since[uid] = now
        log.error(
            'Error syncing pod, skipping err="%s: %s" pod="%s" podUID="%s"', lists, TIMED_OUT, pod_ref, uid
        )
        return True

    def done(self, uid: str) -> None:
        """The pod's volumes are ready, or the pod is gone: no wait."""
        self._since.pop(uid, None)
