"""node.k8s.io/v1 RuntimeClass: names a container runtime configuration (the CRI handler) pods may
ask for, with its pod overhead and scheduling constraints.

The RuntimeClass admission plugin lives here too, as upstream's plugin/pkg/admission/runtimeclass: a new
pod naming a class that does not exist is refused (403 `pod rejected: RuntimeClass "x" not found`), the
class's overhead becomes the pod's `spec.overhead` and its scheduling constraints are merged into the
pod's nodeSelector and tolerations, so the scheduler and the kubelet see what the class costs and needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controlplane.apiserver import errors, tables
from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.kinds.pod import KIND as POD
from controlplane.apiserver.kinds.podspec import validate_resources
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import dns_label, immutable, labels

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import AdmissionRequest

Obj = dict[str, Any]


class Refused(Exception):
    pass


def _covers(have: Obj, want: Obj) -> bool:
    """Whether toleration `have` already tolerates everything `want` does (upstream's isSuperset)."""
    if have.get("key", "") != want.get("key", "") and have.get("key", ""):
        return False
    if have.get("effect", "") and have.get("effect", "") != want.get("effect", ""):
        return False
    if want.get("effect") == "NoExecute" and have.get("tolerationSeconds") is not None:
        if want.get("tolerationSeconds") is None or want["tolerationSeconds"] > have["tolerationSeconds"]:
            return False
    if have.get("operator", "Equal") == "Exists":
        return True
    return want.get("operator", "Equal") == "Equal" and have.get("value", "") == want.get("value", "")


def merge_tolerations(pod: list[Obj], extra: list[Obj]) -> list[Obj]:
    """The pod's tolerations plus the class's that none of them already covers (upstream's
    MergeTolerations keeps the union without redundant entries)."""
    merged = list(pod)
    for toleration in extra:
        if not any(_covers(have, toleration) for have in merged):
            merged = [t for t in merged if not _covers(toleration, t)] + [toleration]
    return merged


def apply_runtime_class(pod: Obj, rc: Obj | None) -> None:
    """Admit: the class's overhead and scheduling onto the pod spec; Refused on a conflict."""
    spec = pod.setdefault("spec", {})
    if rc is not None and rc.get("overhead") is not None:
        fixed = rc["overhead"].get("podFixed") or {}
        if spec.get("overhead") and spec["overhead"] != fixed:
            raise Refused("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead")
        spec["overhead"] = fixed
    scheduling = (rc or {}).get("scheduling")
    if scheduling is None:
        return
    selector = dict(spec.get("nodeSelector") or {})
    for key, value in (scheduling.get("nodeSelector") or {}).items():
        if key in selector and selector[key] != value:
            raise Refused(
                f"conflict: runtimeClass.scheduling.nodeSelector[{key}] = {value}; "
                f"pod.spec.nodeSelector[{key}] = {selector[key]}"
            )
        selector[key] = value
    if selector:
        spec["nodeSelector"] = selector
    tolerations = merge_tolerations(spec.get("tolerations") or [], scheduling.get("tolerations") or [])
    if tolerations:
        spec["tolerations"] = tolerations


def check_overhead(pod: Obj, rc: Obj | None) -> None:
    """Validate: a pod's overhead must be exactly its class's."""
    overhead = (pod.get("spec") or {}).get("overhead")
    if not overhead:
        return
    if rc is None or rc.get("overhead") is None:
        raise Refused("pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead")
    if overhead != (rc["overhead"].get("podFixed") or {}):
        raise Refused("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead")


class RuntimeClassAdmission:
    """Upstream's RuntimeClass admission plugin (on by default): pod creates only."""

    name = "RuntimeClass"

    def _class(self, request: AdmissionRequest) -> Obj | None:
        name = ((request.obj.get("spec") or {}).get("runtimeClassName")) or None
        if name is None:
            return None
        stored = request.registry.cache.get(KIND.key("", name))
        if stored is None:
            raise Refused(f'pod rejected: RuntimeClass "{name}" not found')
        return stored.obj

    def _run(self, request: AdmissionRequest, step: Any) -> None:
        if request.kind is not POD or request.subresource or request.operation != "CREATE":
            return
        try:
            step(request.obj, self._class(request))
        except Refused as err:
            raise errors.forbidden_request(
                f'pods "{request.name}" is forbidden: {err}', "pods", "", request.name
            ) from None

    def admit(self, request: AdmissionRequest) -> None:
        self._run(request, apply_runtime_class)

    def validate(self, request: AdmissionRequest) -> None:
        self._run(request, check_overhead)


class RuntimeClass(Kind):
    group = "node.k8s.io"
    kind = "RuntimeClass"
    plural = "runtimeclasses"
    namespaced = False
    schema = "V1RuntimeClass"
    type_marks = {("V1Overhead", "podFixed"): "map[quantity]"}
    columns = (tables.NAME, tables.column("Handler"), tables.AGE)
    admission = (RuntimeClassAdmission(),)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        errors = dns_label("handler", obj.get("handler", ""))
        overhead = obj.get("overhead")
        if overhead is not None:
            # upstream reuses the container resource rules, as limits
            errors += validate_resources("overhead", {"limits": overhead.get("podFixed") or {}})
        scheduling = obj.get("scheduling") or {}
        errors += labels("scheduling.nodeSelector", scheduling.get("nodeSelector"))
        return errors

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        return immutable("handler", new.get("handler"), old.get("handler"))

    def cells(self, obj: Obj) -> list[Any]:
        return [obj["metadata"].get("name"), obj.get("handler", ""), age(obj)]


KIND = RuntimeClass()
