"""Admission: mutating plugins (defaulting, lifecycle checks), then validating plugins, then storage.

Each plugin sees one `AdmissionRequest`; more plugins (node restriction, quota, service account
tokens) are added to the lists in `default_chain` without touching the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from controlplane.apiserver import defaults, validation
from controlplane.apiserver.authn import UserInfo
from controlplane.apiserver.errors import ApiError, invalid_object
from controlplane.apiserver.fieldcheck import fill_required
from controlplane.apiserver.resources import Resource

Obj = dict[str, Any]


@dataclass
class AdmissionRequest:
    operation: str  # CREATE, UPDATE
    resource: Resource
    subresource: str
    namespace: str
    name: str
    obj: Obj
    old: Obj | None
    user: UserInfo | None


class Plugin(Protocol):
    def admit(self, request: AdmissionRequest) -> None:
        """Mutate request.obj or raise ApiError."""
        ...


class Defaulting:
    def admit(self, request: AdmissionRequest) -> None:
        if request.subresource in ("", "status"):
            defaults.apply_defaults(request.resource.kind, request.obj, request.operation == "CREATE")
        fill_required(request.resource.kind, request.obj)


class Validation:
    def admit(self, request: AdmissionRequest) -> None:
        kind = request.resource.kind
        errors = validation.validate(kind, request.obj, request.resource.namespaced)
        if request.old is not None and kind == "Pod" and request.subresource != "binding":
            errors += validation.pod_update(request.old, request.obj)
        if request.old is not None and kind == "Service":
            errors += validation.service_update(request.old, request.obj)
        if request.old is not None and kind in ("Deployment", "ReplicaSet"):
            old_sel = (request.old.get("spec") or {}).get("selector")
            new_sel = (request.obj.get("spec") or {}).get("selector")
            if old_sel != new_sel:
                errors.append(validation.invalid("spec.selector", new_sel, "field is immutable"))
        if errors:
            group = request.resource.group
            raise invalid_object(kind, group, request.name, errors)


class AdmissionChain:
    def __init__(self, mutating: list[Plugin], validating: list[Plugin]) -> None:
        self.mutating = mutating
        self.validating = validating

    def run(self, request: AdmissionRequest) -> None:
        for plugin in self.mutating:
            plugin.admit(request)
        for plugin in self.validating:
            plugin.admit(request)


def default_chain() -> AdmissionChain:
    return AdmissionChain([Defaulting()], [Validation()])


__all__ = ["AdmissionChain", "AdmissionRequest", "ApiError", "Plugin", "default_chain"]
