"""The Node authorizer's graph (upstream's plugin/pkg/auth/authorizer/node/graph.go and its populator):
which objects each node may reach through the pods bound to it.

Upstream keeps a graph of vertices (node <- pod <- secret/configmap/pvc/serviceaccount) and walks it;
the only paths that exist here are one pod long, so the graph is kept as its answer: for every
referenced object, how many pods of each node reference it. A lookup is then one dictionary access.
It is fed from the API server's own watch cache, synchronously with every commit, so a pod bound to a
node lets that node read its secret at the very next request, and a deleted pod takes the access away.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubeclient.podrefs import pod_object_names

if TYPE_CHECKING:
    from controlplane.storage.cache import CachedObject, CacheEvent, WatchCache

Obj = dict[str, Any]
POD, SECRET, CONFIGMAP, PVC, SERVICE_ACCOUNT = "pod", "secret", "configmap", "pvc", "serviceAccount"
PV = "pv"
Vertex = tuple[str, str, str]  # (type, namespace, name)
PODS_BUCKET = "pods"
PVS_BUCKET = "persistentvolumes"


@dataclass(frozen=True)
class PodRefs:
    """What a bound pod connects its node to."""

    node: str
    secrets: frozenset[str]
    configmaps: frozenset[str]
    pvcs: frozenset[str]
    service_account: str

    def vertices(self, namespace: str, name: str) -> Iterator[Vertex]:
        yield (POD, namespace, name)
        for kind, names in ((SECRET, self.secrets), (CONFIGMAP, self.configmaps), (PVC, self.pvcs)):
            for n in names:
                yield (kind, namespace, n)
        if self.service_account:
            yield (SERVICE_ACCOUNT, namespace, self.service_account)


def pod_refs(pod: Obj) -> PodRefs | None:
    """The references of a pod bound to a node (None for an unbound pod: it reaches no node)."""
    spec = pod.get("spec") or {}
    node = spec.get("nodeName") or ""
    if not node:
        return None
    names = pod_object_names(pod)
    return PodRefs(node, names.secrets, names.configmaps, names.pvcs, spec.get("serviceAccountName") or "")


class NodeGraph:
    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], PodRefs] = {}
        self.edges: dict[Vertex, Counter[str]] = {}
        # pv -> the claim its claimRef names (upstream's pv -> pvc edge): a node reaches a volume
        # through the claim of one of its pods.
        self.pv_claims: dict[str, tuple[str, str]] = {}

    def start(self, cache: WatchCache) -> None:
        for cached in cache.subscribe(PODS_BUCKET, self._on_event):
            self._apply_cached(cached, deleted=False)
        for cached in cache.subscribe(PVS_BUCKET, self._on_pv_event):
            self._apply_pv(cached, deleted=False)

    def _on_pv_event(self, event: CacheEvent) -> None:
        self._apply_pv(event.obj, deleted=event.type == "DELETED")

    def _apply_pv(self, cached: CachedObject, deleted: bool) -> None:
        name = cached.key.split("/")[-1]
        ref = (json.loads(cached.raw).get("spec") or {}).get("claimRef") if not deleted else None
        if isinstance(ref, dict) and ref.get("name"):
            self.pv_claims[name] = (str(ref.get("namespace") or ""), str(ref["name"]))
        else:
            self.pv_claims.pop(name, None)

    def _on_event(self, event: CacheEvent) -> None:
        self._apply_cached(event.obj, event.type == "DELETED", event.decoded)

    def _apply_cached(self, cached: CachedObject, deleted: bool, decoded: Obj | None = None) -> None:
        parts = cached.key.split("/")
        key = (parts[2], parts[3]) if len(parts) == 4 else ("", parts[-1])
        if deleted:
            self.set_pod(key, None)
            return
        if not (cached.view.get("spec") or {}).get("nodeName") and key not in self.pods:
            return  # unbound and never bound: nothing to decode
        self.set_pod(key, decoded if decoded is not None else json.loads(cached.raw))

    def set_pod(self, key: tuple[str, str], pod: Obj | None) -> None:
        """Record (or with None, forget) the pod at (namespace, name)."""
        refs = pod_refs(pod) if pod is not None else None
        old = self.pods.get(key)
        if old == refs:
            return
        if old is not None:
            for vertex in old.vertices(*key):
                counts = self.edges[vertex]
                counts[old.node] -= 1
                if counts[old.node] <= 0:
                    del counts[old.node]
                if not counts:
                    del self.edges[vertex]
            del self.pods[key]
        if refs is not None:
            self.pods[key] = refs
            for vertex in refs.vertices(*key):
                self.edges.setdefault(vertex, Counter())[refs.node] += 1

    def has_path(self, node: str, kind: str, namespace: str, name: str) -> bool:
        """hasPathFrom: a pod bound to `node` references the object (or is it)."""
        if kind == PV:
            claim = self.pv_claims.get(name)
            return claim is not None and self.has_path(node, PVC, *claim)
        counts = self.edges.get((kind, namespace, name))
        return counts is not None and counts.get(node, 0) > 0

    def node_of(self, namespace: str, name: str) -> str | None:
        refs = self.pods.get((namespace, name))
        return refs.node if refs is not None else None


__all__ = ["CONFIGMAP", "POD", "PV", "PVC", "SECRET", "SERVICE_ACCOUNT", "NodeGraph", "PodRefs", "pod_refs"]
