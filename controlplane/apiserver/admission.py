"""Admission: plugins that see every write after the kind's own defaulting and before it is stored.
Mutating plugins (`admit`) run first, then the kind's validation (the registry's), then validating
plugins (`validate`). The plugins come from the kinds list: each kind module declares those it owns
(NamespaceLifecycle in namespace.py, Priority in priorityclass.py, ServiceAccount in
saadmission.py), in the order of KINDS; this module knows no kind. A plugin's method may be a coroutine
(ServiceAccount waits briefly for a namespace's `default` account, as upstream's does); a plugin's
`name` is what --disable-admission-plugins names.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from controlplane.apiserver import admissionmetrics
from controlplane.apiserver.authn import UserInfo

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.base import Kind
    from controlplane.apiserver.registry import Registry

Obj = dict[str, Any]


@dataclass
class AdmissionRequest:
    operation: str  # CREATE, UPDATE, DELETE, CONNECT (obj: the connect options)
    kind: Kind
    subresource: str
    namespace: str
    name: str
    obj: Obj
    old: Obj | None
    user: UserInfo | None
    registry: Registry
    dry_run: bool = False  # checked, never charged (ResourceQuota)
    # The store generated the name (metadata.generateName): upstream's mutating admission runs before
    # that, so admission webhooks are shown the object as the client sent it.
    generated_name: bool = False


class Plugin(Protocol):
    """A plugin implements `admit(request)` (may change request.obj), `validate(request)`, or both;
    either raises an ApiError to refuse the write. Plugins that judge deletes implement
    `admit_delete(request)` (request.old is the object); those that must wait for something to judge
    them (admission webhooks and policies) implement the coroutine `review_delete(request)`."""


class AdmissionChain:
    def __init__(self, plugins: list[Any]) -> None:
        self.mutating = [p for p in plugins if callable(getattr(p, "admit", None))]
        self.validating = [p for p in plugins if callable(getattr(p, "validate", None))]
        # Plugins marked `last` (ResourceQuota, which charges usage) run after every other one, as upstream.
        self.validating.sort(key=lambda p: bool(getattr(p, "last", False)))
        self.deleting = [p for p in plugins if callable(getattr(p, "admit_delete", None))]
        self.delete_reviewers = [p for p in plugins if callable(getattr(p, "review_delete", None))]

    async def admit(self, request: AdmissionRequest) -> None:
        await _run_step(self.mutating, "admit", request)

    async def validate(self, request: AdmissionRequest) -> None:
        await _run_step(self.validating, "validate", request)

    async def connect(self, request: AdmissionRequest) -> None:
        """CONNECT (pods/exec, attach, portforward; `obj` the options): only the plugins marked `connects`
        (upstream's Handles(admission.Connect): the admission webhooks and policies), mutating first."""
        for plugin in self.mutating:
            if getattr(plugin, "connects", False):
                result = plugin.admit(request)
                if inspect.isawaitable(result):
                    await result
        for plugin in self.validating:
            if getattr(plugin, "connects", False):
                result = plugin.validate(request)
                if inspect.isawaitable(result):
                    await result

    def admit_delete(self, request: AdmissionRequest) -> None:
        for plugin in self.deleting:
            plugin.admit_delete(request)

    def reviews_deletes(self, cache: Any) -> bool:
        """Whether any delete reviewer has something to judge with (a plugin without configurations
        says no, so a delete need not decode its object for nothing)."""
        return any(getattr(p, "reviews_deletes", lambda _: True)(cache) for p in self.delete_reviewers)

    async def review_delete(self, request: AdmissionRequest) -> None:
        for plugin in self.delete_reviewers:
            await plugin.review_delete(request)


async def _run_step(plugins: list[Any], phase: str, request: AdmissionRequest) -> None:
    """One phase of the chain (admit: the mutating plugins; validate: the validating ones), each plugin
    and the phase timed into upstream's admission histograms, a refusal marked `rejected`."""
    started = time.perf_counter()
    rejected = True
    try:
        for plugin in plugins:
            await _run_plugin(plugin, phase, request)
        rejected = False
    finally:
        admissionmetrics.step(phase, request.operation, rejected, time.perf_counter() - started)


async def _run_plugin(plugin: Any, phase: str, request: AdmissionRequest) -> None:
    started = time.perf_counter()
    rejected = True
    try:
        result = plugin.admit(request) if phase == "admit" else plugin.validate(request)
        if inspect.isawaitable(result):
            await result
        rejected = False
    finally:
        seconds = time.perf_counter() - started
        admissionmetrics.controller(plugin_name(plugin), phase, request.operation, rejected, seconds)


def plugin_name(plugin: Any) -> str:
    return getattr(plugin, "name", "") or type(plugin).__name__


def known_plugins() -> list[str]:
    from controlplane.apiserver.kinds import KINDS

    return [plugin_name(p) for kind in KINDS for p in kind.admission if not getattr(p, "always", False)]


def default_chain(disabled: Collection[str] = ()) -> AdmissionChain:
    from controlplane.apiserver.kinds import KINDS

    # A plugin marked `always` is a kind's strategy step that needs the request's user (a CSR's
    # requester); it is no admission plugin upstream, so no flag turns it off.
    return AdmissionChain(
        [
            p
            for kind in KINDS
            for p in kind.admission
            if getattr(p, "always", False) or plugin_name(p) not in disabled
        ]
    )


__all__ = ["AdmissionChain", "AdmissionRequest", "Plugin", "default_chain", "known_plugins", "plugin_name"]
