"""Admission: plugins that see every write after the kind's own defaulting and before it is stored.
Mutating plugins (`admit`) run first, then the kind's validation (the registry's), then validating
plugins (`validate`). The plugins come from the kinds list: each kind module declares those it owns
(NamespaceLifecycle in namespace.py, Priority in priorityclass.py), in the order of KINDS; this module
knows no kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from controlplane.apiserver.authn import UserInfo

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.base import Kind
    from controlplane.apiserver.registry import Registry

Obj = dict[str, Any]


@dataclass
class AdmissionRequest:
    operation: str  # CREATE, UPDATE, DELETE
    kind: Kind
    subresource: str
    namespace: str
    name: str
    obj: Obj
    old: Obj | None
    user: UserInfo | None
    registry: Registry


class Plugin(Protocol):
    """A plugin implements `admit(request)` (may change request.obj), `validate(request)`, or both;
    either raises an ApiError to refuse the write. Plugins that judge deletes implement
    `admit_delete(request)` (request.old is the object)."""


class AdmissionChain:
    def __init__(self, plugins: list[Any]) -> None:
        self.mutating = [p for p in plugins if callable(getattr(p, "admit", None))]
        self.validating = [p for p in plugins if callable(getattr(p, "validate", None))]
        self.deleting = [p for p in plugins if callable(getattr(p, "admit_delete", None))]

    def admit(self, request: AdmissionRequest) -> None:
        for plugin in self.mutating:
            plugin.admit(request)

    def validate(self, request: AdmissionRequest) -> None:
        for plugin in self.validating:
            plugin.validate(request)

    def admit_delete(self, request: AdmissionRequest) -> None:
        for plugin in self.deleting:
            plugin.admit_delete(request)


def default_chain() -> AdmissionChain:
    from controlplane.apiserver.kinds import KINDS

    return AdmissionChain([plugin for kind in KINDS for plugin in kind.admission])


__all__ = ["AdmissionChain", "AdmissionRequest", "Plugin", "default_chain"]
