"""The CRI labels and annotations by which the agent finds its own sandboxes and containers again.

They are upstream's keys, so tools that read them (crictl, containerd's own views) see what they see
under the upstream kubelet, and so a restarted agent can rebuild everything from CRI alone.
"""

from __future__ import annotations

import hashlib
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
    return {POD_NAME: meta["name"], POD_NAMESPACE: meta["namespace"], POD_UID: meta["uid"], CONTAINER_NAME: name}


def container_hash(container: dict[str, Any]) -> str:
    """A hash of the container's spec without its resources (which can change in place), as upstream
    does: a running container whose hash no longer matches its spec is restarted."""
    spec = {k: v for k, v in container.items() if k != "resources"}
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return digest[:8]
