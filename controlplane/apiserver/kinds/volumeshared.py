"""What PersistentVolumes, PersistentVolumeClaims and StorageClasses share (upstream's core validation of
persistent volumes and `pkg/apis/core/helper`): access modes and their short forms, volume modes, class
names, the node selectors of volume node affinity, the default-class annotations, the protection
finalizers. The class of a claim or a volume (and the beta annotation) comes from kubeclient.volumes,
which the controllers, the scheduler and the agent read too: one definition of each rule.
"""

from __future__ import annotations

from typing import Any

from controlplane.apiserver.errors import FieldError, forbidden, invalid, not_supported, required
from controlplane.apiserver.validation import dns_subdomain, qualified_name, quantity
from kubeclient.volumes import BETA_CLASS as BETA_CLASS_ANNOTATION
from kubeclient.volumes import claim_class, volume_class

Obj = dict[str, Any]

RWO, ROX, RWX, RWOP = "ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"
# helper.GetAccessModesAsString's order and short forms.
ACCESS_MODE_SHORT = {RWO: "RWO", ROX: "ROX", RWX: "RWX", RWOP: "RWOP"}
SUPPORTED_ACCESS_MODES = sorted(ACCESS_MODE_SHORT)
VOLUME_MODES = ["Block", "Filesystem"]
FILESYSTEM = "Filesystem"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
BETA_DEFAULT_CLASS_ANNOTATION = "storageclass.beta.kubernetes.io/is-default-class"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
PV_PROTECTION = "kubernetes.io/pv-protection"
POSITIVE = "must be greater than zero"
NODE_SELECTOR_OPERATORS = ["DoesNotExist", "Exists", "Gt", "In", "Lt", "NotIn"]


def access_modes_string(modes: list[str] | None) -> str:
    """GetAccessModesAsString: `RWO,ROX` in upstream's order, each once."""
    present = set(modes or [])
    return ",".join(short for mode, short in ACCESS_MODE_SHORT.items() if mode in present)


def validate_access_modes(path: str, modes: Any, missing: str) -> list[FieldError]:
    """At least one, each known, ReadWriteOncePod alone."""
    modes = modes if isinstance(modes, list) else []
    if not modes:
        return [required(path, missing)]
    errors = [not_supported(path, m, SUPPORTED_ACCESS_MODES) for m in modes if m not in ACCESS_MODE_SHORT]
    if RWOP in modes and len(modes) > 1:
        errors.append(forbidden(path, "may not use ReadWriteOncePod with other access modes"))
    return errors


def validate_volume_mode(path: str, mode: Any) -> list[FieldError]:
    if mode is not None and mode not in VOLUME_MODES:
        return [not_supported(path, mode, VOLUME_MODES)]
    return []


def validate_class_name(path: str, name: Any) -> list[FieldError]:
    """ValidateClassName (a DNS subdomain), when set and not empty."""
    return dns_subdomain(path, name) if isinstance(name, str) and name else []


def positive_storage(path: str, value: Any) -> list[FieldError]:
    """ValidatePositiveQuantityValue of a storage size."""
    parsed = quantity(value) if isinstance(value, str) else None
    if parsed is None:
        return [invalid(path, value, "must be a valid quantity")]
    if parsed.sign() <= 0:
        return [invalid(path, str(parsed), POSITIVE)]
    return []


def storage_bytes(value: Any) -> int:
    """The bytes a storage quantity holds (0 when absent or not one)."""
    parsed = quantity(value) if isinstance(value, str) else None
    return parsed.value() if parsed is not None else 0


def validate_node_selector(path: str, selector: Any) -> list[FieldError]:
    """ValidateNodeSelector: at least one term; each requirement a qualified key and a known operator."""
    selector = selector if isinstance(selector, dict) else {}
    terms = selector.get("nodeSelectorTerms") or []
    if not terms:
        return [required(f"{path}.nodeSelectorTerms", "must have at least one node selector term")]
    errors: list[FieldError] = []
    for i, term in enumerate(terms):
        term = term if isinstance(term, dict) else {}
        for kind in ("matchExpressions", "matchFields"):
            for j, req in enumerate(term.get(kind) or []):
                where = f"{path}.nodeSelectorTerms[{i}].{kind}[{j}]"
                operator, values = req.get("operator", ""), req.get("values") or []
                if operator in ("In", "NotIn") and not values:
                    errors.append(
                        required(f"{where}.values", "must be specified when `operator` is 'In' or 'NotIn'")
                    )
                elif operator in ("Exists", "DoesNotExist") and values:
                    errors.append(
                        forbidden(
                            f"{where}.values",
                            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                        )
                    )
                elif operator in ("Gt", "Lt") and len(values) != 1:
                    errors.append(
                        required(
                            f"{where}.values",
                            "must be specified single value when `operator` is 'Lt' or 'Gt'",
                        )
                    )
                elif operator not in NODE_SELECTOR_OPERATORS:
                    errors.append(invalid(f"{where}.operator", operator, "not a valid selector operator"))
                if kind == "matchExpressions":
                    errors += qualified_name(f"{where}.key", req.get("key") or "")
    return errors


def is_default_class(sc: Obj) -> bool:
    annotations = (sc.get("metadata") or {}).get("annotations") or {}
    return (
        annotations.get(DEFAULT_CLASS_ANNOTATION) == "true"
        or annotations.get(BETA_DEFAULT_CLASS_ANNOTATION) == "true"
    )


def default_class(classes: list[Obj]) -> Obj | None:
    """The default StorageClass as upstream's GetDefaultClass picks it: the newest default, then by name."""
    defaults = [c for c in classes if is_default_class(c)]
    if not defaults:
        return None
    defaults.sort(key=lambda c: c["metadata"].get("name", ""))
    defaults.sort(key=lambda c: c["metadata"].get("creationTimestamp", ""), reverse=True)
    return defaults[0]


__all__ = [
    "ACCESS_MODE_SHORT",
    "BETA_CLASS_ANNOTATION",
    "claim_class",
    "default_class",
    "is_default_class",
    "volume_class",
]
