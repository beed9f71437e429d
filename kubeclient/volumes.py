"""Persistent-volume rules the PV controller, the scheduler's volume binding, the provisioners and the
agent share (upstream keeps them in k8s.io/component-helpers/storage/volume, a client-side library for
the same reason): the annotations of the binding protocol, a claim's and a volume's class, whether a
volume is bound to a claim, a volume's node affinity against a node, and FindMatchingVolume (the smallest
Available volume that fits a claim). Pure functions on JSON dicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubeclient.nodeaffinity import node_selector_matches
from kubeclient.quantity import Quantity, QuantityError
from kubeclient.selectors import SelectorError, from_label_selector

Obj = dict[str, Any]

BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
BETA_STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def annotations(obj: Obj) -> Mapping[str, str]:
    return _meta(obj).get("annotations") or {}


def claim_class(claim: Obj) -> str:
    """GetPersistentVolumeClaimClass: the beta annotation first, then spec.storageClassName."""
    if BETA_CLASS in annotations(claim):
        return annotations(claim)[BETA_CLASS]
    return (claim.get("spec") or {}).get("storageClassName") or ""


def volume_class(volume: Obj) -> str:
    """GetPersistentVolumeClass."""
    if BETA_CLASS in annotations(volume):
        return annotations(volume)[BETA_CLASS]
    return (volume.get("spec") or {}).get("storageClassName") or ""


def storage_bytes(text: Any) -> int:
    try:
        return Quantity.parse(text).value() if text is not None else 0
    except QuantityError:
        return 0


def requested_bytes(claim: Obj) -> int:
    return storage_bytes(
        (((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
    )


def capacity_bytes(volume: Obj) -> int:
    return storage_bytes(((volume.get("spec") or {}).get("capacity") or {}).get("storage"))


def is_bound_to_claim(volume: Obj, claim: Obj) -> bool:
    """IsVolumeBoundToClaim: claimRef names the claim (and its UID, when the ref has one)."""
    ref = (volume.get("spec") or {}).get("claimRef")
    if not ref:
        return False
    meta = _meta(claim)
    if ref.get("name") != meta.get("name") or ref.get("namespace") != meta.get("namespace"):
        return False
    return not ref.get("uid") or ref.get("uid") == meta.get("uid")


def access_modes_fit(claim: Obj, volume: Obj) -> bool:
    """CheckAccessModes: every mode the claim asks for, the volume offers."""
    offered = set((volume.get("spec") or {}).get("accessModes") or [])
    return set((claim.get("spec") or {}).get("accessModes") or []) <= offered


def volume_mode_mismatch(claim: Obj, volume: Obj) -> bool:
    """CheckVolumeModeMismatches (unset is Filesystem on both sides)."""
    wanted = (claim.get("spec") or {}).get("volumeMode") or "Filesystem"
    return wanted != ((volume.get("spec") or {}).get("volumeMode") or "Filesystem")


def node_affinity_fits(volume: Obj, node_name: str, labels: Mapping[str, str]) -> bool:
    """CheckNodeAffinity: a volume without required node affinity fits every node."""
    required = ((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required")
    return required is None or node_selector_matches(required, node_name, labels)


def find_matching_volume(
    claim: Obj,
    volumes: Iterable[Obj],
    node: tuple[str, Mapping[str, str]] | None = None,
    delay_binding: bool = False,
    excluded: frozenset[str] = frozenset(),
) -> Obj | None:
    """FindMatchingVolume: a volume pre-bound to the claim, else the smallest Available one of the claim's
    class whose size, access modes, volume mode, selector (and, on the scheduler's path with `node`, node
    affinity) fit. With delay_binding and no node, only pre-bound volumes match (the scheduler binds the
    rest)."""
    requested = requested_bytes(claim)
    wanted_class = claim_class(claim)
    selector_obj = (claim.get("spec") or {}).get("selector")
    try:
        selector = from_label_selector(selector_obj) if selector_obj is not None else None
    except SelectorError:
        return None
    best: Obj | None = None
    best_size = 0
    for volume in volumes:
        name = _meta(volume).get("name", "")
        spec = volume.get("spec") or {}
        if name in excluded or (spec.get("claimRef") and not is_bound_to_claim(volume, claim)):
            continue
        size = capacity_bytes(volume)
        if size < requested or volume_mode_mismatch(claim, volume) or _meta(volume).get("deletionTimestamp"):
            continue
        affinity_ok = node is None or node_affinity_fits(volume, node[0], node[1])
        if is_bound_to_claim(volume, claim):
            return volume if affinity_ok else None
        if node is None and delay_binding:
            continue
        if (volume.get("status") or {}).get("phase") != "Available":
            continue
        if selector is not None and not selector.matches(_meta(volume).get("labels") or {}):
            continue
        if volume_class(volume) != wanted_class or not affinity_ok or not access_modes_fit(claim, volume):
            continue
        if best is None or size < best_size:
            best, best_size = volume, size
    return best


def claim_ref(claim: Obj) -> Obj:
    """The claimRef a volume bound to `claim` carries."""
    meta = _meta(claim)
    return {
        "kind": "PersistentVolumeClaim",
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "apiVersion": "v1",
        "resourceVersion": meta.get("resourceVersion", ""),
    }


def claim_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"


def volume_path(name: str) -> str:
    return f"/api/v1/persistentvolumes/{name}"


def class_path(name: str) -> str:
    return f"/apis/storage.k8s.io/v1/storageclasses/{name}"


def ephemeral_claim_name(pod: Obj, volume: Obj) -> str:
    """The claim of a generic ephemeral volume: `<pod name>-<volume name>` (upstream's ephemeral.VolumeClaimName)."""
    return f"{_meta(pod).get('name', '')}-{volume.get('name', '')}"


def claim_names(pod: Obj) -> list[str]:
    """The claims a pod's volumes name (persistentVolumeClaim sources, and the claims of generic ephemeral
    volumes), in order."""
    out = []
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        source = volume.get("persistentVolumeClaim")
        if isinstance(source, dict) and source.get("claimName"):
            out.append(source["claimName"])
        elif isinstance(volume.get("ephemeral"), dict):
            out.append(ephemeral_claim_name(pod, volume))
    return out
