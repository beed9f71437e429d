"""storage.k8s.io/v1 StorageClass: how claims naming it get volumes (its provisioner, parameters, reclaim
policy, binding mode). Upstream's defaults (reclaimPolicy Delete, volumeBindingMode Immediate),
ValidateStorageClass and ValidateStorageClassUpdate (provisioner, parameters and reclaim policy never
change), and kubectl's columns with `(default)` after the class the is-default-class annotation marks.
The server keeps k3s's default class `local-path` (rancher.io/local-path, WaitForFirstConsumer, Delete),
served by the controller manager's local-path provisioner.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, forbidden, invalid, not_supported, required
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.kinds.volumeshared import DEFAULT_CLASS_ANNOTATION, is_default_class
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import immutable, qualified_name

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import Registry

Obj = dict[str, Any]

RECLAIM_POLICIES = ["Delete", "Retain"]
BINDING_MODES = ["Immediate", "WaitForFirstConsumer"]
IMMEDIATE, WAIT_FOR_FIRST_CONSUMER = BINDING_MODES
MAX_PARAMETERS_SIZE = 256 * 1024
# k3s's default class (its local-storage manifest), served from the first start and put back at every
# start if deleted, as k3s re-applies its manifests; the controller manager's local-path provisioner
# serves it.
LOCAL_PATH: Obj = {
    "metadata": {"name": "local-path", "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
    "provisioner": "rancher.io/local-path",
    "reclaimPolicy": "Delete",
    "volumeBindingMode": "WaitForFirstConsumer",
}


def _validate_parameters(parameters: Any) -> list[FieldError]:
    errors: list[FieldError] = []
    total = 0
    for key, value in (parameters or {}).items():
        if not key:
            errors.append(invalid("parameters", key, "field can not be empty."))
        total += len(key) + len(value or "")
    if total > MAX_PARAMETERS_SIZE:
        errors.append(
            FieldError(
                "FieldValueTooLong",
                "parameters",
                f"Too long: may not be more than {MAX_PARAMETERS_SIZE} bytes",
            )
        )
    return errors


class StorageClass(Kind):
    group = "storage.k8s.io"
    kind = "StorageClass"
    plural = "storageclasses"
    namespaced = False
    short_names = ("sc",)
    return_deleted_object = True
    schema = "V1StorageClass"
    columns = (
        tables.NAME,
        tables.column("Provisioner"),
        tables.column("ReclaimPolicy"),
        tables.column("VolumeBindingMode"),
        tables.column("AllowVolumeExpansion"),
        tables.AGE,
    )

    def default(self, obj: Obj, creating: bool) -> None:
        if not obj.get("reclaimPolicy"):
            obj["reclaimPolicy"] = "Delete"
        if not obj.get("volumeBindingMode"):
            obj["volumeBindingMode"] = IMMEDIATE

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        errors: list[FieldError] = []
        provisioner = obj.get("provisioner") or ""
        if not provisioner:
            errors.append(required("provisioner"))
        else:
            errors += qualified_name("provisioner", provisioner.lower())
        errors += _validate_parameters(obj.get("parameters"))
        policy = obj.get("reclaimPolicy")
        if policy not in RECLAIM_POLICIES:
            errors.append(not_supported("reclaimPolicy", policy, RECLAIM_POLICIES))
        mode = obj.get("volumeBindingMode")
        if mode is None:
            errors.append(required("volumeBindingMode"))
        elif mode not in BINDING_MODES:
            errors.append(not_supported("volumeBindingMode", mode, BINDING_MODES))
        return errors

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        errors: list[FieldError] = []
        if (new.get("parameters") or {}) != (old.get("parameters") or {}):
            errors.append(forbidden("parameters", "updates to parameters are forbidden."))
        if new.get("provisioner") != old.get("provisioner"):
            errors.append(forbidden("provisioner", "updates to provisioner are forbidden."))
        if new.get("reclaimPolicy") != old.get("reclaimPolicy"):
            errors.append(forbidden("reclaimPolicy", "updates to reclaimPolicy are forbidden."))
        return errors + immutable(
            "volumeBindingMode", new.get("volumeBindingMode"), old.get("volumeBindingMode")
        )

    async def bootstrap(self, registry: Registry) -> None:
        body = {"apiVersion": self.api_version, "kind": self.kind, **copy.deepcopy(LOCAL_PATH)}
        await registry.ensure(self, "", body)

    def cells(self, obj: Obj) -> list[Any]:
        name = obj["metadata"].get("name", "")
        if is_default_class(obj):
            name += " (default)"
        return [
            name,
            obj.get("provisioner", ""),
            obj.get("reclaimPolicy") or "Delete",
            obj.get("volumeBindingMode") or IMMEDIATE,
            bool(obj.get("allowVolumeExpansion")),
            age(obj),
        ]


KIND = StorageClass()
