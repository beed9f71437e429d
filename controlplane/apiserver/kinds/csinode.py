"""storage.k8s.io/v1 CSINode: the CSI drivers registered on one node (named after the node), each with
the node ID it gave, its topology keys and its allocatable volume count, written by the node's kubelet.
ValidateCSINode (node name rules, driver names, nodeID required and at most 192 characters, topology
keys qualified names, no duplicates, a non-negative count), the update rule (a driver's entry never
changes once written, only comes and goes), and kubectl's columns."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, duplicate, invalid, required
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import dns_subdomain, immutable, nonnegative, qualified_name

Obj = dict[str, Any]

NODE_ID_MAX = 192


class CSINode(Kind):
    group = "storage.k8s.io"
    kind = "CSINode"
    plural = "csinodes"
    namespaced = False
    return_deleted_object = True
    schema = "V1CSINode"
    columns = (tables.NAME, tables.column("Drivers", kind="integer"), tables.AGE)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        errors: list[FieldError] = []
        names: set[str] = set()
        for i, driver in enumerate((obj.get("spec") or {}).get("drivers") or []):
            path = f"spec.drivers[{i}]"
            name = driver.get("name") or ""
            errors += dns_subdomain(f"{path}.name", name) if name else [required(f"{path}.name")]
            node_id = driver.get("nodeID") or ""
            if not node_id:
                errors.append(required(f"{path}.nodeID"))
            if len(node_id) > NODE_ID_MAX:
                errors.append(invalid(f"{path}.nodeID", node_id, f"must be {NODE_ID_MAX} characters or less"))
            count = (driver.get("allocatable") or {}).get("count")
            if count is not None:
                errors += nonnegative(f"{path}.allocatable.count", count)
            if name in names:
                errors.append(duplicate(f"{path}.name", name))
            names.add(name)
            keys: set[str] = set()
            for key in driver.get("topologyKeys") or []:
                if not key:
                    errors.append(required(path))
                if key in keys:
                    errors.append(duplicate(path, key))
                keys.add(key)
                errors += qualified_name(path, key)
        return errors

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        errors: list[FieldError] = []
        now = {d.get("name"): d for d in (new.get("spec") or {}).get("drivers") or []}
        for driver in (old.get("spec") or {}).get("drivers") or []:
            if driver.get("name") in now:
                errors += immutable("spec.drivers", now[driver.get("name")], driver)
        return errors

    def cells(self, obj: Obj) -> list[Any]:
        return [obj["metadata"].get("name"), len((obj.get("spec") or {}).get("drivers") or []), age(obj)]


KIND = CSINode()
