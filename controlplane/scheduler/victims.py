"""DefaultPreemption, the acting half: the victims chosen by `preemption.py` are marked and deleted.

As upstream: each victim first gets the DisruptionTarget condition (reason PreemptionByScheduler), then
is deleted gracefully (its own grace period), and a `Preempted` event says by which pod on which node;
pods of lower priority nominated to the same node lose their nomination. Off the decision path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.preemption import Budget
from kubeclient.client import STRATEGIC_PATCH, KubeClient
from kubeclient.errors import ApiError
from kubeclient.eventcorrelator import rfc3339
from kubeclient.events import EventRecorder
from kubeclient.selectors import SelectorError, from_label_selector

log = logging.getLogger(__name__)


def budgets(pdbs: Iterable[dict[str, Any]]) -> list[Budget]:
    """PodDisruptionBudgets as preemption reads them; one whose selector does not parse is skipped."""
    out = []
    for pdb in pdbs:
        meta = pdb.get("metadata") or {}
        status = pdb.get("status") or {}
        try:
            selector = from_label_selector((pdb.get("spec") or {}).get("selector"))
        except SelectorError:
            continue
        out.append(
            Budget(
                str(meta.get("namespace") or ""),
                selector,
                int(status.get("disruptionsAllowed") or 0),
                frozenset((status.get("disruptedPods") or {}).keys()),
            )
        )
    return out


def _path(pod: PodInfo) -> str:
    return f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"


async def evict(
    client: KubeClient,
    events: EventRecorder,
    preemptor: PodInfo,
    node: str,
    victims: Sequence[PodInfo],
    lower_nominated: Sequence[PodInfo],
) -> None:
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": f"{preemptor.scheduler_name}: preempting to accommodate a higher priority pod",
        "lastTransitionTime": rfc3339(time.time()),
    }
    for victim in victims:
        try:
            await client.patch(
                f"{_path(victim)}/status",
                {"status": {"conditions": [condition]}},
                content_type=STRATEGIC_PATCH,
            )
            await client.delete(_path(victim), {"apiVersion": "v1", "kind": "DeleteOptions"})
        except ApiError as err:
            if not err.not_found:
                log.warning("preemption of pod=%s failed: %s", victim.key, err)
            continue
        except Exception as err:
            log.warning("preemption of pod=%s failed: %r", victim.key, err)
            continue
        events.event(
            victim.obj,
            "Normal",
            "Preempted",
            f"Preempted by pod {preemptor.uid} on node {node}",
            action="Preempting",
        )
    for pod in lower_nominated:
        try:
            await client.patch(
                f"{_path(pod)}/status", {"status": {"nominatedNodeName": None}}, content_type=STRATEGIC_PATCH
            )
        except Exception as err:
            log.warning("clearing the nomination of pod=%s failed: %r", pod.key, err)
