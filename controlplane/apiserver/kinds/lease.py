"""coordination.k8s.io/v1 Lease: node heartbeats and leader election."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, invalid
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.meta import age

Obj = dict[str, Any]


class Lease(Kind):
    group = "coordination.k8s.io"
    kind = "Lease"
    plural = "leases"
    schema = "V1Lease"
    type_marks = {("V1LeaseSpec", "acquireTime"): "microtime", ("V1LeaseSpec", "renewTime"): "microtime"}
    columns = (tables.NAME, tables.column("Holder", desc="The holder of the lease."), tables.AGE)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        duration = (obj.get("spec") or {}).get("leaseDurationSeconds")
        if duration is not None and duration <= 0:
            return [invalid("spec.leaseDurationSeconds", duration, "must be greater than 0")]
        return []

    def cells(self, obj: Obj) -> list[Any]:
        return [obj["metadata"].get("name"), (obj.get("spec") or {}).get("holderIdentity", ""), age(obj)]


KIND = Lease()
