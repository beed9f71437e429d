"""Which combinations of list and watch options a request may ask for, with upstream's texts
(k8s.io/apimachinery/pkg/apis/meta/internalversion/validation, as 1.32 runs it with the WatchList
feature on): a 422 Invalid on `ListOptions.meta.k8s.io` naming each forbidden or unsupported choice."""

from __future__ import annotations

from collections.abc import Mapping

from controlplane.apiserver import errors
from controlplane.apiserver.errors import FieldError

NOT_OLDER_THAN = "NotOlderThan"
EXACT = "Exact"
_MATCH = "resourceVersionMatch"


def problems(query: Mapping[str, str], watch: bool) -> list[FieldError]:
    """What is wrong with the request's options (none: they may be served)."""
    match = query.get(_MATCH, "")
    initial = query.get("sendInitialEvents")
    cont = query.get("continue", "")
    out: list[FieldError] = []
    if watch:
        if initial is not None and match != NOT_OLDER_THAN:
            out.append(
                errors.forbidden(
                    _MATCH, f"sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}"
                )
            )
        if match:
            if initial is None:
                out.append(
                    errors.forbidden(
                        _MATCH,
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    )
                )
            if match != NOT_OLDER_THAN:
                out.append(errors.not_supported(_MATCH, match, [NOT_OLDER_THAN]))
            if cont:
                out.append(
                    errors.forbidden(_MATCH, "resourceVersionMatch is forbidden when continue is provided")
                )
        return out
    if match:
        if not query.get("resourceVersion", ""):
            out.append(
                errors.forbidden(
                    _MATCH, "resourceVersionMatch is forbidden unless resourceVersion is provided"
                )
            )
        if cont:
            out.append(
                errors.forbidden(_MATCH, "resourceVersionMatch is forbidden when continue is provided")
            )
        if match not in (EXACT, NOT_OLDER_THAN):
            out.append(errors.not_supported(_MATCH, match, [EXACT, NOT_OLDER_THAN, ""]))
        if match == EXACT and query.get("resourceVersion") == "0":
            out.append(
                errors.forbidden(_MATCH, 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
            )
    if initial is not None:
        out.append(errors.forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"))
    return out


def check(query: Mapping[str, str], watch: bool) -> None:
    """Raise upstream's 422 for options that may not go together."""
    found = problems(query, watch)
    if found:
        raise errors.invalid_object("ListOptions", "meta.k8s.io", "", found)
