"""The CRI labels and annotations by which the agent finds its own sandboxes and containers again.

They are upstream's keys, so tools that read them (crictl, containerd's own views) see what they see
under the upstream kubelet, and so a restarted agent can rebuild everything from CRI alone.
"""

from __future__ import annotations

import json
from typing import Any

POD_NAME = "io.kubernetes.pod.name"
POD_NAMESPACE = "io.kubernetes.pod.namespace"
POD_UID = "io.kubernetes.pod.uid"
CONTAINER_NAME = "io.kubernetes.container.name"

CONTAINER_HASH = "io.kubernetes.container.hash"
RESTART_COUNT = "io.kubernetes.container.restartCount"
TERMINATION_MESSAGE_PATH = "io.kubernetes.container.terminationMessagePath"
TERMINATION_MESSAGE_POLICY = "io.kubernetes.container.terminationMessagePolicy"
CONTAINER_PORTS = "io.kubernetes.container.ports"
POD_DELETION_GRACE = "io.kubernetes.pod.deletionGracePeriod"
POD_TERMINATION_GRACE = "io.kubernetes.pod.terminationGracePeriod"
# Our own: which list a container came from, so status can tell init from app containers.
CONTAINER_KIND = "io.pykubelet.container.kind"


def pod_labels(pod: dict[str, Any]) -> dict[str, str]:
    meta = pod["metadata"]
    labels = dict(meta.get("labels") or {})
    labels.update({POD_NAME: meta["name"], POD_NAMESPACE: meta["namespace"], POD_UID: meta["uid"]})
    return labels


def container_labels(pod: dict[str, Any], name: str) -> dict[str, str]:
    meta = pod["metadata"]
    return {
        POD_NAME: meta["name"],
        POD_NAMESPACE: meta["namespace"],
        POD_UID: meta["uid"],
        CONTAINER_NAME: name,
    }


def _fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def container_hash(container: dict[str, Any]) -> str:
    """The container's hash over its name and image only, as upstream's HashContainer since 1.31 (an
    FNV-32a of those two fields, in hex): a running container whose hash no longer matches its spec is
    restarted, so fields the API server defaults later (or that may change in place) never restart it."""
    fields = {"image": container.get("image", ""), "name": container.get("name", "")}
    return format(_fnv32a(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()), "x")
