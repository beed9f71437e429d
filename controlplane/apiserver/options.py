"""DeleteOptions (upstream's metav1.DeleteOptions) from a DELETE's body or, without one, its query string,
and their validation (upstream's ValidateDeleteOptions: a 422 before the object is even looked up)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controlplane.apiserver import errors
from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.params import int_param

Obj = dict[str, Any]
SCHEMA = "V1DeleteOptions"

FOREGROUND = "Foreground"
BACKGROUND = "Background"
ORPHAN = "Orphan"
PROPAGATION_POLICIES = (FOREGROUND, BACKGROUND, ORPHAN)
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


@dataclass
class DeleteOptions:
    grace_period: int | None = None
    uid: str | None = None
    resource_version: str | None = None
    propagation: str | None = None
    # The legacy field: true adds the orphan finalizer, false removes it (and asks for a 202).
    orphan_dependents: bool | None = None
    dry_run_values: list[str] = field(default_factory=list)

    @property
    def dry_run(self) -> bool:
        return "All" in self.dry_run_values

    @classmethod
    def parse(cls, body: Obj | None, query: Any) -> DeleteOptions:
        """`body`: the decoded (typed) DeleteOptions, if one came; else the query string's parameters
        (upstream reads one or the other, never both)."""
        if body is not None:
            pre = body.get("preconditions") or {}
            return cls(
                grace_period=body.get("gracePeriodSeconds"),
                uid=pre.get("uid"),
                resource_version=pre.get("resourceVersion"),
                propagation=body.get("propagationPolicy"),
                orphan_dependents=body.get("orphanDependents"),
                dry_run_values=list(body.get("dryRun") or []),
            )
        grace = None
        if query.get("gracePeriodSeconds") not in (None, ""):
            grace = int_param(query, "gracePeriodSeconds")
        return cls(
            grace_period=grace,
            propagation=query.get("propagationPolicy") or None,
            orphan_dependents=_bool_param(query, "orphanDependents"),
            dry_run_values=list(query.getall("dryRun", []))
            if hasattr(query, "getall")
            else _listed(query.get("dryRun")),
        )

    def problems(self) -> list[FieldError]:
        """ValidateDeleteOptions."""
        out: list[FieldError] = []
        if self.orphan_dependents is not None and self.propagation is not None:
            out.append(
                errors.invalid(
                    "propagationPolicy",
                    self.propagation,
                    "orphanDependents and deletionPropagation cannot be both set",
                )
            )
        if self.propagation is not None and self.propagation not in PROPAGATION_POLICIES:
            out.append(
                errors.not_supported("propagationPolicy", self.propagation, [*PROPAGATION_POLICIES, "nil"])
            )
        unknown = [v for v in self.dry_run_values if v != "All"]
        if unknown:
            # field.NotSupported prints the []string with Go's %#v.
            shown = "[]string{" + ", ".join(f'"{v}"' for v in self.dry_run_values) + "}"
            out.append(
                FieldError(
                    "FieldValueNotSupported", "dryRun", f'Unsupported value: {shown}: supported values: "All"'
                )
            )
        return out

    def check(self) -> DeleteOptions:
        """self, or the 422 upstream answers: `DeleteOptions.meta.k8s.io "" is invalid: ...`."""
        problems = self.problems()
        if problems:
            raise errors.invalid_object("DeleteOptions", "meta.k8s.io", "", problems)
        return self


def _listed(value: Any) -> list[str]:
    return [] if value in (None, "") else [str(value)]


def _bool_param(query: Any, name: str) -> bool | None:
    """A bool query parameter as upstream's parameter codec reads it (strconv.ParseBool), None if absent."""
    text = query.get(name)
    if text in (None, ""):
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise errors.bad_request(
        f'invalid value "{text}" for query parameter {name}: strconv.ParseBool: parsing "{text}": invalid syntax'
    )
