"""The Job controller: `controller.py` (informers, the sync, the API writes), `logic.py` (the counting,
the verdicts and the backoff, pure), `pods.py` (what a Job reads off its pods and the pods it makes)."""

from controlplane.controllers.job.controller import JobController

__all__ = ["JobController"]
