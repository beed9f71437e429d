"""core/v1 PersistentVolumeClaim: a user's request for storage, bound by the PV controller to one
PersistentVolume. Upstream's defaults (volume mode Filesystem, phase Pending), ValidatePersistentVolumeClaim
(access modes, a positive storage request, class name, selector) and its update rule (the spec is
immutable except volumeName once, a class on a claim that had none, and the storage request of a bound
claim, which may not shrink), the status subresource and kubectl's columns. Three admission plugins live
here, as upstream has them: DefaultStorageClass (a claim naming no class gets the default one),
StorageObjectInUseProtection (the pvc-protection and pv-protection finalizers on every new claim and
volume) and PersistentVolumeClaimResize (only claims whose class allows expansion grow).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from controlplane.apiserver import errors, tables
from controlplane.apiserver.errors import FieldError, forbidden, not_supported, required
from controlplane.apiserver.kinds import persistentvolume, storageclass
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.kinds.volumeshared import (
    BETA_CLASS_ANNOTATION,
    FILESYSTEM,
    PV_PROTECTION,
    PVC_PROTECTION,
    access_modes_string,
    claim_class,
    default_class,
    positive_storage,
    storage_bytes,
    validate_access_modes,
    validate_class_name,
    validate_volume_mode,
)
from controlplane.apiserver.meta import age
from controlplane.apiserver.rbac.validation import label_selector
from controlplane.apiserver.validation import immutable

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import AdmissionRequest

Obj = dict[str, Any]

PHASES = ["Bound", "Lost", "Pending"]
IMMUTABLE_SPEC = "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"
TYPE_MARKS = {
    ("V1PersistentVolumeClaimStatus", "capacity"): "map[quantity]",
    ("V1PersistentVolumeClaimStatus", "allocatedResources"): "map[quantity]",
}


def validate_claim_spec(spec: Any, path: str = "spec") -> list[FieldError]:
    """ValidatePersistentVolumeClaimSpec (also a StatefulSet's volumeClaimTemplates)."""
    spec = spec if isinstance(spec, dict) else {}
    errs = validate_access_modes(
        f"{path}.accessModes", spec.get("accessModes"), "at least 1 access mode is required"
    )
    if spec.get("selector") is not None:
        errs += label_selector(spec["selector"], f"{path}.selector")
    requests = (spec.get("resources") or {}).get("requests") or {}
    if "storage" not in requests:
        errs.append(required(f"{path}.resources[storage]"))
    else:
        errs += positive_storage(f"{path}.resources[storage]", requests["storage"])
    errs += validate_class_name(f"{path}.storageClassName", spec.get("storageClassName"))
    errs += validate_volume_mode(f"{path}.volumeMode", spec.get("volumeMode"))
    return errs


def _diff(old: Obj, new: Obj) -> str:
    """A short field-by-field account of what changed (upstream prints cmp.Diff of the two specs)."""
    lines = ["  core.PersistentVolumeClaimSpec{"]
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            lines += [f"- \t{key}: {old.get(key)!r},", f"+ \t{key}: {new.get(key)!r},"]
    return "\n".join([*lines, "  }"])


def validate_claim_update(new: Obj, old: Obj) -> list[FieldError]:
    """ValidatePersistentVolumeClaimUpdate."""
    new_spec, old_spec = copy.deepcopy(new.get("spec") or {}), copy.deepcopy(old.get("spec") or {})
    old_annotations = (old.get("metadata") or {}).get("annotations") or {}
    new_annotations = (new.get("metadata") or {}).get("annotations") or {}
    errs = immutable(
        f"metadata.annotations[{BETA_CLASS_ANNOTATION}]",
        new_annotations.get(BETA_CLASS_ANNOTATION),
        old_annotations.get(BETA_CLASS_ANNOTATION),
    )
    if not old_spec.get("volumeName"):
        old_spec["volumeName"] = new_spec.get("volumeName")
        if old_spec["volumeName"] is None:
            old_spec.pop("volumeName")
    # A class may be set once on a claim that had none (retroactive default StorageClass assignment).
    if (
        old_spec.get("storageClassName") is None
        and new_spec.get("storageClassName") is not None
        and BETA_CLASS_ANNOTATION not in old_annotations
    ):
        new_spec.pop("storageClassName")
    old_size = ((old_spec.get("resources") or {}).get("requests") or {}).get("storage")
    new_size = ((new_spec.get("resources") or {}).get("requests") or {}).get("storage")
    if (new.get("status") or {}).get("phase") == "Bound" and "requests" in (new_spec.get("resources") or {}):
        new_spec["resources"]["requests"]["storage"] = old_size
    if new_spec != old_spec:
        errs.append(forbidden("spec", f"{IMMUTABLE_SPEC}\n{_diff(old_spec, new_spec)}"))
    # RecoverVolumeExpansionFailure (beta, on in 1.32): a request may come back down after a failed
    # expansion, but never to the capacity the claim has (volumes do not shrink).
    status_size = ((old.get("status") or {}).get("capacity") or {}).get("storage")
    if storage_bytes(new_size) < storage_bytes(old_size) and storage_bytes(new_size) <= storage_bytes(
        status_size
    ):
        errs.append(
            forbidden("spec.resources.requests.storage", "field can not be less than status.capacity")
        )
    return errs


def _cached(request: AdmissionRequest, kind: Kind) -> list[Obj]:
    return [c.obj for c in request.registry.cache.list(kind.bucket, kind.prefix(""))]


class DefaultStorageClass:
    """A new claim that names no class (nor the beta annotation) gets the default class, if there is one."""

    name = "DefaultStorageClass"

    def admit(self, request: AdmissionRequest) -> None:
        if request.kind is not KIND or request.operation != "CREATE" or request.subresource:
            return
        spec = request.obj.setdefault("spec", {})
        annotations = (request.obj.get("metadata") or {}).get("annotations") or {}
        if spec.get("storageClassName") is not None or BETA_CLASS_ANNOTATION in annotations:
            return
        chosen = default_class(_cached(request, storageclass.KIND))
        if chosen is not None:
            spec["storageClassName"] = chosen["metadata"]["name"]


class StorageObjectInUseProtection:
    """Every new claim gets kubernetes.io/pvc-protection, every new volume kubernetes.io/pv-protection;
    the protection controllers remove them once nothing uses the object."""

    name = "StorageObjectInUseProtection"

    def admit(self, request: AdmissionRequest) -> None:
        if request.operation != "CREATE" or request.subresource:
            return
        if request.kind is KIND:
            finalizer = PVC_PROTECTION
        elif request.kind is persistentvolume.KIND:
            finalizer = PV_PROTECTION
        else:
            return
        finalizers = request.obj.setdefault("metadata", {}).setdefault("finalizers", [])
        if finalizer not in finalizers:
            finalizers.append(finalizer)


class PersistentVolumeClaimResize:
    """A bound claim may grow only when its class allows volume expansion."""

    name = "PersistentVolumeClaimResize"

    def validate(self, request: AdmissionRequest) -> None:
        if request.kind is not KIND or request.operation != "UPDATE" or request.subresource:
            return
        old = request.old or {}
        new_size = ((request.obj.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
        old_size = ((old.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
        if storage_bytes(new_size) <= storage_bytes(old_size):
            return
        if (old.get("status") or {}).get("phase") != "Bound":
            raise errors.forbidden_request(
                f'persistentvolumeclaims "{request.name}" is forbidden: Only bound persistent volume claims can be expanded',
                KIND.plural,
                "",
                request.name,
            )
        name = claim_class(old)
        sc = request.registry.cache.get(storageclass.KIND.key("", name)) if name else None
        if sc is None or not sc.obj.get("allowVolumeExpansion"):
            raise errors.forbidden_request(
                f'persistentvolumeclaims "{request.name}" is forbidden: only dynamically provisioned pvc can be '
                "resized and the storageclass that provisions the pvc must support resize",
                KIND.plural,
                "",
                request.name,
            )


class PersistentVolumeClaim(Kind):
    kind = "PersistentVolumeClaim"
    plural = "persistentvolumeclaims"
    short_names = ("pvc",)
    return_deleted_object = True
    schema = "V1PersistentVolumeClaim"
    type_marks = TYPE_MARKS
    subresources = (StatusSubresource(),)
    admission = (DefaultStorageClass(), StorageObjectInUseProtection(), PersistentVolumeClaimResize())
    columns = (
        tables.NAME,
        tables.column("Status"),
        tables.column("Volume"),
        tables.column("Capacity"),
        tables.column("Access Modes"),
        tables.column("StorageClass"),
        tables.column("VolumeAttributesClass"),
        tables.AGE,
        tables.column("VolumeMode", priority=1),
    )

    def default(self, obj: Obj, creating: bool) -> None:
        spec = obj.setdefault("spec", {})
        if spec.get("volumeMode") is None:
            spec["volumeMode"] = FILESYSTEM
        status = obj.setdefault("status", {})
        if not status.get("phase"):
            status["phase"] = "Pending"

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Pending"}

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        errs = validate_claim_spec(obj.get("spec"))
        phase = (obj.get("status") or {}).get("phase")
        if phase and phase not in PHASES:
            errs.append(not_supported("status.phase", phase, PHASES))
        return errs

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        if subresource == "status":
            return []
        return validate_claim_update(new, old)

    def cells(self, obj: Obj) -> list[Any]:
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        phase = "Terminating" if meta.get("deletionTimestamp") else status.get("phase", "")
        capacity = modes = ""
        if spec.get("volumeName"):
            modes = access_modes_string(status.get("accessModes"))
            capacity = (status.get("capacity") or {}).get("storage", "0")
        return [
            meta.get("name"),
            phase,
            spec.get("volumeName", ""),
            capacity,
            modes,
            claim_class(obj),
            spec.get("volumeAttributesClassName") or "<unset>",
            age(obj),
            spec.get("volumeMode") or "<unset>",
        ]


KIND = PersistentVolumeClaim()
