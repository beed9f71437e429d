"""The CSI external provisioner, as kubernetes-csi/external-provisioner does it beside a driver: a claim
whose class names this driver as provisioner (the PV controller put it in the claim's
`volume.kubernetes.io/storage-provisioner` annotation) gets CreateVolume on the driver's controller socket
(name `pvc-<claim uid>`, the requested bytes, the access modes as capabilities, the class's parameters
without the `csi.storage.k8s.io/` keys, the selected node's topology as accessibility requirement when
the class waits for the first consumer) and a PersistentVolume with the `csi` source, the driver's
accessible topology as node affinity and the finalizer that keeps it until the driver deleted it. A
Released volume of policy Delete that this driver made gets DeleteVolume, then goes. Upstream's events:
Provisioning, ProvisioningSucceeded, ProvisioningFailed, VolumeFailedDelete.

Where it runs: upstream runs it as a sidecar container beside the driver's controller plugin. Here it is
a controller of the controller manager, off by default, that a manager started beside the driver runs:
`pykubelet controller-manager --controllers csi-provisioner,csi-attacher --csi-address SOCKET
--leader-elect=false` (the rig and the tests start it so, next to the host-path driver).
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from kubeclient import volumes as vol
from kubeclient.csi.client import ACCESS_MODES, CSICallError, CSIClient, capability
from kubeclient.csi.pb import csi_pb2 as pb
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL, WARNING
from kubeclient.informer import meta

log = logging.getLogger("controlplane.controllers")

Obj = dict[str, Any]
CLAIM, VOLUME = "claim/", "volume/"
FINALIZER = "external-provisioner.volume.kubernetes.io/finalizer"
PREFIX = "csi.storage.k8s.io/"
FSTYPE = PREFIX + "fstype"
IDENTITY = "storage.kubernetes.io/csiProvisionerIdentity"


def volume_name(claim: Obj) -> str:
    return f"pvc-{meta(claim).get('uid', '')}"


def node_topology(node: Obj | None, csinode: Obj | None, driver: str) -> dict[str, str]:
    """The selected node's segment for the driver: its CSINode topology keys, valued from its labels."""
    keys: list[str] = []
    for entry in ((csinode or {}).get("spec") or {}).get("drivers") or []:
        if entry.get("name") == driver:
            keys = list(entry.get("topologyKeys") or [])
    labels = meta(node or {}).get("labels") or {}
    return {k: labels[k] for k in keys if k in labels}


def allowed_segments(sc: Obj) -> list[dict[str, str]]:
    """A class's allowedTopologies as CSI topology segments (upstream's flatten): each term's label
    expressions multiplied out, one segment per combination of their values."""
    out: list[dict[str, str]] = []
    for term in sc.get("allowedTopologies") or []:
        segments: list[dict[str, str]] = [{}]
        for expr in term.get("matchLabelExpressions") or []:
            segments = [{**seg, expr.get("key", ""): v} for seg in segments for v in expr.get("values") or []]
        out += [seg for seg in segments if seg and seg not in out]
    return out


def requirements(
    sc: Obj, selected: dict[str, str] | None
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """CreateVolume's requisite and preferred topology (external-provisioner without strict topology):
    the class's allowed topology, else the selected node's; the selected node's segment preferred first.
    A selected node outside the allowed topology is an error, as upstream's."""
    allowed = allowed_segments(sc)
    if not allowed:
        segment = [selected] if selected else []
        return segment, segment
    if selected and selected not in allowed:
        raise ValueError(f"topology {selected} from selected node is not in requisite: {allowed}")
    preferred = ([selected] if selected else []) + [a for a in allowed if a != selected]
    return allowed, preferred


def persistent_volume(claim: Obj, sc: Obj, driver: str, identity: str, created: pb.Volume) -> Obj:
    spec = claim.get("spec") or {}
    params = sc.get("parameters") or {}
    source: Obj = {
        "driver": driver,
        "volumeHandle": created.volume_id,
        "volumeAttributes": {**dict(created.volume_context), IDENTITY: identity},
    }
    if params.get(FSTYPE):
        source["fsType"] = params[FSTYPE]
    body: Obj = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": volume_name(claim),
            "annotations": {vol.PROVISIONED_BY: driver},
            "finalizers": [FINALIZER],
        },
        "spec": {
            "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy") or "Delete",
            "storageClassName": meta(sc).get("name", ""),
            "accessModes": list(spec.get("accessModes") or []),
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "capacity": {"storage": str(created.capacity_bytes or vol.requested_bytes(claim))},
            "claimRef": vol.claim_ref(claim),
            "csi": source,
        },
    }
    if sc.get("mountOptions"):
        body["spec"]["mountOptions"] = list(sc["mountOptions"])
    terms = [
        {
            "matchExpressions": [
                {"key": k, "operator": "In", "values": [v]} for k, v in sorted(t.segments.items())
            ]
        }
        for t in created.accessible_topology
        if t.segments
    ]
    if terms:
        body["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": terms}}
    return body


class CSIProvisioner(Controller):
    name = "csi-provisioner"
    account = "csi-provisioner"
    workers = 2

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.csi = CSIClient(str(ctx.option("csi_address", "")))
        self.driver = ""  # GetPluginInfo's name, asked once the first claim comes
        self.identity = ""
        self.recorder = ctx.recorder("csi-provisioner")
        self.claims = ctx.informers.get("/api/v1/persistentvolumeclaims")
        self.volumes = ctx.informers.get("/api/v1/persistentvolumes")
        self.classes = ctx.informers.get("/apis/storage.k8s.io/v1/storageclasses")
        self.nodes = ctx.informers.get("/api/v1/nodes")
        self.csinodes = ctx.informers.get("/apis/storage.k8s.io/v1/csinodes")
        self.claims.add_handler(
            **self.handlers(lambda c: CLAIM + f"{meta(c).get('namespace')}/{meta(c).get('name')}")
        )
        self.volumes.add_handler(**self.handlers(lambda v: VOLUME + meta(v).get("name", "")))

    async def _driver_name(self) -> str:
        if not self.driver:
            self.driver = await self.csi.plugin_name()
            # upstream's provisioner identity: <start time in ms>-<random>-<driver>
            self.identity = f"{int(time.time() * 1000)}-{random.randrange(10000)}-{self.driver}"
        return self.driver

    async def sync(self, key: str) -> None:
        driver = await self._driver_name()
        if key.startswith(CLAIM):
            claim = self.claims.get(key[len(CLAIM) :])
            if claim is not None:
                await self.provision(claim, driver)
        elif key.startswith(VOLUME):
            volume = self.volumes.get(key[len(VOLUME) :])
            if volume is not None:
                await self.delete(volume, driver)

    async def provision(self, claim: Obj, driver: str) -> None:
        m = meta(claim)
        notes = vol.annotations(claim)
        if (
            notes.get(vol.STORAGE_PROVISIONER) != driver
            or (claim.get("spec") or {}).get("volumeName")
            or m.get("deletionTimestamp")
            or self.volumes.get(volume_name(claim)) is not None
        ):
            return
        sc = self.classes.get(vol.claim_class(claim))
        if sc is None or sc.get("provisioner") != driver:
            return
        node_name = notes.get(vol.SELECTED_NODE, "")
        if sc.get("volumeBindingMode") == vol.WAIT_FOR_FIRST_CONSUMER and not node_name:
            return  # the scheduler picks the node first
        claim_id = f"{m.get('namespace')}/{m.get('name')}"
        sc_name = meta(sc).get("name", "")
        self.recorder.event(
            claim,
            NORMAL,
            "Provisioning",
            f'External provisioner is provisioning volume for claim "{claim_id}"',
        )
        params = {k: v for k, v in (sc.get("parameters") or {}).items() if not k.startswith(PREFIX)}
        caps = [
            capability(
                (sc.get("parameters") or {}).get(FSTYPE, ""),
                list(sc.get("mountOptions") or []),
                ACCESS_MODES.get(mode, 1),
            )
            for mode in (claim.get("spec") or {}).get("accessModes") or ["ReadWriteOnce"]
        ]
        selected = None
        if node_name:
            selected = node_topology(self.nodes.get(node_name), self.csinodes.get(node_name), driver) or None
        try:
            requisite, preferred = requirements(sc, selected)
        except ValueError as err:
            message = f'failed to provision volume with StorageClass "{sc_name}": error generating accessibility requirements: {err}'
            self.recorder.event(claim, WARNING, "ProvisioningFailed", message)
            raise
        try:
            created = await self.csi.create_volume(
                volume_name(claim), vol.requested_bytes(claim), caps, params, {}, requisite, preferred
            )
        except CSICallError as err:
            self.recorder.event(
                claim,
                WARNING,
                "ProvisioningFailed",
                f'failed to provision volume with StorageClass "{sc_name}": {err}',
            )
            raise
        body = persistent_volume(claim, sc, driver, self.identity, created)
        try:
            await self.client.create("/api/v1/persistentvolumes", body)
        except ApiError as err:
            if not err.already_exists:
                self.recorder.event(
                    claim,
                    WARNING,
                    "ProvisioningFailed",
                    f'failed to provision volume with StorageClass "{sc_name}": {err.message}',
                )
                raise
        self.recorder.event(
            claim,
            NORMAL,
            "ProvisioningSucceeded",
            f"Successfully provisioned volume {body['metadata']['name']}",
        )
        log.info("provisioned claim=%s volume=%s driver=%s", claim_id, body["metadata"]["name"], driver)

    async def delete(self, volume: Obj, driver: str) -> None:
        spec = volume.get("spec") or {}
        if vol.annotations(volume).get(vol.PROVISIONED_BY) != driver or not isinstance(spec.get("csi"), dict):
            return
        name = meta(volume).get("name", "")
        finalizers = meta(volume).get("finalizers") or []
        if (
            (volume.get("status") or {}).get("phase") == "Released"
            and spec.get("persistentVolumeReclaimPolicy") == "Delete"
            and not meta(volume).get("deletionTimestamp")
        ):
            try:
                await self.csi.delete_volume(spec["csi"].get("volumeHandle", ""), {})
            except CSICallError as err:
                self.recorder.event(volume, WARNING, "VolumeFailedDelete", str(err))
                raise
            await self._drop_finalizer(volume, finalizers)
            try:
                await self.client.delete(vol.volume_path(name))
            except ApiError as err:
                if not err.not_found:
                    raise
            log.info("deleted volume=%s driver=%s", name, driver)
        elif meta(volume).get("deletionTimestamp") and FINALIZER in finalizers:
            await self._drop_finalizer(volume, finalizers)  # deleted by hand: not ours to keep

    async def _drop_finalizer(self, volume: Obj, finalizers: list[str]) -> None:
        if FINALIZER not in finalizers:
            return
        patch = {
            "metadata": {
                "finalizers": [f for f in finalizers if f != FINALIZER],
                "resourceVersion": meta(volume).get("resourceVersion"),
            }
        }
        try:
            await self.client.patch(
                vol.volume_path(meta(volume).get("name", "")), patch, "application/merge-patch+json"
            )
        except ApiError as err:
            if not err.not_found:
                raise
