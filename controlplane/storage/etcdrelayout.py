"""An etcd store written by an older pykubelet, moved to upstream's key layout when the API server starts.

Before the kinds declared their etcd paths (Kind.etcd_prefix), the store kept eleven grouped resources
under their bucket names (`/registry/horizontalpodautoscalers.autoscaling/...`,
`/registry/apiservices.apiregistration.k8s.io/...`, `/registry/customresourcedefinitions.apiextensions.k8s.io/...`)
and every custom resource as `/registry/<plural>.<group>/...`, where kube-apiserver writes
`/registry/horizontalpodautoscalers/...`, `/registry/apiregistration.k8s.io/apiservices/...` and
`/registry/<group>/<plural>/...`. `relayout` moves what it finds in the old places before the watch cache
first lists the store. Each object moves in one transaction (EtcdStore.move_resource), so an interrupted
start or two API servers starting together neither lose nor double an object and a later start finds
nothing left to move; a moved object keeps its value and gets a newer revision, so resourceVersions only
grow. What moved is logged per resource.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from controlplane.storage.etcd import EtcdStore

log = logging.getLogger("controlplane.storage.etcdrelayout")

# Where the older layout kept a bucket, when not under the bucket's own name: the four historical names of
# kube-apiserver and the sixteen grouped resources it already wrote under their plural.
_LEGACY: dict[str, str] = {
    "nodes": "minions",
    "services": "services/specs",
    "endpoints": "services/endpoints",
    "replicationcontrollers": "controllers",
}
_LEGACY_GROUPED = (
    "deployments.apps",
    "replicasets.apps",
    "controllerrevisions.apps",
    "daemonsets.apps",
    "statefulsets.apps",
    "jobs.batch",
    "cronjobs.batch",
    "leases.coordination.k8s.io",
    "priorityclasses.scheduling.k8s.io",
    "runtimeclasses.node.k8s.io",
    "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
    "clusterroles.rbac.authorization.k8s.io",
    "clusterrolebindings.rbac.authorization.k8s.io",
    "endpointslices.discovery.k8s.io",
    "poddisruptionbudgets.policy",
)
_LEGACY.update({bucket: bucket.split(".", 1)[0] for bucket in _LEGACY_GROUPED})


def legacy_name(bucket: str) -> str:
    """Where the older layout kept `bucket` below --etcd-prefix."""
    return _LEGACY.get(bucket, bucket)


@dataclass(frozen=True)
class Moved:
    bucket: str
    old: str  # resource prefix below --etcd-prefix
    new: str
    objects: int
    kept: int  # left in the old place: the new place already held an object of that name


async def relayout(store: EtcdStore, buckets: Iterable[str]) -> list[Moved]:
    """Move each bucket's objects from the older layout's place to the store's layout's; the buckets whose
    place did not change are skipped. Returns what moved (nothing, on every start after the first)."""
    out = []
    for bucket in buckets:
        old, new = legacy_name(bucket), store.layout.name(bucket)
        if old == new:
            continue
        objects, kept = await store.move_resource(old, new)
        if objects or kept:
            out.append(Moved(bucket, old, new, objects, kept))
            log.info(
                "event=etcd-relayout resource=%s from=%s%s/ to=%s%s/ moved=%d kept=%d",
                bucket,
                store.prefix,
                old,
                store.prefix,
                new,
                objects,
                kept,
            )
            if kept:
                log.warning(
                    "event=etcd-relayout-conflict resource=%s kept=%d under %s%s/: the new place already "
                    "holds objects of those names",
                    bucket,
                    kept,
                    store.prefix,
                    old,
                )
    return out


__all__ = ["Moved", "legacy_name", "relayout"]
