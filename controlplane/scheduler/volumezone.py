"""VolumeZone, as upstream 1.32's plugin of that name decides it: the zone and region labels of the
persistent volumes a pod's claims are bound to must match the node's.

PreFilter collects, per bound volume, its `topology.kubernetes.io/zone|region` (and the beta
`failure-domain.beta.kubernetes.io/*`) labels; a value may list several zones joined by `__`. A claim
still waiting for its first consumer is skipped (VolumeBinding places it). A node without any of these
labels fits (a single-zone cluster); otherwise each label must be there (a beta key is also looked up
under its GA name) with one of the listed values, else `node(s) had no available volume zone`, which
preemption cannot fix. Missing objects give upstream's PreFilter texts (`persistentvolume "x" not
found`, ...). The volume's nodeAffinity is VolumeBinding's business, as upstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.framework import FITS
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo
from kubeclient import volumes as vol
from kubeclient.informer import Informer

Obj = dict[str, Any]
ZONE_CONFLICT = "node(s) had no available volume zone"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
TOPOLOGY_LABELS = (BETA_ZONE, BETA_REGION, ZONE, REGION)
GA_LABEL = {BETA_ZONE: ZONE, BETA_REGION: REGION}
MULTI_ZONE_DELIMITER = "__"


@dataclass(frozen=True)
class VolumeTopology:
    volume: str
    key: str
    values: frozenset[str]


def zones(value: str) -> frozenset[str] | None:
    """A label's zones (`a__b`), or None when one is empty (upstream then ignores the label)."""
    out = [z.strip() for z in value.split(MULTI_ZONE_DELIMITER)]
    return None if any(not z for z in out) else frozenset(out)


def volume_topologies(pv: Obj) -> list[VolumeTopology]:
    labels = (pv.get("metadata") or {}).get("labels") or {}
    out = []
    for key in TOPOLOGY_LABELS:
        if key in labels:
            values = zones(str(labels[key]))
            if values is not None:
                out.append(VolumeTopology(str(pv["metadata"].get("name", "")), key, values))
    return out


class VolumeZone:
    name = "VolumeZone"

    def __init__(self, claims: Informer, volumes: Informer, classes: Informer) -> None:
        self.claims, self.volumes, self.classes = claims, volumes, classes
        self._topologies: dict[str, list[VolumeTopology]] = {}  # pod uid -> from PreFilter

    def applies(self, pod: PodInfo) -> bool:
        return bool(pod.claims)

    def topologies(self, pod: PodInfo) -> list[VolumeTopology] | str:
        """The pod's bound volumes' topology labels, or upstream's PreFilter rejection."""
        out: list[VolumeTopology] = []
        for name in pod.claims:
            if not name:
                return "PersistentVolumeClaim had no name"
            claim = self.claims.get(f"{pod.namespace}/{name}")
            if claim is None:
                return f'persistentvolumeclaim "{name}" not found'
            pv_name = (claim.get("spec") or {}).get("volumeName") or ""
            if not pv_name:
                class_name = vol.claim_class(claim)
                if not class_name:
                    return "PersistentVolumeClaim had no pv name and storageClass name"
                sc = self.classes.get(class_name)
                if sc is None:
                    return f'storageclass.storage.k8s.io "{class_name}" not found'
                mode = sc.get("volumeBindingMode")
                if mode is None:
                    return f'VolumeBindingMode not set for StorageClass "{class_name}"'
                if mode == vol.WAIT_FOR_FIRST_CONSUMER:
                    continue
                return "PersistentVolume had no name"
            pv = self.volumes.get(pv_name)
            if pv is None:
                return f'persistentvolume "{pv_name}" not found'
            out.extend(volume_topologies(pv))
        return out

    def pre_filter(self, pod: PodInfo) -> str | None:
        found = self.topologies(pod)
        if isinstance(found, str):
            self._topologies.pop(pod.uid, None)
            return found
        self._topologies = {pod.uid: found}
        return None

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        wanted = self._topologies.get(pod.uid)
        if not wanted or node.facts is None:
            return FITS
        labels = node.facts.labels
        if not any(key in labels for key in TOPOLOGY_LABELS):
            return FITS  # a node without zone labels: a single-zone cluster
        for topology in wanted:
            value = labels.get(topology.key)
            if value is None:
                value = labels.get(GA_LABEL.get(topology.key, topology.key))
            if value is None or value not in topology.values:
                return (ZONE_CONFLICT,)
        return FITS
