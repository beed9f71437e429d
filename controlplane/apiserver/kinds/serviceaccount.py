"""core/v1 ServiceAccount, with its `token` subresource (TokenRequest, tokenrequest.py) and the
ServiceAccount admission plugin that gives pods their account's credentials (saadmission.py)."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.kinds.saadmission import ServiceAccountAdmission
from controlplane.apiserver.kinds.tokenrequest import TOKEN
from controlplane.apiserver.meta import age

Obj = dict[str, Any]


class ServiceAccount(Kind):
    kind = "ServiceAccount"
    plural = "serviceaccounts"
    short_names = ("sa",)
    schema = "V1ServiceAccount"
    return_deleted_object = True
    subresources = (TOKEN,)
    admission = (ServiceAccountAdmission(),)
    columns = (
        tables.NAME,
        tables.column(
            "Secrets",
            kind="integer",
            desc="Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
        ),
        tables.AGE,
    )

    def cells(self, obj: Obj) -> list[Any]:
        return [obj["metadata"].get("name"), len(obj.get("secrets") or []), age(obj)]


KIND = ServiceAccount()
