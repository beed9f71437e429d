"""The LimitRanger admission plugin (upstream's plugin/pkg/admission/limitranger): a new pod's
containers (and init containers) get the requests and limits their namespace's LimitRanges default
(`defaultRequest`, `default`), recorded in the `kubernetes.io/limit-ranger` annotation; then pods and
claims are checked against each LimitRange's min, max and maxLimitRequestRatio per Container, per Pod
and per PersistentVolumeClaim, refused with upstream's texts (`maximum cpu usage per Container is 1, but
limit is 2`). Pod updates are not checked (containers cannot change), claim updates are."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controlplane.apiserver import errors
from controlplane.quota import podresources
from controlplane.quota.resources import Resources, parse
from kubeclient.quantity import Quantity

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.base import Kind
    from controlplane.apiserver.kinds.ports import AdmissionRequest

Obj = dict[str, Any]
ANNOTATION = "kubernetes.io/limit-ranger"
CONTAINER, POD, CLAIM = "Container", "Pod", "PersistentVolumeClaim"


def _milli(q: Quantity | None) -> int:
    return q.milli_value() if q is not None else 0


def min_constraint(
    kind: str, name: str, enforced: Quantity, requests: Resources, limits: Resources
) -> str | None:
    req, lim = requests.get(name), limits.get(name)
    if req is None:
        return f"minimum {name} usage per {kind} is {enforced}.  No request is specified"
    if _milli(req) < _milli(enforced):
        return f"minimum {name} usage per {kind} is {enforced}, but request is {req}"
    if lim is not None and _milli(lim) < _milli(enforced):
        return f"minimum {name} usage per {kind} is {enforced}, but limit is {lim}"
    return None


def max_request_constraint(kind: str, name: str, enforced: Quantity, requests: Resources) -> str | None:
    req = requests.get(name)
    if req is None:
        return f"maximum {name} usage per {kind} is {enforced}.  No request is specified"
    if _milli(req) > _milli(enforced):
        return f"maximum {name} usage per {kind} is {enforced}, but request is {req}"
    return None


def max_constraint(
    kind: str, name: str, enforced: Quantity, requests: Resources, limits: Resources
) -> str | None:
    req, lim = requests.get(name), limits.get(name)
    if lim is None:
        return f"maximum {name} usage per {kind} is {enforced}.  No limit is specified"
    if _milli(lim) > _milli(enforced):
        return f"maximum {name} usage per {kind} is {enforced}, but limit is {lim}"
    if req is not None and _milli(req) > _milli(enforced):
        return f"maximum {name} usage per {kind} is {enforced}, but request is {req}"
    return None


def ratio_constraint(
    kind: str, name: str, enforced: Quantity, requests: Resources, limits: Resources
) -> str | None:
    req, lim = requests.get(name), limits.get(name)
    if req is None or _milli(req) == 0:
        return f"{name} max limit to request ratio per {kind} is {enforced}, but no request is specified or request is 0"
    if lim is None or _milli(lim) == 0:
        return f"{name} max limit to request ratio per {kind} is {enforced}, but no limit is specified or limit is 0"
    ratio = _milli(lim) / _milli(req)
    if ratio * 1000 > _milli(enforced):
        return f"{name} max limit to request ratio per {kind} is {enforced}, but provided ratio is {ratio:f}"
    return None


def _items(limit_range: Obj, kind: str) -> list[Obj]:
    return [i for i in (limit_range.get("spec") or {}).get("limits") or [] if i.get("type") == kind]


def _bounds(item: Obj, kind: str, requests: Resources, limits: Resources, claim: bool = False) -> list[str]:
    found: list[str | None] = []
    for name, q in sorted(parse(item.get("min")).items()):
        found.append(min_constraint(kind, name, q, requests, limits))
    for name, q in sorted(parse(item.get("max")).items()):
        found.append(
            max_request_constraint(kind, name, q, requests)
            if claim
            else max_constraint(kind, name, q, requests, limits)
        )
    if not claim:
        for name, q in sorted(parse(item.get("maxLimitRequestRatio")).items()):
            found.append(ratio_constraint(kind, name, q, requests, limits))
    return [f for f in found if f]


def validate_pod(limit_range: Obj, pod: Obj) -> list[str]:
    problems: list[str] = []
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    for item in _items(limit_range, CONTAINER):
        for c in containers:
            problems += _bounds(
                item,
                CONTAINER,
                podresources.container_resources(c, "requests"),
                podresources.container_resources(c, "limits"),
            )
    for item in _items(limit_range, POD):
        problems += _bounds(
            item, POD, podresources.pod_resources(pod, "requests"), podresources.pod_resources(pod, "limits")
        )
    return problems


def validate_claim(limit_range: Obj, pvc: Obj) -> list[str]:
    requests = parse(((pvc.get("spec") or {}).get("resources") or {}).get("requests"))
    problems: list[str] = []
    for item in _items(limit_range, CLAIM):
        problems += _bounds(item, CLAIM, requests, {}, claim=True)
    return problems


def aggregate(messages: list[str]) -> str:
    """utilerrors.NewAggregate's text: one message alone, several (each once) in brackets."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def _merge(container: Obj, requests: dict[str, Any], limits: dict[str, Any], prefix: str) -> list[str]:
    """mergeContainerResources: fill what the container leaves out; the annotation's phrases."""
    resources = container.setdefault("resources", {})
    notes = []
    for which, defaults, word in (("requests", requests, "request"), ("limits", limits, "limit")):
        have = resources.get(which) or {}
        added = sorted(k for k in defaults if k not in have)
        if added:
            resources[which] = {**have, **{k: defaults[k] for k in added}}
            notes.append(f"{', '.join(added)} {word} for {prefix} {container.get('name', '')}")
    return notes


def default_pod(limit_range: Obj, pod: Obj) -> None:
    """PodMutateLimitFunc with defaultContainerResourceRequirements of one LimitRange."""
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    for item in _items(limit_range, CONTAINER):
        requests.update(item.get("defaultRequest") or {})
        limits.update(item.get("default") or {})
    if not requests and not limits:
        return
    spec = pod.setdefault("spec", {})
    notes: list[str] = []
    for c in spec.get("containers") or []:
        notes += _merge(c, requests, limits, "container")
    for c in spec.get("initContainers") or []:
        notes += _merge(c, requests, limits, "init container")
    if notes:
        meta = pod.setdefault("metadata", {})
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            ANNOTATION: "LimitRanger plugin set: " + "; ".join(notes),
        }


class LimitRanger:
    name = "LimitRanger"

    def __init__(self, limit_range_kind: Kind) -> None:
        self.kind = limit_range_kind

    def _ranges(self, request: AdmissionRequest) -> list[Obj]:
        cached = request.registry.cache.list(self.kind.bucket, self.kind.prefix(request.namespace))
        return [c.obj for c in cached]

    @staticmethod
    def _target(request: AdmissionRequest) -> str:
        """ "pods", "persistentvolumeclaims", or "" when the write is none of LimitRanger's."""
        res = request.kind
        if request.subresource or res.group or not request.namespace:
            return ""
        if res.plural == "pods" and request.operation == "CREATE":
            return "pods"
        if res.plural == "persistentvolumeclaims" and request.operation in ("CREATE", "UPDATE"):
            return "persistentvolumeclaims"
        return ""

    def admit(self, request: AdmissionRequest) -> None:
        if self._target(request) != "pods":
            return
        for limit_range in self._ranges(request):
            default_pod(limit_range, request.obj)

    def validate(self, request: AdmissionRequest) -> None:
        target = self._target(request)
        if not target:
            return
        for limit_range in self._ranges(request):
            check = validate_pod if target == "pods" else validate_claim
            problems = check(limit_range, request.obj)
            if problems:
                name = request.obj.get("metadata", {}).get("name", "") or request.name
                raise errors.forbidden_request(
                    f'{target} "{name}" is forbidden: {aggregate(problems)}', target, "", name
                )
