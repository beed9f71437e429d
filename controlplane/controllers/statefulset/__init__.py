"""The StatefulSet controller: `controller.py` (informers, the sync, history, status), `logic.py` (what
the next steps are: OrderedReady/Parallel, scale-down, RollingUpdate with partition, OnDelete, the status
numbers; pure), `identity.py` (names, labels, hostname/subdomain, claims and their owners under the
retention policy; pure), `writes.py` (pods and claims written, with upstream's events)."""

from controlplane.controllers.statefulset.controller import StatefulSetController

__all__ = ["StatefulSetController"]
