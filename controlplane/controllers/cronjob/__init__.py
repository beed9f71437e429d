"""The CronJob controller: `controller.py` (the sync and its writes), `schedule.py` (when a CronJob
fires, in its time zone, and the Job it makes for a time: pure)."""

from controlplane.controllers.cronjob.controller import CronJobController

__all__ = ["CronJobController"]
