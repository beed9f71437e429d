"""PersistentVolumeClaim volumes: from the pod's claim to the bound PersistentVolume to a host folder, as
upstream's desired-state populator resolves them (getPVCExtractPV, getPVSpec) with its error texts. A
claim that is missing, being deleted or not yet bound, or a volume that does not point back at the claim,
keeps the pod waiting (the caller reports FailedMount and tries again on the next pass). The volume's
source is set up by bind for hostPath (its type checked or created as for a pod's hostPath) and local
(the path must exist); any other source goes to the persistent-volume plugin registered for it (csi:
agent/volumes/csi.py).

A local volume's figures are those of the file system holding its path (upstream's local plugin
measures its mount with statfs), named by the pod's volume and the claim behind it, for the Summary and
kubelet_volume_stats_*: a record of the pod's local volumes is kept in the pod's folder, at
kubernetes.io~local-volume/<pv>, where upstream's kubelet mounts them. A hostPath volume reports no
figures (upstream's hostPath plugin has no metrics)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from agent.volumes.hostpath import host_path
from agent.volumes.plugin import PluginBase, ReadyVolume, VolumeError, VolumeHost, VolumeUsage
from kubeclient.volumes import ephemeral_claim_name

Fetch = Callable[[str, str, str], Awaitable[dict[str, Any] | None]]
LOCAL_FOLDER = "kubernetes.io~local-volume"
LOCAL_RECORD = "local.json"


class ClaimError(Exception):
    """The claim's volume cannot be used yet; the message is the populator's."""


class PersistentSource(Protocol):
    """A PersistentVolume source this node sets up itself (not by bind): `field` is its spec field."""

    field: str

    async def set_up_persistent(
        self, host: VolumeHost, pod: dict[str, Any], volume: str, pv: dict[str, Any], read_only: bool
    ) -> str:
        """The host folder to bind into containers (ClaimError to wait and retry)."""
        ...

    async def expand_persistent(self, host: VolumeHost, pod: dict[str, Any], volume: str, claim: str) -> None:
        """Finish the expansion the claim `claim` behind the pod's volume `volume` waits for, if any."""
        ...


class ClaimPlugin(PluginBase):
    kind = "persistentVolumeClaim"

    def __init__(self, sources: Mapping[str, PersistentSource] | None = None) -> None:
        self.sources = dict(sources or {})

    async def set_up(self, host: VolumeHost, pod: dict[str, Any], volume: dict[str, Any]) -> ReadyVolume:
        return await self.set_up_claim(host, pod, volume, volume[self.kind])

    async def set_up_claim(
        self,
        host: VolumeHost,
        pod: dict[str, Any],
        volume: dict[str, Any],
        source: dict[str, Any],
        owner: str = "",
    ) -> ReadyVolume:
        """The claim `source` names, ready; `owner`: the uid that must own the claim (an ephemeral one)."""
        read_only = bool(source.get("readOnly"))
        pv = await bound_volume(
            host.fetch, pod["metadata"]["namespace"], source, owner, pod["metadata"].get("name", "")
        )
        spec = pv.get("spec") or {}
        for field, persistent in self.sources.items():
            if isinstance(spec.get(field), dict):
                read_only = read_only or bool(spec[field].get("readOnly"))
                path = await persistent.set_up_persistent(host, pod, volume["name"], pv, read_only)
                return ReadyVolume(volume["name"], self.kind, path, read_only)
        path = await bind_path(pv)
        if isinstance(spec.get("local"), dict):
            record = {"volume": volume["name"], "path": path, "namespace": pod["metadata"]["namespace"]}
            record["claim"] = source.get("claimName", "")
            folder = host.pod_volumes_dir(pod["metadata"]["uid"]) / LOCAL_FOLDER / pv["metadata"]["name"]
            await asyncio.to_thread(_write_record, folder, record)
        return ReadyVolume(volume["name"], self.kind, path, read_only)

    async def stats(self, host: VolumeHost, uid: str) -> list[VolumeUsage]:
        """The pod's local volumes, each measured as the file system holding its path (statfs)."""
        return await asyncio.to_thread(_local_usage, host.pod_volumes_dir(uid) / LOCAL_FOLDER)

    async def refresh(self, host: VolumeHost, pod: dict[str, Any], volume: dict[str, Any]) -> bool:
        await self.expand(host, pod, volume["name"], (volume.get(self.kind) or {}).get("claimName", ""))
        return False

    async def expand(self, host: VolumeHost, pod: dict[str, Any], volume: str, claim: str) -> None:
        """On the pod's sync, each persistent source that expands volumes on the node (CSI's
        NodeExpandVolume) finishes an expansion the claim waits for, as upstream's kubelet does when it
        reprocesses a pod's volumes."""
        for source in self.sources.values():
            await source.expand_persistent(host, pod, volume, claim)


def _write_record(folder: Path, record: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / LOCAL_RECORD
    if not target.exists():
        target.write_text(json.dumps(record))


def _local_usage(folder: Path) -> list[VolumeUsage]:
    """upstream's MetricsStatFS on each recorded local volume: capacity, available and used bytes
    ((blocks - free blocks) x fragment size) and the inodes of the file system holding its path."""
    out = []
    for record_file in sorted(folder.glob(f"*/{LOCAL_RECORD}")):
        try:
            record = json.loads(record_file.read_text())
            st = os.statvfs(record["path"])
        except (OSError, ValueError, KeyError):
            continue
        out.append(
            VolumeUsage(
                record["volume"],
                f"{LOCAL_FOLDER}/{record_file.parent.name}",
                time.time(),
                st.f_blocks * st.f_frsize,
                st.f_bavail * st.f_frsize,
                (st.f_blocks - st.f_bfree) * st.f_frsize,
                st.f_files,
                st.f_ffree,
                st.f_files - st.f_ffree,
                (record["namespace"], record["claim"]),
            )
        )
    return out


async def bound_volume(
    fetch: Fetch, namespace: str, source: dict[str, Any], owner: str = "", pod_name: str = ""
) -> dict[str, Any]:
    """The PersistentVolume bound to the claim `source` names (ClaimError when it cannot be used now);
    with `owner`, the claim must be controlled by that pod (a generic ephemeral volume's claim)."""
    claim_name = source.get("claimName", "")
    where = f"error processing PVC {namespace}/{claim_name}"
    claim = await fetch("PersistentVolumeClaim", namespace, claim_name)
    if claim is None:
        raise ClaimError(
            f'{where}: failed to fetch PVC from API server: persistentvolumeclaims "{claim_name}" not found'
        )
    if (claim.get("metadata") or {}).get("deletionTimestamp"):
        raise ClaimError(f"{where}: PVC is being deleted")
    if owner and not any(
        ref.get("controller") and ref.get("uid") == owner
        for ref in (claim.get("metadata") or {}).get("ownerReferences") or []
    ):
        raise ClaimError(
            f"{where}: PVC {namespace}/{claim_name} was not created for pod {namespace}/{pod_name} (pod is not owner)"
        )
    if (claim.get("status") or {}).get("phase") != "Bound":
        raise ClaimError(f"{where}: PVC is not bound")
    pv_name = (claim.get("spec") or {}).get("volumeName") or ""
    if not pv_name:
        raise ClaimError(f"{where}: PVC has empty pvc.Spec.VolumeName")
    pv = await fetch("PersistentVolume", "", pv_name)
    if pv is None:
        raise ClaimError(
            f'{where}: failed to fetch PV {pv_name} from API server: persistentvolumes "{pv_name}" not found'
        )
    spec = pv.get("spec") or {}
    ref = spec.get("claimRef")
    if not ref:
        raise ClaimError(
            f"{where}: found PV object {pv_name} but it has a nil pv.Spec.ClaimRef indicating it is not yet "
            "bound to the claim"
        )
    uid = (claim.get("metadata") or {}).get("uid", "")
    if ref.get("uid") != uid:
        raise ClaimError(
            f"{where}: found PV object {pv_name} but its pv.Spec.ClaimRef.UID {ref.get('uid', '')} does not "
            f"point to claim.UID {uid}"
        )
    return pv


async def bind_path(pv: dict[str, Any]) -> str:
    """The host path of a hostPath or local PersistentVolume."""
    pv_name = pv["metadata"]["name"]
    spec = pv.get("spec") or {}
    if isinstance(spec.get("hostPath"), dict):
        return await asyncio.to_thread(host_path, spec["hostPath"], pv_name)
    if isinstance(spec.get("local"), dict):
        path = spec["local"].get("path", "")
        if not await asyncio.to_thread(os.path.exists, path):
            raise VolumeError(  # the mount operation's own FailedMount, not the populator's
                f'MountVolume.NewMounter initialization failed for volume "{pv_name}" : path "{path}" does not exist'
            )
        return str(path)
    kinds = [
        k for k in spec if isinstance(spec[k], dict) and k not in ("capacity", "claimRef", "nodeAffinity")
    ]
    raise ClaimError(
        f'MountVolume.SetUp failed for volume "{pv_name}" : volume type {kinds} is not supported by this node'
    )


class EphemeralPlugin(PluginBase):
    """A generic ephemeral volume: the claim `<pod>-<volume>` the ephemeral volume controller made from the
    template, owned by the pod, then set up as any claim (the pod waits until it exists and is bound)."""

    kind = "ephemeral"

    def __init__(self, claims: ClaimPlugin) -> None:
        self.claims = claims

    async def set_up(self, host: VolumeHost, pod: dict[str, Any], volume: dict[str, Any]) -> ReadyVolume:
        source = {"claimName": ephemeral_claim_name(pod, volume)}
        ready = await self.claims.set_up_claim(
            host, pod, volume, source, owner=pod["metadata"].get("uid", "")
        )
        return ReadyVolume(ready.name, self.kind, ready.host_path, ready.read_only)

    async def refresh(self, host: VolumeHost, pod: dict[str, Any], volume: dict[str, Any]) -> bool:
        await self.claims.expand(host, pod, volume["name"], ephemeral_claim_name(pod, volume))
        return False
