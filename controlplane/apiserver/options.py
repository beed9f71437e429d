"""DeleteOptions (upstream's metav1.DeleteOptions) from a DELETE's body or query string."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controlplane.apiserver.request import int_param

Obj = dict[str, Any]
SCHEMA = "V1DeleteOptions"


@dataclass
class DeleteOptions:
    grace_period: int | None = None
    uid: str | None = None
    resource_version: str | None = None
    propagation: str | None = None
    dry_run: bool = False

    @classmethod
    def parse(cls, body: Obj | None, query: Any) -> DeleteOptions:
        """`body`: the decoded (typed) DeleteOptions, if one came; the query string fills the rest."""
        body = body or {}
        grace = body.get("gracePeriodSeconds")
        if grace is None and query.get("gracePeriodSeconds") not in (None, ""):
            grace = int_param(query, "gracePeriodSeconds")
        pre = body.get("preconditions") or {}
        dry = body.get("dryRun") or ([query["dryRun"]] if "dryRun" in query else [])
        return cls(
            grace_period=grace,
            uid=pre.get("uid"),
            resource_version=pre.get("resourceVersion"),
            propagation=body.get("propagationPolicy", query.get("propagationPolicy")),
            dry_run="All" in dry,
        )
