"""flowcontrol.apiserver.k8s.io/v1 PriorityLevelConfiguration: a priority level's share of the server's
concurrency and how its excess requests queue or are refused (API priority and fairness; the
dispatcher that enforces it is flowcontrol/dispatcher.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.flowcontrol import defaults, maintainer, validation
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.meta import age

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import Registry

Obj = dict[str, Any]


class PriorityLevelConfiguration(Kind):
    group = "flowcontrol.apiserver.k8s.io"
    kind = "PriorityLevelConfiguration"
    plural = "prioritylevelconfigurations"
    namespaced = False
    schema = "V1PriorityLevelConfiguration"
    generation = True
    subresources = (StatusSubresource(),)
    columns = (
        tables.NAME,
        tables.column(
            "Type",
            desc="`type` indicates whether this priority level is subject to limitation on request execution.  A "
            'value of `"Exempt"` means that requests of this priority level are not subject to a limit (and thus '
            "are never queued) and do not detract from the capacity made available to other priority levels.  A "
            'value of `"Limited"` means that (a) requests of this priority level _are_ subject to limits and (b) '
            "some of the server's limited capacity is made available exclusively to this priority level. Required.",
        ),
        tables.column(
            "NominalConcurrencyShares",
            desc="`nominalConcurrencyShares` (NCS) contributes to the computation of the NominalConcurrencyLimit "
            "(NominalCL) of this level. This is the number of execution seats available at this priority level.",
        ),
        tables.column(
            "Queues",
            desc="`queues` is the number of queues for this priority level. The queues exist independently at each "
            "apiserver. The value must be positive.  Setting it to 1 effectively precludes shufflesharding and "
            "thus makes the distinguisher method of associated flow schemas irrelevant.  This field has a default "
            "value of 64.",
        ),
        tables.column(
            "HandSize",
            desc="`handSize` is a small positive number that configures the shuffle sharding of requests into "
            "queues.  When enqueuing a request at this priority level the request's flow identifier (a string "
            "pair) is hashed and the hash value is used to shuffle the list of queues and deal a hand of the size "
            "specified here.  The request is put into one of the shortest queues in that hand. `handSize` must be "
            "no larger than `queues`, and should be significantly smaller (so that a few heavy flows do not "
            "saturate most of the queues).  See the user-facing documentation for more extensive guidance on "
            "setting this field.  This field has a default value of 8.",
        ),
        tables.column(
            "QueueLengthLimit",
            desc="`queueLengthLimit` is the maximum number of requests allowed to be waiting in a given queue of "
            "this priority level at a time; excess requests are rejected.  This value must be positive.  If not "
            "specified, it will be defaulted to 50.",
        ),
        tables.AGE,
    )

    def default(self, obj: Obj, creating: bool) -> None:
        validation.default_priority_level(obj)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validation.validate_priority_level(obj)

    async def bootstrap(self, registry: Registry) -> None:
        for obj in (*defaults.MANDATORY_LEVELS, *defaults.SUGGESTED_LEVELS):
            await registry.ensure(self, "", maintainer.fresh(obj))

    def cells(self, obj: Obj) -> list[Any]:
        spec = obj.get("spec") or {}
        shares: Any = "<none>"
        queues: Any = "<none>"
        hand: Any = "<none>"
        length: Any = "<none>"
        limited = spec.get("limited")
        if limited is not None:
            shares = limited.get("nominalConcurrencyShares", 0)
            queuing = (limited.get("limitResponse") or {}).get("queuing")
            if queuing is not None:
                queues, hand, length = (
                    queuing.get("queues"),
                    queuing.get("handSize"),
                    queuing.get("queueLengthLimit"),
                )
        return [obj["metadata"].get("name"), spec.get("type", ""), shares, queues, hand, length, age(obj)]


KIND = PriorityLevelConfiguration()
