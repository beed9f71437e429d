"""Reads of the objects a pod references (ConfigMaps and Secrets for env, volumes and image pull
secrets; its claims and their volumes; its RuntimeClass), one GET by name each: a kubelet under the
Node authorizer may read only the objects of its own pods, never list a namespace.

The node keeps its pods running while the API is unreachable (every API server down, etcd without
quorum): each object read is remembered, and a read that finds the API unreachable (or answering a
5xx) gets the object as last seen, as upstream's kubelet serves its ConfigMap and Secret managers from
their caches. A remembered object is read with a single bounded attempt, so a restart during an outage
waits seconds at most, not the client's whole retry budget. Secrets are held in memory only.

The copies are kept while a pod on the node names them: `register_pod` (a pod added or changed) and
`unregister_pod` (a pod gone from the node) count the pods naming each ConfigMap and Secret, and the
copy of one no pod names any more is dropped, as upstream's kubelet's ConfigMap and Secret managers
stop an object's watch and drop it when the last pod referencing it is unregistered. Objects of other
kinds, and a Secret only a volume's PersistentVolume names, are read the same way and kept.

With watches (`objectwatch.py`, the agent's default as upstream's `Watch` strategy) a ConfigMap or Secret
a pod names is watched from its registration on and read from the watch's store once that has listed it;
a read before then is the GET above, and the watch's store is the copy that serves through an outage."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any
from urllib.parse import quote

from agent.kube.objectwatch import ObjectWatches
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.podrefs import pod_object_names

log = logging.getLogger("agent.kube.objects")

_KIND_PATHS = {
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "RuntimeClass": "/apis/node.k8s.io/v1/runtimeclasses",
    "PersistentVolume": "/api/v1/persistentvolumes",
    "CSIDriver": "/apis/storage.k8s.io/v1/csidrivers",
    "VolumeAttachment": "/apis/storage.k8s.io/v1/volumeattachments",
}
# One attempt of this many seconds for an object already seen: the API's answer if it comes, else the copy.
SEEN_READ_DEADLINE = 3.0


def _outage(err: ApiError) -> bool:
    """The API cannot answer now (unreachable, timed out, its storage down), as opposed to an answer."""
    return err.unreachable or err.status >= 500


Key = tuple[str, str, str]  # (kind, namespace, name)


def named_objects(pod: dict[str, Any]) -> frozenset[Key]:
    """The ConfigMaps and Secrets a pod names, as keys of the reader's copies."""
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    names = pod_object_names(pod)
    return frozenset(
        [("ConfigMap", namespace, n) for n in names.configmaps]
        + [("Secret", namespace, n) for n in names.secrets]
    )


class ObjectReader:
    def __init__(self, client: KubeClient, watches: ObjectWatches | None = None) -> None:
        self.client = client
        self.watches = watches  # None: every read is a GET
        self._seen: dict[Key, dict[str, Any] | None] = {}
        self._pods: dict[str, frozenset[Key]] = {}  # pod uid -> the ConfigMaps and Secrets it names
        self._users: Counter[Key] = Counter()  # how many registered pods name each

    def register_pod(self, pod: dict[str, Any]) -> None:
        """A pod is on the node (added, or its spec changed): its objects are kept while it names them."""
        uid = (pod.get("metadata") or {}).get("uid") or ""
        if uid:
            self._set(uid, named_objects(pod))

    def unregister_pod(self, uid: str) -> None:
        """The pod is gone from the node: copies no other pod names are dropped."""
        self._set(uid, frozenset())

    def _set(self, uid: str, keys: frozenset[Key]) -> None:
        before = self._pods.pop(uid, frozenset())
        if keys:
            self._pods[uid] = keys
        for key in keys - before:
            self._users[key] += 1
            if self._users[key] == 1 and self.watches is not None:
                self.watches.start(key)
        for key in before - keys:
            self._users[key] -= 1
            if self._users[key] <= 0:
                del self._users[key]
                if self.watches is not None:
                    self.watches.stop(key)
                if self._seen.pop(key, None) is not None:
                    log.debug("copy dropped, no pod names it kind=%s namespace=%s name=%s", *key)

    def cached(self) -> set[Key]:
        """The objects a copy is kept of (read, or held by a watch)."""
        return set(self._seen) | (self.watches.held() if self.watches is not None else set())

    async def fetch(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None if it does not exist (other API errors are raised); the last copy seen
        while the API cannot answer."""
        where = _KIND_PATHS[kind]
        path = (
            f"{where}/{quote(name)}"  # cluster-scoped kinds are named by their full collection path
            if where.startswith("/")
            else f"/api/v1/namespaces/{quote(namespace)}/{where}/{quote(name)}"
        )
        key = (kind, namespace, name)
        if self.watches is not None and key in self._users:
            served, obj = self.watches.read(key)
            if served:
                self._seen.pop(key, None)  # the watch's copy is the one kept now
                return obj
        seen = key in self._seen
        try:
            if seen:
                obj = await self.client.request("GET", path, retry=False, deadline=SEEN_READ_DEADLINE)
            else:
                obj = await self.client.get(path)
        except ApiError as err:
            if err.not_found:
                obj = None
            elif seen and _outage(err):
                log.info("API unreachable, %s %s/%s as last seen error=%r", kind, namespace, name, str(err))
                return self._seen[key]
            else:
                raise
        self._seen[key] = obj
        return obj
