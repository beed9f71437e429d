"""The local-path provisioner, as k3s ships rancher's local-path-provisioner: claims of a class whose
provisioner is `rancher.io/local-path` get a hostPath volume (type DirectoryOrCreate, so the node's agent
makes the folder on first mount) at `<root>/<pv>_<namespace>_<claim>` on the node the scheduler chose
(`volume.kubernetes.io/selected-node`), pinned there by required node affinity on kubernetes.io/hostname.
A Released volume of reclaim policy Delete is removed as k3s removes it: a helper pod on that node
(`helper-pod-delete-<pv>` in kube-system, the rig's busybox image) runs `rm -rf` on the folder, then
the volume is deleted.

Why a controller in the controller manager rather than its own component: it is one more loop over the
informers the manager already holds (claims, volumes, classes, nodes, pods), it gets the manager's
leader election, metrics and per-controller identity for free, and `--controllers '*,-local-path-
provisioner'` turns it off (k3s's `--disable local-storage`). It acts as its own account,
`local-path-provisioner-service-account`, with the rules of k3s's local-path-provisioner-role.
The `local-path` StorageClass itself is served from the API server's first start
(apiserver/kinds/storageclass.py), as k3s deploys its manifest.
"""

from __future__ import annotations

import logging
from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from kubeclient import volumes as vol
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL, WARNING
from kubeclient.informer import meta

log = logging.getLogger("controlplane.controllers")

Obj = dict[str, Any]
PROVISIONER = "rancher.io/local-path"
DEFAULT_ROOT = "/var/lib/pykubelet/local-path-provisioner"
DEFAULT_HELPER_IMAGE = "busybox:latest"
HELPER_NAMESPACE = "kube-system"
HOSTNAME = "kubernetes.io/hostname"
HELPER_PREFIX = "helper-pod-delete-"
CLAIM, VOLUME = "claim/", "volume/"
HELPER_POLL = 1.0


def volume_name(claim: Obj) -> str:
    """sig-storage-lib-external-provisioner's name for a claim's volume."""
    return f"pvc-{meta(claim).get('uid', '')}"


def volume_for(claim: Obj, sc: Obj, node: Obj, root: str) -> Obj:
    """The PersistentVolume for `claim` on `node`."""
    m = meta(claim)
    name = volume_name(claim)
    spec = claim.get("spec") or {}
    hostname = (meta(node).get("labels") or {}).get(HOSTNAME) or meta(node).get("name", "")
    path = f"{root.rstrip('/')}/{name}_{m.get('namespace', '')}_{m.get('name', '')}"
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {vol.PROVISIONED_BY: PROVISIONER}},
        "spec": {
            "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy") or "Delete",
            "storageClassName": meta(sc).get("name", ""),
            "accessModes": list(spec.get("accessModes") or []),
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "capacity": {
                "storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")
            },
            "claimRef": vol.claim_ref(claim),
            "hostPath": {"path": path, "type": "DirectoryOrCreate"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [hostname]}]}
                    ]
                }
            },
        },
    }


def volume_node(volume: Obj) -> str:
    """The node a local-path volume lives on (its node affinity's one hostname)."""
    required = ((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == HOSTNAME and expr.get("values"):
                return str(expr["values"][0])
    return ""


def delete_helper(volume: Obj, node: str, image: str, root: str) -> Obj:
    """The helper pod that removes a volume's folder on its node (k3s's teardown script: rm -rf)."""
    path = ((volume.get("spec") or {}).get("hostPath") or {}).get("path", "")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": HELPER_PREFIX + meta(volume).get("name", ""), "namespace": HELPER_NAMESPACE},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "helper-pod",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", 'rm -rf "$VOL_DIR"'],
                    "env": [{"name": "VOL_DIR", "value": path}],
                    "volumeMounts": [{"name": "data", "mountPath": root}],
                }
            ],
            "volumes": [{"name": "data", "hostPath": {"path": root, "type": "DirectoryOrCreate"}}],
        },
    }


class LocalPathProvisioner(Controller):
    name = "local-path-provisioner"
    account = "local-path-provisioner-service-account"
    workers = 2

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.root = str(ctx.option("local_path_root", DEFAULT_ROOT))
        self.image = str(ctx.option("local_path_helper_image", DEFAULT_HELPER_IMAGE))
        self.recorder = ctx.recorder(PROVISIONER)
        self._deleted: set[str] = set()  # UIDs of the volumes this provisioner deleted, until they are gone
        self.claims = ctx.informers.get("/api/v1/persistentvolumeclaims")
        self.volumes = ctx.informers.get("/api/v1/persistentvolumes")
        self.classes = ctx.informers.get("/apis/storage.k8s.io/v1/storageclasses")
        self.nodes = ctx.informers.get("/api/v1/nodes")
        self.pods = ctx.informers.get("/api/v1/pods")
        self.claims.add_handler(
            **self.handlers(lambda c: CLAIM + f"{meta(c).get('namespace')}/{meta(c).get('name')}")
        )
        self.volumes.add_handler(**self.handlers(lambda v: VOLUME + meta(v).get("name", "")))
        self.volumes.add_handler(on_delete=lambda v: self._deleted.discard(meta(v).get("uid", "")))
        self.pods.add_handler(**self.handlers(self._helper_key))

    @staticmethod
    def _helper_key(pod: Obj) -> str | None:
        m = meta(pod)
        name = str(m.get("name", ""))
        if m.get("namespace") == HELPER_NAMESPACE and name.startswith(HELPER_PREFIX):
            return VOLUME + name[len(HELPER_PREFIX) :]
        return None

    async def sync(self, key: str) -> None:
        if key.startswith(CLAIM):
            claim = self.claims.get(key[len(CLAIM) :])
            if claim is not None:
                await self.provision(claim)
        elif key.startswith(VOLUME):
            volume = self.volumes.get(key[len(VOLUME) :])
            if volume is not None:
                await self.reclaim(volume)

    # --- provisioning --------------------------------------------------------------------------------

    async def provision(self, claim: Obj) -> None:
        m = meta(claim)
        if (
            vol.annotations(claim).get(vol.STORAGE_PROVISIONER) != PROVISIONER
            or (claim.get("spec") or {}).get("volumeName")
            or m.get("deletionTimestamp")
            or self.volumes.get(volume_name(claim)) is not None
        ):
            return
        sc = self.classes.get(vol.claim_class(claim))
        if sc is None or sc.get("provisioner") != PROVISIONER:
            return
        node_name = vol.annotations(claim).get(vol.SELECTED_NODE, "")
        if not node_name:
            if sc.get("volumeBindingMode") == vol.WAIT_FOR_FIRST_CONSUMER:
                return  # the scheduler picks the node
            self.recorder.event(
                claim,
                WARNING,
                "ProvisioningFailed",
                f'failed to provision volume with StorageClass "{meta(sc).get("name")}": configuration error, '
                "no node was specified",
            )
            return
        node = self.nodes.get(node_name)
        if node is None:
            raise RuntimeError(
                f"claim {m.get('namespace')}/{m.get('name')}: selected node {node_name} not found"
            )
        self.recorder.event(
            claim,
            NORMAL,
            "Provisioning",
            f'External provisioner is provisioning volume for claim "{m.get("namespace")}/{m.get("name")}"',
        )
        body = volume_for(claim, sc, node, self.root)
        try:
            await self.client.create("/api/v1/persistentvolumes", body)
        except ApiError as err:
            if not err.already_exists:
                self.recorder.event(
                    claim,
                    WARNING,
                    "ProvisioningFailed",
                    f'failed to provision volume with StorageClass "{meta(sc).get("name")}": {err.message}',
                )
                raise
        self.recorder.event(
            claim,
            NORMAL,
            "ProvisioningSucceeded",
            f"Successfully provisioned volume {body['metadata']['name']}",
        )
        log.info(
            "provisioned claim=%s/%s volume=%s node=%s",
            m.get("namespace"),
            m.get("name"),
            volume_name(claim),
            node_name,
        )

    # --- deletion ------------------------------------------------------------------------------------

    async def reclaim(self, volume: Obj) -> None:
        spec = volume.get("spec") or {}
        if (
            vol.annotations(volume).get(vol.PROVISIONED_BY) != PROVISIONER
            or (volume.get("status") or {}).get("phase") != "Released"
            or spec.get("persistentVolumeReclaimPolicy") != "Delete"
            or meta(volume).get("deletionTimestamp")
            or meta(volume).get("uid") in self._deleted
        ):
            return
        name = meta(volume).get("name", "")
        helper = self.pods.get(f"{HELPER_NAMESPACE}/{HELPER_PREFIX}{name}")
        if helper is None:
            node = volume_node(volume)
            try:
                await self.client.create(
                    f"/api/v1/namespaces/{HELPER_NAMESPACE}/pods",
                    delete_helper(volume, node, self.image, self.root),
                )
            except ApiError as err:
                if not err.already_exists:
                    raise
            return  # the helper pod's progress brings the volume back
        phase = (helper.get("status") or {}).get("phase")
        if phase not in ("Succeeded", "Failed"):
            self.queue.add_after(VOLUME + name, HELPER_POLL * 5)
            return
        if phase == "Failed":
            await self._delete(f"/api/v1/namespaces/{HELPER_NAMESPACE}/pods/{HELPER_PREFIX}{name}")
            self.recorder.event(
                volume, WARNING, "VolumeFailedDelete", f"failed to delete volume {name}: helper pod failed"
            )
            raise RuntimeError(f"volume {name}: the delete helper pod failed")
        # The volume first, remembered, so the helper pod's deletion cannot start another helper from a
        # cache that has not yet seen the volume marked.
        await self._delete(vol.volume_path(name))
        self._deleted.add(meta(volume).get("uid", ""))
        await self._delete(f"/api/v1/namespaces/{HELPER_NAMESPACE}/pods/{HELPER_PREFIX}{name}")
        log.info("deleted volume=%s", name)

    async def _delete(self, path: str) -> None:
        try:
            await self.client.delete(path, {"gracePeriodSeconds": 0})
        except ApiError as err:
            if not err.not_found:
                raise
