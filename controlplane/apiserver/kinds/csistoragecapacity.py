"""storage.k8s.io/v1 CSIStorageCapacity: how much a CSI driver can provision for one StorageClass in one
topology segment (namespaced, published by the external provisioner, read by the scheduler).
ValidateCSIStorageCapacity (a storage class name, non-negative capacity and maximumVolumeSize), and
kubectl's columns."""

from __future__ import annotations

import dataclasses
from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import dns_subdomain, nonnegative_quantity

Obj = dict[str, Any]


class CSIStorageCapacity(Kind):
    group = "storage.k8s.io"
    kind = "CSIStorageCapacity"
    plural = "csistoragecapacities"
    return_deleted_object = True
    schema = "V1CSIStorageCapacity"
    type_marks = {
        ("V1CSIStorageCapacity", "capacity"): "quantity",
        ("V1CSIStorageCapacity", "maximumVolumeSize"): "quantity",
    }
    columns = (tables.NAME, tables.column("StorageClassName"), tables.column("Capacity"), tables.AGE)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        class_name = obj.get("storageClassName") or ""
        # upstream's ValidateClassName: a DNS subdomain, each message on the field with the value
        errors = [dataclasses.replace(e, field="storageClassName") for e in dns_subdomain("x", class_name)]
        for field in ("capacity", "maximumVolumeSize"):
            if obj.get(field) is not None:
                errors += nonnegative_quantity(field, obj[field])
        return errors

    def cells(self, obj: Obj) -> list[Any]:
        return [
            obj["metadata"].get("name"),
            obj.get("storageClassName", ""),
            obj.get("capacity", ""),
            age(obj),
        ]


KIND = CSIStorageCapacity()
