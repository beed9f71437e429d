"""scheduling.k8s.io/v1 PriorityClass, and the Priority admission plugin (upstream's
plugin/pkg/admission/priority): a pod's priorityClassName resolves to spec.priority and
spec.preemptionPolicy, the globalDefault class applies to pods that name none, and a pod cannot choose
its own priority. The two system classes exist from the server's first start and cannot be deleted."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controlplane.apiserver import errors, tables
from controlplane.apiserver.errors import FieldError, forbidden, not_supported
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.kinds.pod import KIND as POD
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import immutable

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import AdmissionRequest, Registry

Obj = dict[str, Any]

HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_CRITICAL_PRIORITY = 2 * HIGHEST_USER_DEFINABLE_PRIORITY
SYSTEM_PREFIX = "system-"
PREEMPT_LOWER = "PreemptLowerPriority"
POLICIES = [PREEMPT_LOWER, "Never"]
SYSTEM_CLASSES: tuple[Obj, ...] = (
    {
        "name": "system-node-critical",
        "value": SYSTEM_CRITICAL_PRIORITY + 1000,
        "description": "Used for system critical pods that must not be moved from their current node.",
    },
    {
        "name": "system-cluster-critical",
        "value": SYSTEM_CRITICAL_PRIORITY,
        "description": "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    },
)


class PriorityRefused(Exception):
    """The pod's priority cannot be admitted; the message is upstream's."""


def _known_system_class(name: str, value: int, global_default: bool) -> str | None:
    """IsKnownSystemPriorityClass: None if it is one, else why not."""
    for known in SYSTEM_CLASSES:
        if known["name"] == name:
            if known["value"] != value:
                return f"value of {name} PriorityClass must be {known['value']}"
            if global_default:
                return f"globalDefault of {name} PriorityClass must be false"
            return None
    return f"{name} is not a known system priority class"


def default_class(classes: list[Obj]) -> Obj | None:
    """The globalDefault class; with several, the one of lowest value (as upstream)."""
    defaults = [c for c in classes if c.get("globalDefault")]
    return min(defaults, key=lambda c: c.get("value", 0)) if defaults else None


def resolve_pod_priority(pod: Obj, classes: list[Obj]) -> None:
    """Set spec.priority (and preemptionPolicy) of a new pod from its class, as the Priority plugin does."""
    spec = pod.setdefault("spec", {})
    name = spec.get("priorityClassName")
    policy: str | None
    if not name:
        chosen = default_class(classes)
        if chosen is None:
            priority, policy = 0, PREEMPT_LOWER
        else:
            spec["priorityClassName"] = chosen["metadata"]["name"]
            priority, policy = chosen.get("value", 0), chosen.get("preemptionPolicy")
    else:
        chosen = next((c for c in classes if c["metadata"]["name"] == name), None)
        if chosen is None:
            raise PriorityRefused(f"no PriorityClass with name {name} was found")
        priority, policy = chosen.get("value", 0), chosen.get("preemptionPolicy")
    if spec.get("priority") is not None and spec["priority"] != priority:
        raise PriorityRefused(
            f"the integer value of priority ({spec['priority']}) must not be provided in pod spec; priority "
            f"admission controller computed {priority} from the given PriorityClass name"
        )
    spec["priority"] = priority
    if policy is not None:
        if spec.get("preemptionPolicy") is not None and spec["preemptionPolicy"] != policy:
            raise PriorityRefused(
                f"the string value of PreemptionPolicy ({spec['preemptionPolicy']}) must not be provided in pod "
                f"spec; priority admission controller computed {policy} from the given PriorityClass name"
            )
        spec["preemptionPolicy"] = policy


class Priority:
    """The Priority admission plugin: resolves pods' priorities; one globalDefault class at most."""

    name = "Priority"

    def admit(self, request: AdmissionRequest) -> None:
        if request.kind is not POD or request.subresource:
            return
        spec = request.obj.setdefault("spec", {})
        if request.operation == "UPDATE":
            # Set on create; an update that leaves them out keeps them (validation refuses changes).
            old = (request.old or {}).get("spec") or {}
            for field in ("priority", "preemptionPolicy"):
                if spec.get(field) is None and old.get(field) is not None:
                    spec[field] = old[field]
            return
        try:
            resolve_pod_priority(request.obj, _classes(request.registry))
        except PriorityRefused as err:
            raise errors.forbidden_request(
                f'pods "{request.name}" is forbidden: {err}', "pods", "", request.name
            ) from None

    def validate(self, request: AdmissionRequest) -> None:
        if request.kind is not KIND or not request.obj.get("globalDefault"):
            return
        chosen = default_class(
            [c for c in _classes(request.registry) if c["metadata"]["name"] != request.name]
        )
        if chosen is not None:
            raise errors.forbidden_request(
                f'{KIND.resource} "{request.name}" is forbidden: PriorityClass {chosen["metadata"]["name"]} is '
                "already marked as default. Only one default can exist",
                KIND.plural,
                KIND.group,
                request.name,
            )


def _classes(registry: Registry) -> list[Obj]:
    return [c.obj for c in registry.cache.list(KIND.bucket, KIND.prefix(""))]


class PriorityClass(Kind):
    group = "scheduling.k8s.io"
    kind = "PriorityClass"
    plural = "priorityclasses"
    namespaced = False
    short_names = ("pc",)
    schema = "V1PriorityClass"
    admission = (Priority(),)
    columns = (
        tables.NAME,
        tables.column(
            "Value",
            kind="integer",
            desc="value represents the integer value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec.",
        ),
        tables.column(
            "Global-Default",
            kind="boolean",
            desc="globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class. Only one PriorityClass can be marked as `globalDefault`. However, if more than one PriorityClasses exists with their `globalDefault` field set to true, the smallest value of such global default PriorityClasses will be used as the default priority.",
        ),
        tables.AGE,
        tables.column(
            "PreemptionPolicy",
            desc="preemptionPolicy is the Policy for preempting pods with lower priority. One of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset.",
        ),
    )

    def default(self, obj: Obj, creating: bool) -> None:
        obj.setdefault("preemptionPolicy", PREEMPT_LOWER)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        errors_: list[FieldError] = []
        name = (obj.get("metadata") or {}).get("name") or ""
        value = obj.get("value", 0)
        if name.startswith(SYSTEM_PREFIX):
            why = _known_system_class(name, value, bool(obj.get("globalDefault")))
            if why is not None:
                errors_.append(
                    forbidden(
                        "metadata.name",
                        f"priority class names with '{SYSTEM_PREFIX}' prefix are "
                        f"reserved for system use only. error: {why}",
                    )
                )
        elif value > HIGHEST_USER_DEFINABLE_PRIORITY:
            errors_.append(
                forbidden(
                    "value",
                    f"maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}",
                )
            )
        policy = obj.get("preemptionPolicy")
        if policy is not None and policy not in POLICIES:
            errors_.append(not_supported("preemptionPolicy", policy, POLICIES))
        return errors_

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        errors_ = []
        if new.get("value", 0) != old.get("value", 0):
            errors_.append(forbidden("value", "may not be changed in an update."))
        return errors_ + immutable(
            "preemptionPolicy", new.get("preemptionPolicy"), old.get("preemptionPolicy")
        )

    def check_delete(self, name: str) -> None:
        if any(c["name"] == name for c in SYSTEM_CLASSES):
            raise errors.forbidden_request(
                f'{self.resource} "{name}" is forbidden: this is a system priority class and cannot be deleted',
                self.plural,
                self.group,
                name,
            )

    async def bootstrap(self, registry: Registry) -> None:
        for known in SYSTEM_CLASSES:
            await registry.ensure(
                self,
                "",
                {
                    "apiVersion": self.api_version,
                    "kind": self.kind,
                    "metadata": {"name": known["name"]},
                    "value": known["value"],
                    "description": known["description"],
                },
            )

    def cells(self, obj: Obj) -> list[Any]:
        return [
            obj["metadata"].get("name"),
            obj.get("value", 0),
            bool(obj.get("globalDefault")),
            age(obj),
            obj.get("preemptionPolicy") or "<unset>",
        ]


KIND = PriorityClass()
