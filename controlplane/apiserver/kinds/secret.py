"""core/v1 Secret: base64 data (stringData is write-only, folded into data), a type that never
changes, and frozen once `immutable` is set."""

from __future__ import annotations

import base64
from typing import Any

from controlplane import legacytoken
from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, required
from controlplane.apiserver.kinds.base import REFUSE_UNSUPPORTED, Kind, fields
from controlplane.apiserver.kinds.configmap import validate_immutable, validate_keys
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import immutable

Obj = dict[str, Any]


class Secret(Kind):
    kind = "Secret"
    plural = "secrets"
    schema = "V1Secret"
    field_selectors = fields("type")
    field_refusal = REFUSE_UNSUPPORTED
    columns = (
        tables.NAME,
        tables.column("Type", desc="Used to facilitate programmatic handling of secret data."),
        tables.column("Data", kind="integer", desc="Data contains the secret data."),
        tables.AGE,
    )

    def default(self, obj: Obj, creating: bool) -> None:
        obj.setdefault("type", "Opaque")
        # stringData is write-only: it is folded into data (base64) and never stored or returned.
        string_data = obj.pop("stringData", None)
        if string_data:
            data = obj.setdefault("data", {})
            for key, value in string_data.items():
                data[key] = base64.b64encode(value.encode()).decode()

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        errs = validate_keys(obj, ("data",))
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if obj.get("type") == legacytoken.SECRET_TYPE and not annotations.get(legacytoken.NAME_ANNOTATION):
            errs.append(required(f"metadata.annotations[{legacytoken.NAME_ANNOTATION}]"))
        return errs

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        return immutable("type", new.get("type"), old.get("type")) + validate_immutable(new, old, ("data",))

    def cells(self, obj: Obj) -> list[Any]:
        return [obj["metadata"].get("name"), obj.get("type", ""), len(obj.get("data") or {}), age(obj)]


KIND = Secret()
