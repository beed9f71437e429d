"""The objects of one journey: the root, what it owns (down ownerReferences, transitively), the Services
selecting its pods (for an Ingress or HTTPRoute: the Services it routes to, and their pods), their
EndpointSlices, and the Events about any of them.

`build` is pure (namespace-wide lists in, the journey out) so ordering and diagnosis are tested on
recorded objects; `collect` reads those lists once, concurrently: a handful of LISTs whatever the
replica count, which is what keeps a 100-pod trace under a second.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from journey.kinds import BY_KIND, Kind
from journey.routes import ROUTE_KINDS, backend_services
from kubeclient.client import KubeClient

Obj = dict[str, Any]
# What a journey can pass through, namespace-wide (Events last: they are about the others).
POOLS = ("ReplicaSet", "Job", "Pod", "Service", "EndpointSlice", "Event")
SERVICE_NAME = "kubernetes.io/service-name"


@dataclass
class Journey:
    root: Obj
    objects: list[Obj] = field(default_factory=list)  # root first, then owners before the owned
    events: list[Obj] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o.get("kind") == kind]

    def uid_of(self, uid: str) -> Obj | None:
        return next((o for o in self.objects if uid_of(o) == uid), None)


def meta(obj: Obj) -> dict[str, Any]:
    return obj.get("metadata") or {}


def uid_of(obj: Obj) -> str:
    return str(meta(obj).get("uid") or "")


def label(obj: Obj) -> str:
    """`Deployment web`."""
    return f"{obj.get('kind', '?')} {meta(obj).get('name', '?')}"


def _selects(service: Obj, pod: Obj) -> bool:
    selector = (service.get("spec") or {}).get("selector") or {}
    if not selector:
        return False
    labels = meta(pod).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def build(root: Obj, pools: dict[str, list[Obj]]) -> Journey:
    """The journey of `root` through the namespace-wide `pools` (kind -> objects)."""
    root.setdefault("kind", root.get("kind") or "")
    journey = Journey(root, [root])
    seen = {uid_of(root)}
    frontier = [root]
    owned = [
        o for kind in POOLS if kind not in ("Service", "EndpointSlice", "Event") for o in pools.get(kind, [])
    ]
    while frontier:  # down the ownerReferences, breadth first
        uids = {uid_of(o) for o in frontier}
        frontier = [
            o
            for o in owned
            if uid_of(o) not in seen
            and any(r.get("uid") in uids for r in meta(o).get("ownerReferences") or ())
        ]
        for o in frontier:
            seen.add(uid_of(o))
        journey.objects.extend(frontier)
    pods = journey.of_kind("Pod")
    services = [root] if root.get("kind") == "Service" else []
    if root.get("kind") in ROUTE_KINDS:
        wanted = backend_services(root)
        services = [s for s in pools.get("Service", []) if meta(s).get("name") in wanted]
    services += [
        s for s in pools.get("Service", []) if uid_of(s) not in seen and any(_selects(s, p) for p in pods)
    ]
    for svc in services:
        if uid_of(svc) not in seen:
            seen.add(uid_of(svc))
            journey.objects.append(svc)
        if svc is root or root.get("kind") in ROUTE_KINDS:  # through the pods it selects
            for pod in pools.get("Pod", []):
                if uid_of(pod) not in seen and _selects(svc, pod):
                    seen.add(uid_of(pod))
                    journey.objects.append(pod)
    names = {meta(s).get("name") for s in services}
    for es in pools.get("EndpointSlice", []):
        if (meta(es).get("labels") or {}).get(SERVICE_NAME) in names and uid_of(es) not in seen:
            seen.add(uid_of(es))
            journey.objects.append(es)
    journey.events = [e for e in pools.get("Event", []) if (e.get("involvedObject") or {}).get("uid") in seen]
    return journey


async def _list(client: KubeClient, kind: Kind, namespace: str) -> list[Obj]:
    items, _ = await client.list(kind.collection(namespace))
    for item in items:
        item.setdefault("kind", kind.kind)
    return items


async def collect(client: KubeClient, kind: Kind, name: str, namespace: str) -> Journey:
    """Read the root and the namespace's pools (concurrently) and build its journey."""
    root_task = client.get(kind.path(namespace, name))
    lists = [_list(client, BY_KIND[k], namespace) for k in POOLS]
    root, *pools = await asyncio.gather(root_task, *lists)
    root.setdefault("kind", kind.kind)
    return build(root, dict(zip(POOLS, pools, strict=True)))
