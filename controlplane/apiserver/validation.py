"""Validation helpers every kind shares (upstream's apimachinery and core validation packages): object
metadata, names, labels and annotations, ports, quantities, immutable fields. Failures are FieldErrors
(422 Invalid with one cause each); messages follow upstream's wording (`spec.containers[0].image:
Required value`) because users and tools match on them. Name rules and their texts come from
`kubeclient.names`, quantities from `kubeclient.quantity`: one definition for every component.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from controlplane.apiserver.errors import FieldError, forbidden, invalid, required, too_long
from kubeclient import names
from kubeclient.quantity import FORMAT_ERROR, Quantity, QuantityError

Obj = dict[str, Any]
NameCheck = Callable[[str, str], list[FieldError]]

NEGATIVE = "must be greater than or equal to 0"
IMMUTABLE = "field is immutable"
_STANDARD_FINALIZERS = ("kubernetes", "orphan", "foregroundDeletion")
_ANNOTATIONS_LIMIT = 256 * 1024


def _invalid_each(path: str, value: str, messages: list[str]) -> list[FieldError]:
    return [invalid(path, value, m) for m in messages]


def dns_label(path: str, value: str) -> list[FieldError]:
    return _invalid_each(path, value, names.dns1123_label(value))


def dns1035_label(path: str, value: str) -> list[FieldError]:
    return _invalid_each(path, value, names.dns1035_label(value))


def dns_subdomain(path: str, value: str) -> list[FieldError]:
    return _invalid_each(path, value, names.dns1123_subdomain(value))


def qualified_name(path: str, value: str) -> list[FieldError]:
    return _invalid_each(path, value, names.qualified_name(value))


def no_name_rule(path: str, value: str) -> list[FieldError]:
    """For kinds whose names upstream does not check (Events carry dots and timestamps freely)."""
    return []


def path_segment(name: str) -> list[str]:
    """IsValidPathSegmentName: every name becomes a URL path segment (upstream checks it for all kinds)."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in "/%" if c in name]


def labels(path: str, value: Any) -> list[FieldError]:
    """ValidateLabels: qualified-name keys, label values."""
    errors: list[FieldError] = []
    for key, val in (value or {}).items():
        errors += qualified_name(path, key)
        errors += _invalid_each(path, val, names.label_value(val))
    return errors


def annotations(path: str, value: Any) -> list[FieldError]:
    """ValidateAnnotations: qualified-name keys (lowercased), at most 256 KiB in all."""
    errors: list[FieldError] = []
    total = 0
    for key, val in (value or {}).items():
        errors += _invalid_each(path, key, names.qualified_name(key.lower()))
        total += len(key) + len(val)
    if total > _ANNOTATIONS_LIMIT:
        errors.append(too_long(path, _ANNOTATIONS_LIMIT))
    return errors


def object_meta(meta: Any, name_check: NameCheck, kube_finalizers: bool = True) -> list[FieldError]:
    """ValidateObjectMeta: a name (or generateName), labels, annotations, finalizers, owners.
    `kube_finalizers`: the built-in kinds' rule that a finalizer without a "/" is a standard one;
    custom resources only need qualified names (and get a warning instead: finalizer_warnings)."""
    if not isinstance(meta, dict):
        return [required("metadata.name", "name or generateName is required")]
    errors: list[FieldError] = []
    name = meta.get("name")
    if not name:
        errors.append(required("metadata.name", "name or generateName is required"))
    else:
        errors += name_check("metadata.name", name) or _invalid_each(
            "metadata.name", name, path_segment(name)
        )
    errors += labels("metadata.labels", meta.get("labels"))
    errors += annotations("metadata.annotations", meta.get("annotations"))
    for i, f in enumerate(meta.get("finalizers") or []):
        path = f"metadata.finalizers[{i}]"
        problems = names.qualified_name(f)
        if problems:
            errors += _invalid_each(path, f, problems)
        elif kube_finalizers and "/" not in f and f not in _STANDARD_FINALIZERS:
            errors.append(
                invalid(path, f, "name is neither a standard finalizer name nor is it fully qualified")
            )
    for i, ref in enumerate(meta.get("ownerReferences") or []):
        for field in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(field):
                errors.append(required(f"metadata.ownerReferences[{i}].{field}"))
    return errors


def finalizer_warnings(new: Any, old: Any) -> list[str]:
    """Upstream's warnings for the finalizers a custom resource gains: one without a "/" that is not a
    standard name works but may clash with another writer's."""
    before = set(((old or {}).get("metadata") or {}).get("finalizers") or [])
    out = []
    for f in sorted(set(((new or {}).get("metadata") or {}).get("finalizers") or []) - before):
        if isinstance(f, str) and "/" not in f and f not in _STANDARD_FINALIZERS:
            out.append(
                f'metadata.finalizers: "{f}": prefer a domain-qualified finalizer name including a path (/) '
                "to avoid accidental conflicts with other finalizer writers"
            )
    return out


def port_number(path: str, value: Any) -> list[FieldError]:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        return [invalid(path, value, "must be between 1 and 65535, inclusive")]
    return []


IP_FORMAT = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"


def _ip(value: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(value) if isinstance(value, str) else None
    except ValueError:
        return None


def ip_address(path: str, value: Any, family: int = 0) -> list[FieldError]:
    """IsValidIP / IsValidIPv4Address / IsValidIPv6Address (family 0, 4 or 6)."""
    ip = _ip(value)
    if family == 4 and (ip is None or ip.version != 4):
        return [invalid(path, value, "must be a valid IPv4 address")]
    if family == 6 and (ip is None or ip.version != 6):
        return [invalid(path, value, "must be a valid IPv6 address")]
    return [invalid(path, value, IP_FORMAT)] if ip is None else []


def endpoint_ip(path: str, value: Any) -> list[FieldError]:
    """ValidateEndpointIP: no unspecified, loopback or link-local addresses behind a Service."""
    ip = _ip(value)
    if ip is None:
        return [invalid(path, value, "must be a valid IP address")]
    errors: list[FieldError] = []
    if ip.is_unspecified:
        errors.append(invalid(path, value, f"may not be unspecified ({value})"))
    if ip.is_loopback:
        errors.append(invalid(path, value, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
    if ip.is_link_local and not ip.is_multicast:
        errors.append(invalid(path, value, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
    if ip in ipaddress.ip_network("224.0.0.0/24") or ip in ipaddress.ip_network("ff02::/16"):
        errors.append(
            invalid(path, value, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)")
        )
    return errors


def nonnegative(path: str, value: Any) -> list[FieldError]:
    if isinstance(value, int) and value < 0:
        return [invalid(path, value, NEGATIVE)]
    return []


@lru_cache(maxsize=4096)
def quantity(text: str) -> Quantity | None:
    """The quantity a (decoded, so canonical) string holds; None if it holds none. Cached: they repeat."""
    try:
        return Quantity.parse(text)
    except QuantityError:
        return None


def nonnegative_quantity(path: str, text: Any) -> list[FieldError]:
    """ValidateNonnegativeQuantity (the value is shown in canonical form, as upstream)."""
    quantity_ = quantity(text)
    if quantity_ is None:
        return [invalid(path, text, FORMAT_ERROR)]
    if quantity_.sign() < 0:
        return [invalid(path, str(quantity_), NEGATIVE)]
    return []


def immutable(path: str, new: Any, old: Any) -> list[FieldError]:
    """ValidateImmutableField."""
    return [] if new == old else [invalid(path, new, IMMUTABLE)]


def forbidden_change(path: str, new: Any, old: Any, detail: str) -> list[FieldError]:
    return [] if new == old else [forbidden(path, detail)]


__all__ = [
    "IMMUTABLE",
    "IP_FORMAT",
    "NEGATIVE",
    "annotations",
    "dns_label",
    "dns_subdomain",
    "endpoint_ip",
    "forbidden_change",
    "immutable",
    "ip_address",
    "labels",
    "no_name_rule",
    "nonnegative",
    "nonnegative_quantity",
    "object_meta",
    "port_number",
    "qualified_name",
]
