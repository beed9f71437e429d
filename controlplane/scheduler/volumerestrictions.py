"""VolumeRestrictions, as upstream 1.32's plugin of that name decides it.

Two rules. A disk that two pods of one node may not share: the same GCE PD (unless every mount is
read-only), the same AWS EBS volume ID, the same iSCSI IQN or the same RBD image (monitors overlapping,
same pool and image) unless both are read-only: `node(s) had no available disk`. And a claim with the
ReadWriteOncePod access mode that some placed pod already uses anywhere in the cluster: every node then
answers `node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode`
(preemption may free it: the count is recomputed with the victims gone). PreFilter reads the pod's
claims: one that does not exist is upstream's `persistentvolumeclaim "x" not found`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.framework import FITS, ClusterView
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo
from kubeclient.informer import Informer

Obj = dict[str, Any]
DISK_CONFLICT = "node(s) had no available disk"
RWOP_CONFLICT = "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"


def _both_read_only(a: Obj, b: Obj) -> bool:
    return bool(a.get("readOnly")) and bool(b.get("readOnly"))


def disks_conflict(volume: Obj, other: Obj) -> bool:
    """Upstream's isVolumeConflict for one pair of volumes."""
    a, b = volume.get("gcePersistentDisk"), other.get("gcePersistentDisk")
    if isinstance(a, dict) and isinstance(b, dict):
        return a.get("pdName") == b.get("pdName") and not _both_read_only(a, b)
    a, b = volume.get("awsElasticBlockStore"), other.get("awsElasticBlockStore")
    if isinstance(a, dict) and isinstance(b, dict):
        return a.get("volumeID") == b.get("volumeID")
    a, b = volume.get("iscsi"), other.get("iscsi")
    if isinstance(a, dict) and isinstance(b, dict):
        return a.get("iqn") == b.get("iqn") and not _both_read_only(a, b)
    a, b = volume.get("rbd"), other.get("rbd")
    if isinstance(a, dict) and isinstance(b, dict):
        return (
            bool(set(a.get("monitors") or ()) & set(b.get("monitors") or ()))
            and (a.get("pool") or "rbd") == (b.get("pool") or "rbd")  # the API's default pool
            and a.get("image") == b.get("image")
            and not _both_read_only(a, b)
        )
    return False


def disk_conflict(pod: PodInfo, others: Sequence[PodInfo]) -> bool:
    return any(
        disks_conflict(v, ov) for v in pod.disk_volumes for other in others for ov in other.disk_volumes
    )


@dataclass
class RestrictionsState:
    """The pod's ReadWriteOncePod claims ("namespace/name") and how many placed pods use them."""

    claims: tuple[str, ...] = ()
    conflicts: int = 0


class VolumeRestrictions:
    name = "VolumeRestrictions"

    def __init__(self, claims: Informer) -> None:
        self.claims = claims
        self.state = RestrictionsState()
        self._rwop: dict[str, tuple[str, ...]] = {}  # pod uid -> its RWOP claims, from PreFilter

    def applies(self, pod: PodInfo) -> bool:
        return bool(pod.disk_volumes or pod.claims)

    def pre_filter(self, pod: PodInfo) -> str | None:
        rwop = []
        for name in pod.claims:
            claim = self.claims.get(f"{pod.namespace}/{name}")
            if claim is None:
                self._rwop.pop(pod.uid, None)
                return f'persistentvolumeclaim "{name}" not found'
            if READ_WRITE_ONCE_POD in ((claim.get("spec") or {}).get("accessModes") or ()):
                rwop.append(f"{pod.namespace}/{name}")
        self._rwop = {pod.uid: tuple(dict.fromkeys(rwop))}
        return None

    def prepare(self, pod: PodInfo, cluster: ClusterView) -> None:
        """Count the placed pods using each of the pod's ReadWriteOncePod claims (upstream's PreFilter
        state; at most one pod can hold such a claim)."""
        claims = self._rwop.get(pod.uid, ())
        conflicts = 0
        for key in claims:
            if any(n.claim_refs.get(key) for n in cluster.all_nodes):
                conflicts += 1
        self.state = RestrictionsState(claims, conflicts)

    # PreFilter extensions (preemption's what-if on one node): a victim gives its claims back.
    def save(self) -> RestrictionsState:
        return self.state

    def restore(self, saved: RestrictionsState, pod: PodInfo) -> None:
        self.state = RestrictionsState(saved.claims, saved.conflicts)

    def _update(self, other: PodInfo, delta: int) -> None:
        if self.state.claims:
            uses = sum(1 for c in other.claims if f"{other.namespace}/{c}" in self.state.claims)
            self.state.conflicts += delta * uses

    def add_pod(self, pod: PodInfo, other: PodInfo, node: NodeInfo) -> None:
        self._update(other, 1)

    def remove_pod(self, pod: PodInfo, other: PodInfo, node: NodeInfo) -> None:
        self._update(other, -1)

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        if pod.disk_volumes and disk_conflict(pod, [p for p in node.pods.values() if p.uid != pod.uid]):
            return (DISK_CONFLICT,)
        if self.state.conflicts > 0:
            return (RWOP_CONFLICT,)
        return FITS
