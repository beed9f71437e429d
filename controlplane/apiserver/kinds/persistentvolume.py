"""core/v1 PersistentVolume: a piece of storage in the cluster, cluster-scoped, bound to at most one claim
(spec.claimRef). Upstream's defaults (reclaim policy Retain, volume mode Filesystem, phase Pending with its
transition time), ValidatePersistentVolume (capacity, access modes, exactly one volume source with the
hostPath and local rules, node affinity required for local volumes), the update rules (the source and
volume mode never change, node affinity only once), the status subresource and kubectl's columns. The
pv-protection finalizer is added by the StorageObjectInUseProtection plugin (persistentvolumeclaim.py).
"""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, forbidden, invalid, not_supported, required
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.kinds.volumeshared import (
    FILESYSTEM,
    access_modes_string,
    positive_storage,
    validate_access_modes,
    validate_class_name,
    validate_node_selector,
    validate_volume_mode,
    volume_class,
)
from controlplane.apiserver.meta import age, timestamp
from controlplane.apiserver.validation import immutable

Obj = dict[str, Any]

RECLAIM_POLICIES = ["Delete", "Recycle", "Retain"]
PHASES = ["Pending", "Available", "Bound", "Released", "Failed"]
HOST_PATH_TYPES = [
    "",
    "BlockDevice",
    "CharDevice",
    "Directory",
    "DirectoryOrCreate",
    "File",
    "FileOrCreate",
    "Socket",
]
SOURCES = (
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "hostPath",
    "glusterfs",
    "nfs",
    "rbd",
    "iscsi",
    "cinder",
    "cephfs",
    "fc",
    "flocker",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "local",
    "storageos",
    "csi",
)
TYPE_MARKS = {("V1PersistentVolumeSpec", "capacity"): "map[quantity]"}


def _no_backsteps(path: str, value: str) -> list[FieldError]:
    """validatePathNoBacksteps."""
    if ".." in value.split("/"):
        return [invalid(path, value, "must not contain '..'")]
    return []


def _host_path(path: str, source: Obj, policy: str) -> list[FieldError]:
    value = source.get("path") or ""
    if not value:
        return [required(f"{path}.path")]
    errors = _no_backsteps(f"{path}.path", value)
    if source.get("type") not in (None, *HOST_PATH_TYPES):
        errors.append(not_supported(f"{path}.type", source.get("type"), HOST_PATH_TYPES))
    if policy == "Recycle" and value.rstrip("/") == "":
        errors.append(forbidden(f"{path}.path", "may not be '/' when reclaim policy is Recycle"))
    return errors


def _local(path: str, source: Obj) -> list[FieldError]:
    value = source.get("path") or ""
    if not value:
        return [required(f"{path}.path")]
    return _no_backsteps(f"{path}.path", value)


def _capacity(capacity: Any) -> list[FieldError]:
    capacity = capacity if isinstance(capacity, dict) else {}
    errors: list[FieldError] = []
    if not capacity:
        errors.append(required("spec.capacity"))
    if "storage" not in capacity or len(capacity) > 1:
        errors.append(not_supported("spec.capacity", capacity, ["storage"]))
    for name, value in capacity.items():
        errors += positive_storage(f"spec.capacity[{name}]", value)
    return errors


def validate_pv_spec(spec: Any) -> list[FieldError]:
    """ValidatePersistentVolumeSpec."""
    spec = spec if isinstance(spec, dict) else {}
    errors = validate_access_modes(
        "spec.accessModes", spec.get("accessModes"), "must specify at least 1 access mode"
    )
    errors += _capacity(spec.get("capacity"))
    policy = spec.get("persistentVolumeReclaimPolicy") or ""
    if policy and policy not in RECLAIM_POLICIES:
        errors.append(not_supported("spec.persistentVolumeReclaimPolicy", policy, RECLAIM_POLICIES))
    errors += validate_class_name("spec.storageClassName", spec.get("storageClassName"))
    errors += validate_volume_mode("spec.volumeMode", spec.get("volumeMode"))
    affinity = spec.get("nodeAffinity")
    if affinity is not None:
        if affinity.get("required") is None:
            errors.append(required("spec.nodeAffinity.required", "must specify required node constraints"))
        else:
            errors += validate_node_selector("spec.nodeAffinity.required", affinity["required"])
    sources = [s for s in SOURCES if spec.get(s) is not None]
    if not sources:
        errors.append(required("spec", "must specify a volume type"))
    for extra in sources[1:]:
        errors.append(forbidden(f"spec.{extra}", "may not specify more than 1 volume type"))
    if spec.get("hostPath") is not None:
        errors += _host_path("spec.hostPath", spec["hostPath"], policy)
    if spec.get("local") is not None:
        errors += _local("spec.local", spec["local"])
        if affinity is None:
            errors.append(required("spec.nodeAffinity", "Local volume requires node affinity"))
    return errors


def source_of(spec: Obj) -> Obj:
    """The PersistentVolumeSource part of a spec (what may never change)."""
    return {s: spec[s] for s in SOURCES if spec.get(s) is not None}


class PersistentVolumeStatus(StatusSubresource):
    def merge(self, current: Obj, desired: Obj) -> Obj:
        new = super().merge(current, desired)
        old_phase = (current.get("status") or {}).get("phase")
        status = new.get("status") or {}
        if status.get("phase") != old_phase:
            status["lastPhaseTransitionTime"] = timestamp()
        return new


class PersistentVolume(Kind):
    kind = "PersistentVolume"
    plural = "persistentvolumes"
    namespaced = False
    short_names = ("pv",)
    return_deleted_object = True
    schema = "V1PersistentVolume"
    type_marks = TYPE_MARKS
    subresources = (PersistentVolumeStatus(),)
    columns = (
        tables.NAME,
        tables.column("Capacity"),
        tables.column("Access Modes"),
        tables.column("Reclaim Policy"),
        tables.column("Status"),
        tables.column("Claim"),
        tables.column("StorageClass"),
        tables.column("VolumeAttributesClass"),
        tables.column("Reason"),
        tables.AGE,
        tables.column("VolumeMode", priority=1),
    )

    def default(self, obj: Obj, creating: bool) -> None:
        spec = obj.setdefault("spec", {})
        if not spec.get("persistentVolumeReclaimPolicy"):
            spec["persistentVolumeReclaimPolicy"] = "Retain"
        if spec.get("volumeMode") is None:
            spec["volumeMode"] = FILESYSTEM
        if isinstance(spec.get("hostPath"), dict):
            spec["hostPath"].setdefault("type", "")
        status = obj.setdefault("status", {})
        if not status.get("phase"):
            status["phase"] = "Pending"

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Pending", "lastPhaseTransitionTime": timestamp()}

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        errors = validate_pv_spec(obj.get("spec"))
        phase = (obj.get("status") or {}).get("phase")
        if phase and phase not in PHASES:
            errors.append(not_supported("status.phase", phase, PHASES))
        return errors

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        errors: list[FieldError] = []
        if source_of(new_spec) != source_of(old_spec):
            errors.append(
                forbidden(
                    "spec.persistentvolumesource", "spec.persistentvolumesource is immutable after creation"
                )
            )
        errors += immutable("volumeMode", new_spec.get("volumeMode"), old_spec.get("volumeMode"))
        if old_spec.get("nodeAffinity") is not None:
            errors += immutable("nodeAffinity", new_spec.get("nodeAffinity"), old_spec.get("nodeAffinity"))
        return errors

    def cells(self, obj: Obj) -> list[Any]:
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        ref = spec.get("claimRef")
        claim = f"{ref.get('namespace', '')}/{ref.get('name', '')}" if ref else ""
        phase = "Terminating" if meta.get("deletionTimestamp") else status.get("phase", "")
        return [
            meta.get("name"),
            (spec.get("capacity") or {}).get("storage", "0"),
            access_modes_string(spec.get("accessModes")),
            spec.get("persistentVolumeReclaimPolicy", ""),
            phase,
            claim,
            volume_class(obj),
            spec.get("volumeAttributesClassName") or "<unset>",
            status.get("reason", ""),
            age(obj),
            spec.get("volumeMode") or "<unset>",
        ]


KIND = PersistentVolume()
