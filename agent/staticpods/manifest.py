"""One static pod manifest file to the pod the agent runs, as upstream's file source makes it
(pkg/kubelet/config/file.go and common.go applyDefaults): pure, no I/O.

- decoded as one v1 Pod (YAML or JSON), with the API's defaults a pod needs to run (restart policy,
  DNS policy, grace period, pull policy, termination message path, ...), since it never passes the API
  server;
- its UID, when the manifest sets none, is an MD5 over `host:<node>`, `file:<path>` and the decoded pod,
  so the same file on the same node keeps its UID across restarts and any edit makes another pod (new
  UID, new hash). Upstream hashes Go's in-memory object (DeepHashObject); we hash its canonical JSON:
  the same inputs decide the UID, the hex digits differ from a Go kubelet's;
- named `<name>-<node>`, in namespace `default` unless it says another, bound to this node, with the
  annotations `kubernetes.io/config.hash` (the UID), `kubernetes.io/config.source: file` and
  `kubernetes.io/config.seen`, a toleration of every NoExecute taint, and phase Pending.

A manifest that cannot be one (not YAML, not a Pod, no name or containers, bound to another node) is a
`ManifestError` with the reason, for the caller's log line and event.
"""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import yaml

from agent.staticpods.keys import CONFIG_HASH, CONFIG_SEEN, CONFIG_SOURCE, FILE_SOURCE
from kubeclient.names import dns1123_label, dns1123_subdomain

NO_EXECUTE_TOLERATION = {"operator": "Exists", "effect": "NoExecute"}


class ManifestError(ValueError):
    pass


def _image_pull_policy(image: str) -> str:
    """upstream's SetDefaults_Container: Always for :latest or no tag, IfNotPresent otherwise."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _default_container(container: dict[str, Any]) -> None:
    container.setdefault("imagePullPolicy", _image_pull_policy(str(container.get("image", ""))))
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")


def apply_api_defaults(pod: dict[str, Any]) -> None:
    """The v1 Pod defaults the decoder applies (SetDefaults_Pod, _PodSpec, _Container), as far as the
    agent reads them."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("securityContext", {})
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(kind) or []:
            _default_container(container)


def _decode(data: bytes, path: str) -> dict[str, Any]:
    try:
        docs = [d for d in yaml.safe_load_all(data) if d is not None]
    except yaml.YAMLError as err:
        raise ManifestError(f"{path}: couldn't parse as pod ({err}), please check manifest file") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ManifestError(
            f"{path}: couldn't parse as pod (one Pod object expected), please check manifest file"
        )
    pod = docs[0]
    if pod.get("kind") != "Pod" or pod.get("apiVersion") != "v1":
        raise ManifestError(
            f"{path}: couldn't parse as pod (kind {pod.get('kind')!r} apiVersion {pod.get('apiVersion')!r}, "
            "want v1 Pod), please check manifest file"
        )
    return pod


def _validate(pod: dict[str, Any], path: str, node_name: str) -> None:
    meta = pod.get("metadata")
    spec = pod.get("spec")
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        raise ManifestError(f"{path}: invalid pod: metadata and spec are required")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(
            f"{path}: invalid pod: metadata.name: Required value: name or generateName is required"
        )
    problems = dns1123_subdomain(f"{name}-{node_name.lower()}")
    if meta.get("namespace"):
        problems += dns1123_label(str(meta["namespace"]))
    if problems:
        raise ManifestError(
            f"{path}: invalid pod: metadata.name: Invalid value: {name!r}: {'; '.join(problems)}"
        )
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise ManifestError(f"{path}: invalid pod: spec.containers: Required value")
    for i, container in enumerate(containers + list(spec.get("initContainers") or [])):
        if not isinstance(container, dict) or not container.get("name") or not container.get("image"):
            raise ManifestError(f"{path}: invalid pod: spec.containers[{i}]: name and image are required")
    bound = spec.get("nodeName")
    if bound and bound != node_name:
        raise ManifestError(f'{path}: pod is bound to node "{bound}", not to this node "{node_name}"')


def pod_uid(pod: dict[str, Any], node_name: str, path: str) -> str:
    """upstream's applyDefaults UID: MD5 over the node, the file and the decoded pod."""
    hasher = hashlib.md5(usedforsecurity=False)
    hasher.update(f"host:{node_name}".encode())
    hasher.update(f"file:{path}".encode())
    hasher.update(json.dumps(pod, sort_keys=True, separators=(",", ":"), default=str).encode())
    return hasher.hexdigest()


def seen_timestamp(now: datetime | None = None) -> str:
    """kubernetes.io/config.seen as upstream writes it (RFC 3339 with nanoseconds)."""
    now = now or datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond * 1000:09d}Z"


def static_pod(data: bytes, path: str, node_name: str, seen: str = "") -> dict[str, Any]:
    """The pod the agent runs for manifest `path` on node `node_name`."""
    pod = _decode(data, path)
    _validate(pod, path, node_name)
    apply_api_defaults(pod)
    meta = pod["metadata"]
    uid = meta.get("uid") or pod_uid(pod, node_name, path)
    out = copy.deepcopy(pod)
    meta = out["metadata"]
    meta["uid"] = uid
    meta["name"] = f"{meta['name']}-{node_name.lower()}"
    meta["namespace"] = meta.get("namespace") or "default"
    for system in ("resourceVersion", "creationTimestamp", "selfLink", "generation", "managedFields"):
        meta.pop(system, None)
    out["spec"]["nodeName"] = node_name
    annotations = dict(meta.get("annotations") or {})
    annotations[CONFIG_HASH] = uid
    annotations[CONFIG_SOURCE] = FILE_SOURCE
    annotations[CONFIG_SEEN] = seen or seen_timestamp()
    meta["annotations"] = annotations
    tolerations = list(out["spec"].get("tolerations") or [])
    if NO_EXECUTE_TOLERATION not in tolerations:
        tolerations.append(dict(NO_EXECUTE_TOLERATION))
    out["spec"]["tolerations"] = tolerations
    out["status"] = {"phase": "Pending"}
    return out
