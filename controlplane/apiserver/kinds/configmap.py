"""core/v1 ConfigMap: string data and base64 binaryData under valid keys, 1 MiB in all, and frozen
once `immutable` is set."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, forbidden, invalid, too_long
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.meta import age
from kubeclient import names

Obj = dict[str, Any]

MAX_SIZE = 1024 * 1024  # core.MaxSecretSize, which ConfigMaps share
FROZEN = "field is immutable when `immutable` is set"


def validate_keys(obj: Obj, bags: tuple[str, ...]) -> list[FieldError]:
    """Every key of the data bags a valid config key, no key in two bags, at most 1 MiB in all."""
    errors: list[FieldError] = []
    total = 0
    seen: dict[str, str] = {}
    for bag in bags:
        for key, value in (obj.get(bag) or {}).items():
            total += len(value)
            errors += [invalid(f"{bag}[{key}]", key, m) for m in names.config_map_key(key)]
            if key in seen:
                errors.append(invalid(f"{seen[key]}[{key}]", key, f"duplicate of key present in {bag}"))
            seen[key] = bag
    if total > MAX_SIZE:
        errors.append(too_long("", MAX_SIZE))
    return errors


def validate_immutable(new: Obj, old: Obj, bags: tuple[str, ...]) -> list[FieldError]:
    """Once `immutable` is true, neither the data nor the flag may change (upstream's ConfigMap and
    Secret update rules)."""
    if not old.get("immutable"):
        return []
    errors: list[FieldError] = []
    if not new.get("immutable"):
        errors.append(forbidden("immutable", FROZEN))
    for bag in bags:
        if (new.get(bag) or {}) != (old.get(bag) or {}):
            errors.append(forbidden(bag, FROZEN))
    return errors


class ConfigMap(Kind):
    kind = "ConfigMap"
    plural = "configmaps"
    short_names = ("cm",)
    schema = "V1ConfigMap"
    columns = (
        tables.NAME,
        tables.column("Data", kind="integer", desc="Data contains the configuration data."),
        tables.AGE,
    )
    bags = ("data", "binaryData")

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validate_keys(obj, self.bags)

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        return validate_immutable(new, old, self.bags)

    def cells(self, obj: Obj) -> list[Any]:
        return [
            obj["metadata"].get("name"),
            len(obj.get("data") or {}) + len(obj.get("binaryData") or {}),
            age(obj),
        ]


KIND = ConfigMap()
