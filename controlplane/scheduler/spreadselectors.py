"""The selector PodTopologySpread's default constraints spread a pod by (upstream's DefaultSelector):
the selectors of the Services in its namespace that select it, plus that of its controller when it is
a ReplicationController, ReplicaSet or StatefulSet. Kept from watches of those four kinds.
"""

from __future__ import annotations

from typing import Any

from controlplane.scheduler.podinfo import PodInfo
from kubeclient.client import KubeClient
from kubeclient.informer import Informer, by_namespace, controller_ref
from kubeclient.selectors import Requirement, Selector, SelectorError, from_label_selector, from_set

_OWNER_KINDS = {
    ("v1", "ReplicationController"): "rcs",
    ("apps/v1", "ReplicaSet"): "replicasets",
    ("apps/v1", "StatefulSet"): "statefulsets",
}


class SpreadSelectors:
    def __init__(self, client: KubeClient) -> None:
        indexers = {"namespace": by_namespace}
        self.services = Informer(client, "/api/v1/services", indexers=indexers)
        self.rcs = Informer(client, "/api/v1/replicationcontrollers")
        self.replicasets = Informer(client, "/apis/apps/v1/replicasets")
        self.statefulsets = Informer(client, "/apis/apps/v1/statefulsets")
        self.informers = (self.services, self.rcs, self.replicasets, self.statefulsets)

    def selector(self, pod: PodInfo) -> Selector | None:
        labels: dict[str, str] = {}
        for svc in self.services.by_index("namespace", pod.namespace):
            wanted = (svc.get("spec") or {}).get("selector") or {}
            if wanted and all(pod.labels.get(k) == v for k, v in wanted.items()):
                labels.update(wanted)
        requirements: list[Requirement] = []
        ref = controller_ref(pod.obj)
        if ref is not None:
            which = _OWNER_KINDS.get((str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")))
            owner = getattr(self, which).get(f"{pod.namespace}/{ref.get('name')}") if which else None
            if owner is not None:
                requirements = _owner_requirements(which or "", owner, labels)
        try:
            selector = from_set(labels)
        except SelectorError:
            return None
        merged = (*selector.requirements, *requirements)
        if not merged:
            return None
        return Selector(tuple(sorted(merged, key=lambda r: r.key)))


def _owner_requirements(which: str, owner: dict[str, Any], labels: dict[str, str]) -> list[Requirement]:
    spec = owner.get("spec") or {}
    try:
        if which == "rcs":
            labels.update({str(k): str(v) for k, v in (spec.get("selector") or {}).items()})
            return []
        return list(from_label_selector(spec.get("selector")).requirements)
    except SelectorError:
        return []
