"""The PersistentVolume controller (upstream's pkg/controller/volume/persistentvolume, --controllers name
`persistentvolume-binder`, account persistent-volume-binder): binds claims to volumes and tells volumes
whose claim is gone that they are Released.

A claim without a volume is matched (kubeclient.volumes.find_matching_volume: a volume pre-bound to it,
else the smallest Available one of its class that fits) unless its class binds WaitForFirstConsumer and
the scheduler has not chosen a node yet (event WaitForFirstConsumer). With no match, a claim of a class
is handed to the class's external provisioner through the storage-provisioner annotations (event
ExternalProvisioning), or gets ProvisioningFailed when the class does not exist. Binding is upstream's
four writes: the volume's claimRef, the volume's phase Bound, the claim's volumeName and
bind-completed annotation, the claim's phase Bound with the volume's capacity and access modes. A volume
whose claim is gone becomes Released; Retain keeps it so, Delete of a volume an external provisioner made
is that provisioner's to do. Writes are PUTs of the cached object (the role grants update, not patch);
a conflict retries the key. Unbound claims are looked at again every 15 s (upstream's resync period).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from kubeclient import volumes as vol
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL, WARNING
from kubeclient.informer import by_namespace, meta

log = logging.getLogger("controlplane.controllers")

Obj = dict[str, Any]
RESYNC = 15.0
COMPONENT = "persistentvolume-controller"
WAITING_FOR_CONSUMER = "waiting for first consumer to be created before binding"
EXTERNAL_PROVISIONING = (
    "Waiting for a volume to be created either by the external provisioner '{}' or manually by the system "
    "administrator. If volume creation is delayed, please verify that the provisioner is running and "
    "correctly registered."
)
CLAIM, VOLUME = "claim/", "volume/"


def _phase(obj: Obj) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


class PersistentVolumeController(Controller):
    name = "persistentvolume-binder"
    account = "persistent-volume-binder"
    workers = 1  # upstream runs one claim worker and one volume worker; one keeps binding free of races

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.resync = float(ctx.option("pv_resync_period", RESYNC))
        self.recorder = ctx.recorder(COMPONENT)
        self.volumes = ctx.informers.get("/api/v1/persistentvolumes")
        self.claims = ctx.informers.get(
            "/api/v1/persistentvolumeclaims", indexers={"namespace": by_namespace}
        )
        self.classes = ctx.informers.get("/apis/storage.k8s.io/v1/storageclasses")
        self.pods = ctx.informers.get("/api/v1/pods", indexers={"namespace": by_namespace})
        self.volumes.add_handler(**self.handlers(self._volume_keys))
        self.claims.add_handler(**self.handlers(self._claim_keys))
        self.classes.add_handler(on_add=lambda _sc: self._all_pending())

    # --- keys ----------------------------------------------------------------------------------------

    def handlers(self, keys: Any = None) -> dict[str, Any]:  # type: ignore[override]
        def add(obj: Obj) -> None:
            for k in keys(obj):
                self.queue.add(k)

        return {"on_add": add, "on_update": lambda _old, new: add(new), "on_delete": add}

    @staticmethod
    def _volume_keys(volume: Obj) -> list[str]:
        keys = [VOLUME + meta(volume).get("name", "")]
        ref = (volume.get("spec") or {}).get("claimRef")
        if ref:
            keys.append(f"{CLAIM}{ref.get('namespace', '')}/{ref.get('name', '')}")
        return keys

    @staticmethod
    def _claim_keys(claim: Obj) -> list[str]:
        m = meta(claim)
        keys = [f"{CLAIM}{m.get('namespace', '')}/{m.get('name', '')}"]
        name = (claim.get("spec") or {}).get("volumeName")
        if name:
            keys.append(VOLUME + name)
        return keys

    def _all_pending(self) -> None:
        for claim in self.claims.list():
            if _phase(claim) != "Bound":
                self.queue.add(self._claim_keys(claim)[0])

    async def sync(self, key: str) -> None:
        if key.startswith(CLAIM):
            claim = self.claims.get(key[len(CLAIM) :])
            if claim is not None:
                await self.sync_claim(copy.deepcopy(claim))
        elif key.startswith(VOLUME):
            volume = self.volumes.get(key[len(VOLUME) :])
            if volume is not None:
                await self.sync_volume(copy.deepcopy(volume))

    # --- claims --------------------------------------------------------------------------------------

    async def sync_claim(self, claim: Obj) -> None:
        if vol.annotations(claim).get(vol.BIND_COMPLETED) != "yes":
            await self._sync_unbound_claim(claim)
        else:
            await self._sync_bound_claim(claim)

    def _class(self, claim: Obj) -> Obj | None:
        name = vol.claim_class(claim)
        return self.classes.get(name) if name else None

    def _delay_binding(self, claim: Obj) -> bool:
        """IsDelayBindingMode (a class that does not exist does not delay)."""
        sc = self._class(claim)
        return sc is not None and sc.get("volumeBindingMode") == vol.WAIT_FOR_FIRST_CONSUMER

    async def _sync_unbound_claim(self, claim: Obj) -> None:
        name = (claim.get("spec") or {}).get("volumeName") or ""
        if not name:
            delay = self._delay_binding(claim)
            volume = vol.find_matching_volume(claim, self.volumes.list(), delay_binding=delay)
            if volume is not None:
                await self._bind(copy.deepcopy(volume), claim)
                return
            if delay and vol.SELECTED_NODE not in vol.annotations(claim):
                self._wait_for_consumer(claim)
            elif vol.claim_class(claim):
                await self._provision(claim)
            await self._claim_phase(claim, "Pending")
            self._again(claim)
            return
        volume = self.volumes.get(name)
        if volume is None:
            await self._claim_phase(claim, "Pending")
            self._again(claim)
            return
        ref = (volume.get("spec") or {}).get("claimRef")
        if not ref or vol.is_bound_to_claim(volume, claim):
            await self._bind(copy.deepcopy(volume), claim)
            return
        self.recorder.event(
            claim, WARNING, "FailedBinding", f'volume "{name}" already bound to a different claim.'
        )
        await self._claim_phase(claim, "Pending")
        self._again(claim)

    async def _sync_bound_claim(self, claim: Obj) -> None:
        name = (claim.get("spec") or {}).get("volumeName") or ""
        if not name:
            await self._lost(
                claim, "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!"
            )
            return
        volume = self.volumes.get(name)
        if volume is None:
            await self._lost(claim, "Bound claim has lost its PersistentVolume. Data on the volume is lost!")
            return
        ref = (volume.get("spec") or {}).get("claimRef")
        if not ref or vol.is_bound_to_claim(volume, claim):
            await self._bind(copy.deepcopy(volume), claim)
            return
        self.recorder.event(
            claim,
            WARNING,
            "FailedBinding",
            "Two claims are bound to the same volume, this one is bound incorrectly",
        )
        await self._claim_phase(claim, "Lost")

    async def _lost(self, claim: Obj, message: str) -> None:
        if _phase(claim) != "Lost":
            await self._claim_phase(claim, "Lost")
            self.recorder.event(claim, WARNING, "ClaimLost", message)

    def _again(self, claim: Obj) -> None:
        self.queue.add_after(self._claim_keys(claim)[0], self.resync)

    def _wait_for_consumer(self, claim: Obj) -> None:
        """emitEventForUnboundDelayBindingClaim: which pods, if any, wait for the scheduler."""
        m = meta(claim)
        waiting = sorted(
            meta(p).get("name", "")
            for p in self.pods.by_index("namespace", m.get("namespace", ""))
            if m.get("name") in vol.claim_names(p) and not (p.get("spec") or {}).get("nodeName")
        )
        if not waiting:
            self.recorder.event(claim, NORMAL, "WaitForFirstConsumer", WAITING_FOR_CONSUMER)
        elif len(waiting) == 1:
            self.recorder.event(
                claim, NORMAL, "WaitForPodScheduled", f"waiting for pod {waiting[0]} to be scheduled"
            )
        else:
            self.recorder.event(
                claim, NORMAL, "WaitForPodScheduled", f"waiting for pods {','.join(waiting)} to be scheduled"
            )

    async def _provision(self, claim: Obj) -> None:
        """provisionClaim for an external provisioner: name it on the claim and wait for the volume."""
        name = vol.claim_class(claim)
        sc = self.classes.get(name)
        if sc is None:
            self.recorder.event(
                claim, WARNING, "ProvisioningFailed", f'storageclass.storage.k8s.io "{name}" not found'
            )
            return
        provisioner = str(sc.get("provisioner") or "")
        notes = vol.annotations(claim)
        if (
            notes.get(vol.STORAGE_PROVISIONER) != provisioner
            or notes.get(vol.BETA_STORAGE_PROVISIONER) != provisioner
        ):
            m = claim.setdefault("metadata", {})
            m.setdefault("annotations", {}).update(
                {vol.STORAGE_PROVISIONER: provisioner, vol.BETA_STORAGE_PROVISIONER: provisioner}
            )
            updated = await self.client.replace(vol.claim_path(m["namespace"], m["name"]), claim)
            claim.clear()
            claim.update(updated)
        self.recorder.event(claim, NORMAL, "ExternalProvisioning", EXTERNAL_PROVISIONING.format(provisioner))

    async def _claim_phase(self, claim: Obj, phase: str, volume: Obj | None = None) -> Obj:
        status = claim.setdefault("status", {})
        want: Obj = {"phase": phase}
        if volume is not None:
            spec = volume.get("spec") or {}
            want["accessModes"] = spec.get("accessModes") or []
            # Only a claim becoming Bound takes the volume's capacity (upstream's updateClaimStatus): a
            # bound claim's capacity lags its volume's during an expansion until the node finishes it.
            if status.get("phase") != phase:
                want["capacity"] = dict(spec.get("capacity") or {})
        if all(status.get(k) == v for k, v in want.items()):
            return claim
        status.update(want)
        m = claim["metadata"]
        return await self.client.replace(vol.claim_path(m["namespace"], m["name"]) + "/status", claim)

    # --- binding -------------------------------------------------------------------------------------

    async def _bind(self, volume: Obj, claim: Obj) -> None:
        """bind(): volume claimRef, volume Bound, claim volumeName, claim Bound."""
        vm, cm = volume["metadata"], claim["metadata"]
        spec = volume.setdefault("spec", {})
        ref = spec.get("claimRef")
        if not ref or ref.get("uid") != cm.get("uid") or ref.get("name") != cm.get("name"):
            if not ref:
                vm.setdefault("annotations", {})[vol.BOUND_BY_CONTROLLER] = "yes"
            spec["claimRef"] = vol.claim_ref(claim)
            volume = await self.client.replace(vol.volume_path(vm["name"]), volume)
        if _phase(volume) != "Bound":
            volume.setdefault("status", {})["phase"] = "Bound"
            volume["status"].pop("message", None)
            volume["status"].pop("reason", None)
            volume = await self.client.replace(vol.volume_path(vm["name"]) + "/status", volume)
        notes = cm.setdefault("annotations", {})
        claim_spec = claim.setdefault("spec", {})
        if claim_spec.get("volumeName") != vm["name"] or notes.get(vol.BIND_COMPLETED) != "yes":
            if not claim_spec.get("volumeName"):
                notes[vol.BOUND_BY_CONTROLLER] = "yes"
            claim_spec["volumeName"] = vm["name"]
            notes[vol.BIND_COMPLETED] = "yes"
            claim = await self.client.replace(vol.claim_path(cm["namespace"], cm["name"]), claim)
        await self._claim_phase(claim, "Bound", volume)
        log.info("bound claim=%s/%s volume=%s", cm["namespace"], cm["name"], vm["name"])

    # --- volumes -------------------------------------------------------------------------------------

    async def _volume_phase(self, volume: Obj, phase: str, reason: str = "", message: str = "") -> None:
        status = volume.setdefault("status", {})
        if status.get("phase") == phase and status.get("message", "") == message:
            return
        status.update({"phase": phase})
        for k, v in (("reason", reason), ("message", message)):
            if v:
                status[k] = v
            else:
                status.pop(k, None)
        await self.client.replace(vol.volume_path(volume["metadata"]["name"]) + "/status", volume)

    async def sync_volume(self, volume: Obj) -> None:
        spec = volume.get("spec") or {}
        ref = spec.get("claimRef")
        if not ref:
            await self._volume_phase(volume, "Available")
            return
        claim = self.claims.get(f"{ref.get('namespace', '')}/{ref.get('name', '')}")
        if not ref.get("uid"):
            await self._volume_phase(volume, "Available")  # pre-bound, the claim's sync binds it
            return
        if claim is not None and meta(claim).get("uid") != ref.get("uid"):
            claim = None
        if claim is None:
            if _phase(volume) not in ("Released", "Failed"):
                await self._volume_phase(volume, "Released")
                volume = copy.deepcopy(self.volumes.get(volume["metadata"]["name"]) or volume)
            await self._reclaim(volume)
            return
        bound_to = (claim.get("spec") or {}).get("volumeName") or ""
        if not bound_to:
            self.queue.add(self._claim_keys(claim)[0])  # the claim's sync finishes the binding
        elif bound_to == volume["metadata"]["name"]:
            await self._volume_phase(volume, "Bound")
        elif vol.annotations(volume).get(vol.BOUND_BY_CONTROLLER) == "yes":
            await self._unbind(volume)

    async def _unbind(self, volume: Obj) -> None:
        """unbindVolume: a claim bound elsewhere frees a volume this controller had bound to it."""
        volume["spec"].pop("claimRef", None)
        (volume["metadata"].get("annotations") or {}).pop(vol.BOUND_BY_CONTROLLER, None)
        updated = await self.client.replace(vol.volume_path(volume["metadata"]["name"]), volume)
        await self._volume_phase(updated, "Available")

    async def _reclaim(self, volume: Obj) -> None:
        policy = (volume.get("spec") or {}).get("persistentVolumeReclaimPolicy") or "Retain"
        if policy == "Retain" or _phase(volume) == "Failed":
            return
        if policy == "Delete" and vol.annotations(volume).get(vol.PROVISIONED_BY):
            return  # an external provisioner's volume: it deletes it
        name = volume["metadata"]["name"]
        if policy == "Delete":
            reason, message = (
                "VolumeFailedDelete",
                f'error getting deleter volume plugin for volume "{name}": no deletable volume plugin matched',
            )
        else:
            reason, message = "VolumeFailedRecycle", f'No recycler plugin found for the volume "{name}"'
        self.recorder.event(volume, WARNING, reason, message)
        try:
            await self._volume_phase(volume, "Failed", message=message)
        except ApiError as err:
            if not err.not_found:
                raise
