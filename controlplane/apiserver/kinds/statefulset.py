"""apps/v1 StatefulSet: upstream's defaults (OrderedReady, RollingUpdate with partition 0, a history of
10, the Retain/Retain claim retention policy, one replica), validation (ValidateStatefulSetSpec: policy
names, a non-empty selector matching the template's labels, pods that always restart and have no
deadline; ValidateStatefulSetUpdate: only replicas, ordinals, template, updateStrategy, the retention
policy and minReadySeconds may change), the status and scale subresources and kubectl's columns.

`rollingUpdate.maxUnavailable` sits behind the MaxUnavailableStatefulSet gate, off in 1.32: as upstream's
dropStatefulSetDisabledFields, the server drops it unless the stored object already had it. The
controller manager's statefulset loop makes the pods (`controlplane/controllers/statefulset/`).
"""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, forbidden, invalid, not_supported, required
from controlplane.apiserver.kinds import podspec
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.kinds.scale import SCALE
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import labels, nonnegative
from kubeclient.selectors import SelectorError, from_label_selector

Obj = dict[str, Any]

ORDERED_READY, PARALLEL = "OrderedReady", "Parallel"
ROLLING_UPDATE, ON_DELETE = "RollingUpdate", "OnDelete"
RETAIN, DELETE = "Retain", "Delete"
# The spec fields an update may change (ValidateStatefulSetUpdate); the rest must stay as stored.
MUTABLE = (
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
)
FORBIDDEN_UPDATE = (
    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', "
    "'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"
)
TYPE_MARKS = {
    **podspec.TYPE_MARKS,
    ("V1RollingUpdateStatefulSetStrategy", "maxUnavailable"): "int-or-string",
}


def _default_claim_template(claim: Obj) -> None:
    """SetDefaults_PersistentVolumeClaim on each volumeClaimTemplate (its status phase Pending too)."""
    spec = claim.setdefault("spec", {})
    spec.setdefault("volumeMode", "Filesystem")
    claim.setdefault("status", {}).setdefault("phase", "Pending")


def _validate_policy_names(spec: Obj) -> list[FieldError]:
    errors: list[FieldError] = []
    policy = spec.get("podManagementPolicy")
    if not policy:
        errors.append(required("spec.podManagementPolicy"))
    elif policy not in (ORDERED_READY, PARALLEL):
        errors.append(
            invalid("spec.podManagementPolicy", policy, f"must be '{ORDERED_READY}' or '{PARALLEL}'")
        )
    strategy = spec.get("updateStrategy") or {}
    kind = strategy.get("type")
    rolling = strategy.get("rollingUpdate")
    if not kind:
        errors.append(required("spec.updateStrategy"))
    elif kind == ON_DELETE:
        if rolling is not None:
            errors.append(
                invalid(
                    "spec.updateStrategy.rollingUpdate",
                    rolling,
                    f"only allowed for updateStrategy '{ROLLING_UPDATE}'",
                )
            )
    elif kind == ROLLING_UPDATE:
        if isinstance(rolling, dict):
            errors += nonnegative("spec.updateStrategy.rollingUpdate.partition", rolling.get("partition"))
    else:
        errors.append(
            invalid("spec.updateStrategy", strategy, f"must be '{ROLLING_UPDATE}' or '{ON_DELETE}'")
        )
    retention = spec.get("persistentVolumeClaimRetentionPolicy") or {}
    for field in ("whenDeleted", "whenScaled"):
        value = retention.get(field)
        if value not in (RETAIN, DELETE):
            errors.append(
                not_supported(
                    f"spec.persistentVolumeClaimRetentionPolicy.{field}", value or "", [RETAIN, DELETE]
                )
            )
    return errors


def _with_claim_volumes(pod_spec: Any, spec: Obj) -> Any:
    """The template's pod spec as the controller makes it: a volume per volumeClaimTemplate, so that
    containers may mount the claims."""
    if not isinstance(pod_spec, dict):
        return pod_spec
    volumes = list(pod_spec.get("volumes") or [])
    names = {v.get("name") for v in volumes if isinstance(v, dict)}
    for claim in spec.get("volumeClaimTemplates") or []:
        name = ((claim or {}).get("metadata") or {}).get("name") if isinstance(claim, dict) else None
        if name and name not in names:
            volumes.append({"name": name, "persistentVolumeClaim": {"claimName": name}})
    return {**pod_spec, "volumes": volumes} if volumes else pod_spec


def _validate_template(spec: Obj) -> list[FieldError]:
    errors: list[FieldError] = []
    selector = spec.get("selector")
    if not isinstance(selector, dict):
        errors.append(required("spec.selector"))
        selector = None
    elif not (selector.get("matchLabels") or selector.get("matchExpressions")):
        errors.append(invalid("spec.selector", selector, "empty selector is not valid for statefulset."))
    template = spec.get("template")
    if not isinstance(template, dict):
        return [*errors, required("spec.template")]
    template_labels = (template.get("metadata") or {}).get("labels")
    errors += labels("spec.template.metadata.labels", template_labels)
    if selector is not None:
        try:
            parsed = from_label_selector(selector)
        except SelectorError as err:
            errors.append(invalid("spec.selector", selector, str(err)))
        else:
            if not parsed.empty and not parsed.matches(template_labels or {}):
                errors.append(
                    invalid(
                        "spec.template.metadata.labels",
                        template_labels,
                        "`selector` does not match template `labels`",
                    )
                )
    pod_spec = template.get("spec")
    errors += podspec.validate_pod_spec(_with_claim_volumes(pod_spec, spec), "spec.template.spec")
    if isinstance(pod_spec, dict):
        restart = pod_spec.get("restartPolicy")
        if restart not in (None, "Always"):
            errors.append(not_supported("spec.template.spec.restartPolicy", restart, ["Always"]))
        deadline = pod_spec.get("activeDeadlineSeconds")
        if deadline is not None:
            errors.append(
                invalid("spec.template.spec.activeDeadlineSeconds", deadline, "must not be specified")
            )
    return errors


def validate_statefulset_spec(spec: Any) -> list[FieldError]:
    """ValidateStatefulSetSpec, in upstream's order."""
    if not isinstance(spec, dict):
        return [required("spec")]
    errors = _validate_policy_names(spec)
    errors += nonnegative("spec.replicas", spec.get("replicas"))
    ordinals = spec.get("ordinals")
    if isinstance(ordinals, dict):
        errors += nonnegative("spec.ordinals.start", ordinals.get("start"))
    errors += nonnegative("spec.minReadySeconds", spec.get("minReadySeconds"))
    errors += nonnegative("spec.revisionHistoryLimit", spec.get("revisionHistoryLimit"))
    return errors + _validate_template(spec)


def _frozen(spec: Obj) -> Obj:
    return {k: v for k, v in spec.items() if k not in MUTABLE}


class StatefulSet(Kind):
    group = "apps"
    kind = "StatefulSet"
    plural = "statefulsets"
    short_names = ("sts",)
    categories = ("all",)
    schema = "V1StatefulSet"
    type_marks = TYPE_MARKS
    generation = True
    subresources = (StatusSubresource("StatefulSet", "apps"), SCALE)
    columns = (
        tables.NAME,
        tables.column("Ready", desc="Number of the pod with ready state"),
        tables.AGE,
        tables.TEMPLATE_CONTAINERS,
        tables.TEMPLATE_IMAGES,
    )

    def default(self, obj: Obj, creating: bool) -> None:
        spec = obj.setdefault("spec", {})
        if not spec.get("podManagementPolicy"):
            spec["podManagementPolicy"] = ORDERED_READY
        strategy = spec.setdefault("updateStrategy", {})
        if not strategy.get("type"):
            strategy["type"] = ROLLING_UPDATE
            strategy.setdefault("rollingUpdate", {})
        if strategy["type"] == ROLLING_UPDATE and isinstance(strategy.get("rollingUpdate"), dict):
            strategy["rollingUpdate"].setdefault("partition", 0)
        retention = spec.get("persistentVolumeClaimRetentionPolicy")
        if not isinstance(retention, dict):
            retention = spec["persistentVolumeClaimRetentionPolicy"] = {}
        for field in ("whenDeleted", "whenScaled"):
            if not retention.get(field):
                retention[field] = RETAIN
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        for claim in spec.get("volumeClaimTemplates") or []:
            if isinstance(claim, dict):
                _default_claim_template(claim)
        podspec.default_template(spec)

    @staticmethod
    def _drop_max_unavailable(new: Obj, old: Obj | None) -> None:
        """dropStatefulSetDisabledFields: MaxUnavailableStatefulSet is off in 1.32."""

        def rolling(obj: Obj | None) -> Obj:
            strategy = ((obj or {}).get("spec") or {}).get("updateStrategy") or {}
            value = strategy.get("rollingUpdate")
            return value if isinstance(value, dict) else {}

        if rolling(old).get("maxUnavailable") is None:
            rolling(new).pop("maxUnavailable", None)

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)
        self._drop_max_unavailable(obj, None)

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        super().prepare_for_update(new, old)
        self._drop_max_unavailable(new, old)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validate_statefulset_spec(obj.get("spec"))

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        if _frozen(new.get("spec") or {}) != _frozen(old.get("spec") or {}):
            return [forbidden("spec", FORBIDDEN_UPDATE)]
        return []

    def cells(self, obj: Obj) -> list[Any]:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        names, images = tables.containers_images((spec.get("template") or {}).get("spec") or {})
        return [
            obj["metadata"].get("name"),
            f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
            age(obj),
            names,
            images,
        ]


KIND = StatefulSet()
