"""NodeResourcesFit (filter): the pod's requests must fit in allocatable minus what the node's pods
(assumed ones included) already request. Checked as upstream does: the pod count first, then cpu,
memory, ephemeral-storage and any extended resource; every shortfall is reported, not just the first,
so a node short of both cpu and memory counts towards both reasons in the message."""

from __future__ import annotations

from controlplane.scheduler.framework import FITS
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo

TOO_MANY_PODS = "Too many pods"
_ORDER = ("cpu", "memory", "ephemeral-storage")


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


class NodeResourcesFitFilter:
    name = "NodeResourcesFit"

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        assert node.facts is not None
        alloc = node.facts.allocatable
        used = node.requested
        reasons: list[str] = []
        if len(node.pods) + 1 > alloc.get("pods", 0):
            reasons.append(TOO_MANY_PODS)
        requests = pod.requests
        if not any(requests.values()):
            return tuple(reasons)
        for name in _ORDER:
            want = requests.get(name, 0)
            if want > 0 and want > alloc.get(name, 0) - used.get(name, 0):
                reasons.append(insufficient(name))
        for name in sorted(requests):
            if name in _ORDER or name == "pods":
                continue
            want = requests[name]
            if want > 0 and want > alloc.get(name, 0) - used.get(name, 0):
                reasons.append(insufficient(name))
        return tuple(reasons) if reasons else FITS
