"""Admission: plugins that see every write after the kind's own defaulting and before it is stored.
Mutating plugins (`admit`) run first, then the kind's validation (the registry's), then validating
plugins (`validate`). The plugins come from the kinds list: each kind module declares those it owns
(NamespaceLifecycle in namespace.py, Priority in priorityclass.py, ServiceAccount in
saadmission.py) or the REST layer attaches to it (kindparts.py: the webhooks, the policies), in the order
of the server's kind table (kindtable.KindTable.admission_chain builds the chain, known_plugins names
them); this module knows no kind. A plugin's method may be a coroutine
(ServiceAccount waits briefly for a namespace's `default` account, as upstream's does); a plugin's
`name` is what --disable-admission-plugins names.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

from controlplane.apiserver import admissionmetrics

# The request a plugin judges and the plugins' shape are the kinds' (kinds/ports.py): kinds define plugins.
from controlplane.apiserver.kinds.ports import AdmissionRequest, Plugin

Obj = dict[str, Any]


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
        if result is not None and inspect.isawaitable(result):  # most plugins are plain functions
            await result
        rejected = False
    finally:
        seconds = time.perf_counter() - started
        admissionmetrics.controller(plugin_name(plugin), phase, request.operation, rejected, seconds)


def plugin_name(plugin: Any) -> str:
    return getattr(plugin, "name", "") or type(plugin).__name__


__all__ = ["AdmissionChain", "AdmissionRequest", "Plugin", "plugin_name"]
