"""The DaemonSet controller: `controller.py` (informers, the sync, its writes), `logic.py` (per-node
decisions, the rolling update, the status numbers: pure), `placement.py` (which nodes fit, the daemon
tolerations and node pinning), `history.py` (ControllerRevisions)."""

from controlplane.controllers.daemonset.controller import DaemonSetController

__all__ = ["DaemonSetController"]
