"""At start, an etcd store an older pykubelet wrote is moved to the served kinds' key layout.

The kinds say where etcd holds them (Kind.etcd_prefix; kindtable.KindTable.etcd_layout). Before the watch
cache first lists the store, every built-in bucket is moved from the older layout's place
(storage/etcdrelayout.py), then the custom resources of every CustomResourceDefinition found (their
buckets are known only from the stored CRDs).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from controlplane.storage.etcdrelayout import Moved, relayout

if TYPE_CHECKING:
    from controlplane.apiserver.kindtable import KindTable
    from controlplane.storage.etcd import EtcdStore

CRDS = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")


async def relayout_store(store: EtcdStore, table: KindTable) -> list[Moved]:
    moved = await relayout(store, table.stored_buckets())
    crds = table.by_path(*CRDS)
    if crds is None:
        return moved
    found, _, _ = await store.list(crds.prefix(""))
    buckets: dict[str, None] = {}
    for kv in found:
        crd = json.loads(kv.value)
        spec = crd.get("spec") or {}
        accepted = (crd.get("status") or {}).get("acceptedNames") or {}
        for plural in ((spec.get("names") or {}).get("plural"), accepted.get("plural")):
            if plural and spec.get("group"):
                buckets[f"{plural}.{spec['group']}"] = None
    return moved + await relayout(store, buckets)


__all__ = ["relayout_store"]
