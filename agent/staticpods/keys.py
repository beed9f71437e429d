"""The annotations that tie a static pod, its source and its mirror pod together (upstream's
pkg/kubelet/types ConfigSourceAnnotationKey and friends), and the questions asked of a pod by them."""

from __future__ import annotations

from typing import Any

CONFIG_SOURCE = "kubernetes.io/config.source"
CONFIG_HASH = "kubernetes.io/config.hash"
CONFIG_MIRROR = "kubernetes.io/config.mirror"
CONFIG_SEEN = "kubernetes.io/config.seen"
FILE_SOURCE = "file"


def _annotations(pod: dict[str, Any]) -> dict[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def is_static(pod: dict[str, Any]) -> bool:
    """A pod from a local source (a manifest file), not from the API (upstream's IsStaticPod)."""
    source = _annotations(pod).get(CONFIG_SOURCE)
    return source is not None and source != "api"


def is_mirror(pod: dict[str, Any]) -> bool:
    """The API's copy of a static pod (upstream's IsMirrorPod): shown, never run."""
    return CONFIG_MIRROR in _annotations(pod)


def static_hash(pod: dict[str, Any]) -> str:
    return _annotations(pod).get(CONFIG_HASH, "")


def mirror_hash(pod: dict[str, Any]) -> str:
    return _annotations(pod).get(CONFIG_MIRROR, "")


def full_name(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
