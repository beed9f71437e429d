"""storage.k8s.io/v1 CSIDriver: what a CSI driver installed in the cluster asks of Kubernetes (attach or
not, pod info on mount, lifecycle modes, fsGroup policy, tokens, capacity tracking). Upstream's defaults
(attachRequired true, podInfoOnMount, requiresRepublish, storageCapacity and seLinuxMount false,
fsGroupPolicy ReadWriteOnceWithFSType, volumeLifecycleModes [Persistent]), ValidateCSIDriver and its
update rule (attachRequired and volumeLifecycleModes never change, reported under upstream's path
`spec.attachedRequired`), and kubectl's columns."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, duplicate, invalid, not_supported, required
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import immutable

Obj = dict[str, Any]

LIFECYCLE_MODES = ["Persistent", "Ephemeral"]
FS_GROUP_POLICIES = ["File", "None", "ReadWriteOnceWithFSType"]
MIN_TOKEN_SECONDS = 600


def _validate_tokens(requests: Any) -> list[FieldError]:
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, request in enumerate(requests or []):
        path = f"spec.tokenRequests[{i}]"
        audience = request.get("audience", "")
        if audience in seen:
            errors.append(duplicate(f"{path}.audience", audience))
            continue
        seen.add(audience)
        seconds = request.get("expirationSeconds")
        if seconds is None:
            continue
        if seconds < MIN_TOKEN_SECONDS:
            errors.append(
                invalid(
                    f"{path}.expirationSeconds", seconds, "may not specify a duration less than 10 minutes"
                )
            )
        if seconds > 1 << 32:
            errors.append(
                invalid(
                    f"{path}.expirationSeconds",
                    seconds,
                    "may not specify a duration larger than 2^32 seconds",
                )
            )
    return errors


class CSIDriver(Kind):
    group = "storage.k8s.io"
    kind = "CSIDriver"
    plural = "csidrivers"
    namespaced = False
    return_deleted_object = True
    schema = "V1CSIDriver"
    columns = (
        tables.NAME,
        tables.column("AttachRequired"),
        tables.column("PodInfoOnMount"),
        tables.column("StorageCapacity"),
        tables.column("TokenRequests"),
        tables.column("RequiresRepublish"),
        tables.column("Modes"),
        tables.AGE,
    )

    def default(self, obj: Obj, creating: bool) -> None:
        spec = obj.setdefault("spec", {})
        if spec.get("attachRequired") is None:
            spec["attachRequired"] = True
        for flag in ("podInfoOnMount", "requiresRepublish", "storageCapacity", "seLinuxMount"):
            if spec.get(flag) is None:
                spec[flag] = False
        if spec.get("fsGroupPolicy") is None:
            spec["fsGroupPolicy"] = "ReadWriteOnceWithFSType"
        if not spec.get("volumeLifecycleModes"):
            spec["volumeLifecycleModes"] = ["Persistent"]

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec") or {}
        errors: list[FieldError] = []
        for field, path in (
            ("attachRequired", "spec.attachedRequired"),
            ("podInfoOnMount", "spec.podInfoOnMount"),
            ("storageCapacity", "spec.storageCapacity"),
            ("seLinuxMount", "spec.seLinuxMount"),
        ):
            if spec.get(field) is None:
                errors.append(required(path))
        policy = spec.get("fsGroupPolicy")
        if policy is not None and policy not in FS_GROUP_POLICIES:
            errors.append(not_supported("spec.fsGroupPolicy", policy, FS_GROUP_POLICIES))
        errors += _validate_tokens(spec.get("tokenRequests"))
        for mode in spec.get("volumeLifecycleModes") or []:
            if mode not in LIFECYCLE_MODES:
                errors.append(not_supported("spec.volumeLifecycleModes", mode, LIFECYCLE_MODES))
        return errors

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        n, o = new.get("spec") or {}, old.get("spec") or {}
        return immutable(
            "spec.attachedRequired", n.get("attachRequired"), o.get("attachRequired")
        ) + immutable(
            "spec.volumeLifecycleModes", n.get("volumeLifecycleModes"), o.get("volumeLifecycleModes")
        )

    def cells(self, obj: Obj) -> list[Any]:
        spec = obj.get("spec") or {}
        audiences = [t.get("audience", "") for t in spec.get("tokenRequests") or []]
        modes = spec.get("volumeLifecycleModes") or []
        return [
            obj["metadata"].get("name"),
            bool(spec.get("attachRequired")),
            bool(spec.get("podInfoOnMount")),
            bool(spec.get("storageCapacity")),
            ",".join(audiences) if audiences else "<unset>",
            bool(spec.get("requiresRepublish")),
            ",".join(modes) if modes else "<none>",
            age(obj),
        ]


KIND = CSIDriver()
