"""NodeVolumeLimits for CSI volumes, as upstream's nodevolumelimits CSILimits filter: a node whose CSINode
gives a driver an allocatable count takes a pod only while the distinct volumes of that driver its pods
use (through claims, generic ephemeral ones included, and inline CSI volumes) plus the pod's new ones stay
within the count; otherwise `node(s) exceed max volume count`. A claim not bound yet counts once, as
upstream counts a pending volume of the claim's class provisioner."""

from __future__ import annotations

from typing import Any

from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo
from kubeclient import volumes as vol
from kubeclient.informer import Informer

Obj = dict[str, Any]
MAX_VOLUME_COUNT = "node(s) exceed max volume count"
FITS: tuple[str, ...] = ()


class NodeVolumeLimits:
    name = "NodeVolumeLimits"

    def __init__(self, claims: Informer, volumes: Informer, classes: Informer, csinodes: Informer) -> None:
        self.claims, self.volumes, self.classes, self.csinodes = claims, volumes, classes, csinodes

    def applies(self, pod: PodInfo) -> bool:
        volumes = (pod.obj.get("spec") or {}).get("volumes") or []
        return bool(vol.claim_names(pod.obj)) or any(isinstance(v.get("csi"), dict) for v in volumes)

    def csi_volumes(self, pod: Obj) -> dict[str, set[str]]:
        """driver -> the ids of the pod's CSI volumes (a volume handle, or the claim for an unbound one)."""
        out: dict[str, set[str]] = {}
        namespace = (pod.get("metadata") or {}).get("namespace", "")
        for name in vol.claim_names(pod):
            claim = self.claims.get(f"{namespace}/{name}")
            if claim is None:
                continue
            pv = self.volumes.get((claim.get("spec") or {}).get("volumeName") or "")
            source = ((pv or {}).get("spec") or {}).get("csi")
            if isinstance(source, dict):
                out.setdefault(source.get("driver", ""), set()).add(source.get("volumeHandle", ""))
            elif pv is None:
                sc = self.classes.get(vol.claim_class(claim)) if vol.claim_class(claim) else None
                if sc is not None:
                    out.setdefault(sc.get("provisioner", ""), set()).add(f"claim:{namespace}/{name}")
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            if isinstance(volume.get("csi"), dict):
                uid = (pod.get("metadata") or {}).get("uid", "")
                out.setdefault(volume["csi"].get("driver", ""), set()).add(
                    f"inline:{uid}/{volume.get('name')}"
                )
        return out

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        wanted = self.csi_volumes(pod.obj)
        if not wanted:
            return FITS
        csinode = self.csinodes.get(node.name)
        limits = {
            d.get("name", ""): int((d.get("allocatable") or {})["count"])
            for d in ((csinode or {}).get("spec") or {}).get("drivers") or []
            if (d.get("allocatable") or {}).get("count") is not None
        }
        if not limits:
            return FITS
        used: dict[str, set[str]] = {}
        for other in node.pods.values():
            if other.uid == pod.uid:
                continue
            for driver, ids in self.csi_volumes(other.obj).items():
                used.setdefault(driver, set()).update(ids)
        for driver, ids in wanted.items():
            limit = limits.get(driver)
            if limit is not None and len(used.get(driver, set()) | ids) > limit:
                return (MAX_VOLUME_COUNT,)
        return FITS
