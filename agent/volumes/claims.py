"""PersistentVolumeClaim volumes: from the pod's claim to the bound PersistentVolume to a host folder, as
upstream's desired-state populator resolves them (getPVCExtractPV, getPVSpec) with its error texts. A
claim that is missing, being deleted or not yet bound, or a volume that does not point back at the claim,
keeps the pod waiting (the caller reports FailedMount and tries again on the next pass). The volume's
source must be one this node mounts by bind: hostPath (its type checked or created as for a pod's
hostPath) or local (the path must exist)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

Fetch = Callable[[str, str, str], Awaitable[dict[str, Any] | None]]
HostPath = Callable[[dict[str, Any], str], str]


class ClaimError(Exception):
    """The claim's volume cannot be used yet; the message is the populator's."""


async def resolve(fetch: Fetch, host_path: HostPath, namespace: str, volume: dict[str, Any]) -> str:
    """The host path the claim's bound volume is at (ClaimError when it cannot be used now)."""
    claim_name = volume["persistentVolumeClaim"].get("claimName", "")
    where = f"error processing PVC {namespace}/{claim_name}"
    claim = await fetch("PersistentVolumeClaim", namespace, claim_name)
    if claim is None:
        raise ClaimError(
            f'{where}: failed to fetch PVC from API server: persistentvolumeclaims "{claim_name}" not found'
        )
    if (claim.get("metadata") or {}).get("deletionTimestamp"):
        raise ClaimError(f"{where}: PVC is being deleted")
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
    if isinstance(spec.get("hostPath"), dict):
        return await asyncio.to_thread(host_path, spec["hostPath"], pv_name)
    if isinstance(spec.get("local"), dict):
        path = spec["local"].get("path", "")
        if not await asyncio.to_thread(os.path.exists, path):
            raise ClaimError(
                f'MountVolume.NewMounter initialization failed for volume "{pv_name}" : path "{path}" does not exist'
            )
        return str(path)
    kinds = [
        k for k in spec if isinstance(spec[k], dict) and k not in ("capacity", "claimRef", "nodeAffinity")
    ]
    raise ClaimError(
        f'MountVolume.SetUp failed for volume "{pv_name}" : volume type {kinds} is not supported by this node'
    )
