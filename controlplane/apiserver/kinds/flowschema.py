"""flowcontrol.apiserver.k8s.io/v1 FlowSchema: which requests go to which priority level (API priority
and fairness). Validation and defaults are flowcontrol/validation.py; the objects the server keeps
(mandatory and suggested) and their Dangling condition are flowcontrol/maintainer.py's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.flowcontrol import defaults, maintainer, validation
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.meta import age

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import Registry, ServerConfig

Obj = dict[str, Any]


class FlowSchema(Kind):
    group = "flowcontrol.apiserver.k8s.io"
    kind = "FlowSchema"
    plural = "flowschemas"
    namespaced = False
    schema = "V1FlowSchema"
    generation = True
    subresources = (StatusSubresource(),)
    columns = (
        tables.NAME,
        tables.column(
            "PriorityLevel",
            desc="`name` is the name of the priority level configuration being referenced Required.",
        ),
        tables.column(
            "MatchingPrecedence",
            desc="`matchingPrecedence` is used to choose among the FlowSchemas that match a given request. The "
            "chosen FlowSchema is among those with the numerically lowest (which we take to be logically highest) "
            "MatchingPrecedence.  Each MatchingPrecedence value must be ranged in [1,10000]. Note that if the "
            "precedence is not specified, it will be set to 1000 as default.",
        ),
        tables.column(
            "DistinguisherMethod",
            desc="`distinguisherMethod` defines how to compute the flow distinguisher for requests that match this "
            "schema. `nil` specifies that the distinguisher is disabled and thus will always be the empty string.",
        ),
        tables.AGE,
        tables.column("MissingPL", desc="references a broken or non-existent PriorityLevelConfiguration"),
    )

    def default(self, obj: Obj, creating: bool) -> None:
        validation.default_flow_schema(obj)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validation.validate_flow_schema(obj)

    async def bootstrap(self, registry: Registry) -> None:
        for obj in (*defaults.MANDATORY_SCHEMAS, *defaults.SUGGESTED_SCHEMAS):
            await registry.ensure(self, "", maintainer.fresh(obj))

    def controllers(self, registry: Registry, config: ServerConfig) -> list[Any]:
        from controlplane.apiserver.kinds.prioritylevelconfiguration import KIND as LEVELS

        return [maintainer.Maintainer(registry, self, LEVELS)]

    def cells(self, obj: Obj) -> list[Any]:
        spec = obj.get("spec") or {}
        method = (spec.get("distinguisherMethod") or {}).get("type") or "<none>"
        missing = "?"
        for condition in (obj.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "Dangling":
                missing = condition.get("status") or "?"
        return [
            obj["metadata"].get("name"),
            (spec.get("priorityLevelConfiguration") or {}).get("name", ""),
            spec.get("matchingPrecedence", 0),
            method,
            age(obj),
            missing,
        ]


KIND = FlowSchema()
