"""core/v1 Endpoints (written by whoever backs a Service; the server keeps default/kubernetes)."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.meta import age

Obj = dict[str, Any]


class Endpoints(Kind):
    kind = "Endpoints"
    plural = "endpoints"
    singular = "endpoints"
    short_names = ("ep",)
    schema = "V1Endpoints"
    columns = (tables.NAME, tables.column("Endpoints", desc="Endpoints of the service"), tables.AGE)

    def cells(self, obj: Obj) -> list[Any]:
        pairs = []
        for subset in obj.get("subsets") or []:
            for address in subset.get("addresses") or []:
                for port in subset.get("ports") or [{}]:
                    pairs.append(f"{address.get('ip')}:{port['port']}" if port.get("port") else address.get("ip"))
        text = ",".join(pairs[:3]) + (f" + {len(pairs) - 3} more..." if len(pairs) > 3 else "")
        return [obj["metadata"].get("name"), text or "<none>", age(obj)]


KIND = Endpoints()
