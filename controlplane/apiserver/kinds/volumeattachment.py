"""storage.k8s.io/v1 VolumeAttachment: the attach/detach controller's wish that a volume be attached to a
node, and (through `/status`) the external attacher's answer. ValidateVolumeAttachment with the v1
extras (attacher a CSI driver name, node name rules, exactly one of persistentVolumeName and
inlineVolumeSpec, attachment metadata at most 256 KiB, error messages at most 1024 bytes), a spec that
never changes, the status owned by the subresource, and kubectl's columns."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, forbidden, invalid, required, too_long
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import dns_subdomain

Obj = dict[str, Any]

MAX_METADATA = 256 * 1024
MAX_ERROR_MESSAGE = 1024
ONE_SOURCE = "must specify exactly one of inlineVolumeSpec and persistentVolumeName"


def _volume_error(path: str, error: Any) -> list[FieldError]:
    if not isinstance(error, dict):
        return []
    errors: list[FieldError] = []
    if len(error.get("message") or "") > MAX_ERROR_MESSAGE:
        errors.append(too_long(f"{path}.message", MAX_METADATA))  # upstream reports the metadata limit here
    code = error.get("errorCode")
    if code is not None and code < 0:
        errors.append(invalid(f"{path}.errorCode", code, "must be between 0 and 2147483647, inclusive"))
    return errors


class VolumeAttachment(Kind):
    group = "storage.k8s.io"
    kind = "VolumeAttachment"
    plural = "volumeattachments"
    namespaced = False
    return_deleted_object = True
    schema = "V1VolumeAttachment"
    subresources = (StatusSubresource(),)
    columns = (
        tables.NAME,
        tables.column("Attacher"),
        tables.column("PV"),
        tables.column("Node"),
        tables.column("Attached", kind="boolean"),
        tables.AGE,
    )

    def prepare_for_create(self, obj: Obj) -> None:
        """The status is the attacher's, written through /status: a create starts it empty."""
        obj["status"] = {"attached": False}

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec") or {}
        errors: list[FieldError] = []
        attacher = spec.get("attacher") or ""
        if not attacher:
            errors.append(required("spec.attacher"))
        else:
            errors += dns_subdomain("spec.attacher", attacher)
        source = spec.get("source") or {}
        pv, inline = source.get("persistentVolumeName"), source.get("inlineVolumeSpec")
        if pv is None and inline is None:
            errors.append(required("spec.source", ONE_SOURCE))
        elif pv is not None and inline is not None:
            errors.append(forbidden("spec.source", ONE_SOURCE))
        elif pv is not None and not pv:
            errors.append(
                required("spec.source.persistentVolumeName", "must specify non empty persistentVolumeName")
            )
        elif pv:
            errors += dns_subdomain("spec.source.persistentVolumeName", pv)
        errors += dns_subdomain("spec.nodeName", spec.get("nodeName") or "")
        status = obj.get("status") or {}
        size = sum(len(k) + len(v or "") for k, v in (status.get("attachmentMetadata") or {}).items())
        if size > MAX_METADATA:
            errors.append(too_long("status.attachmentMetadata", MAX_METADATA))
        errors += _volume_error("status.attachError", status.get("attachError"))
        errors += _volume_error("status.detachError", status.get("detachError"))
        return errors

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        if (new.get("spec") or {}) != (old.get("spec") or {}):
            return [invalid("spec", new.get("spec"), "field is immutable")]
        return []

    def cells(self, obj: Obj) -> list[Any]:
        spec = obj.get("spec") or {}
        return [
            obj["metadata"].get("name"),
            spec.get("attacher", ""),
            (spec.get("source") or {}).get("persistentVolumeName") or "",
            spec.get("nodeName", ""),
            bool((obj.get("status") or {}).get("attached")),
            age(obj),
        ]


KIND = VolumeAttachment()
