"""Every failure leaves the server as a metav1.Status; this module builds them the upstream way.

Clients (kubectl, client-go, the Python client) branch on `reason` and `code`, and print `message`, so
those strings follow upstream's wording.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class FieldError:
    """One validation failure on one field (a StatusCause)."""

    type: str  # FieldValueRequired, FieldValueInvalid, ...
    field: str
    detail: str

    def message(self) -> str:
        return self.detail


def required(path: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", path, "Required value" + (f": {detail}" if detail else ""))


def _quote(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", path, f"Invalid value: {_quote(value)}: {detail}")


def not_supported(path: str, value: Any, supported: list[str]) -> FieldError:
    values = ", ".join(json.dumps(s) for s in supported)
    return FieldError(
        "FieldValueNotSupported", path, f"Unsupported value: {_quote(value)}: supported values: {values}"
    )


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError("FieldValueDuplicate", path, f"Duplicate value: {_quote(value)}")


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", path, f"Forbidden: {detail}")


def too_long(path: str, limit: int) -> FieldError:
    """field.TooLong as 1.32 words it."""
    return FieldError(
        "FieldValueTooLong", path, f"Too long: may not be more than {limit} byte{'s' if limit != 1 else ''}"
    )


def too_many(path: str, actual: int, limit: int) -> FieldError:
    return FieldError("FieldValueTooMany", path, f"Too many: {actual}: must have at most {limit} items")


class ApiError(Exception):
    """Raised anywhere below the HTTP layer; the handler renders it as a Status with `code`."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after
        self.metadata = metadata  # the Status's ListMeta (an expired list's inconsistent continue token)

    def status(self) -> dict[str, Any]:
        """The Status in the order Go marshals metav1.Status: kind, apiVersion, metadata, status, message,
        reason, details, code (clients that compare error bodies byte for byte see upstream's)."""
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.metadata or {}),
            "status": "Failure",
        }
        if self.message:  # message and reason are omitempty: an unknown reason is left out
            out["message"] = self.message
        if self.reason:
            out["reason"] = self.reason
        if self.details is not None:  # an empty StatusDetails is written as {} by upstream too
            out["details"] = self.details
        out["code"] = self.code
        return out


def _details(name: str, group: str, kind: str) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "kind": kind}
    if group:
        d["group"] = group
    return d


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{_qualified(resource, group)} "{name}" not found', _details(name, group, resource)
    )


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(resource, group)} "{name}" already exists',
        _details(name, group, resource),
    )


def conflict(resource: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}',
        _details(name, group, resource),
    )


MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def invalid_object(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    parts = [f"{e.field}: {e.detail}" if e.field else e.detail for e in errors]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details = _details(name, group, kind)
    details["causes"] = [{"reason": e.type, "message": e.detail, "field": e.field} for e in errors]
    return ApiError(
        422, "Invalid", f'{kind}{"." + group if group else ""} "{name}" is invalid: {summary}', details
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden_request(message: str, resource: str = "", group: str = "", name: str = "") -> ApiError:
    details = _details(name, group, resource) if resource else None
    return ApiError(403, "Forbidden", message, details)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media(content_type: str, strategic: bool = True) -> ApiError:
    """415 for a patch type the resource does not take (custom resources take no strategic merge)."""
    accepted = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    if strategic:
        accepted += ", application/strategic-merge-patch+json"
        return ApiError(
            415,
            "UnsupportedMediaType",
            f'the body of the request was in an unknown format - accepted media types include: {accepted}; got "{content_type}"',
        )
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: {accepted}",
    )


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}")
