"""NodeResourcesFit (filter): the pod's requests must fit in allocatable minus what the node's pods
(assumed ones included) already request. Checked as upstream does: the pod count first, then cpu,
memory, ephemeral-storage and any extended resource; every shortfall is reported, not just the first,
so a node short of both cpu and memory counts towards both reasons in the message."""

from __future__ import annotations

from controlplane.scheduler.framework import FITS
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo

TOO_MANY_PODS = "Too many pods"


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


class NodeResourcesFitFilter:
    name = "NodeResourcesFit"

    def applies(self, pod: PodInfo) -> bool:
        return True  # the pod count always applies

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        verdict = node.by_requests.get(pod.requests_id)
        if verdict is None:
            verdict = node.by_requests[pod.requests_id] = self._check(pod, node)
        return verdict  # type: ignore[no-any-return]

    def _check(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        assert node.facts is not None
        alloc = node.facts.allocatable
        used = node.requested
        reasons: list[str] | None = None
        if len(node.pods) + 1 > alloc.get("pods", 0):
            reasons = [TOO_MANY_PODS]
        for name, want in pod.fit_checks:  # only the non-zero requests, in upstream's order
            if want > alloc.get(name, 0) - used.get(name, 0):
                if reasons is None:
                    reasons = []
                reasons.append(insufficient(name))
        return tuple(reasons) if reasons else FITS
