"""admissionregistration.k8s.io/v1 MutatingWebhookConfiguration and ValidatingWebhookConfiguration:
cluster-scoped lists of webhooks, defaulted and validated as upstream (validation.py). The admission
plugins that call them belong to these kinds (the REST layer's webhooks/plugins.py, attached by
kindparts): MutatingAdmissionWebhook and
ValidatingAdmissionWebhook, listed after every built-in plugin because their kinds come last in BUILT_IN."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.meta import age
from controlplane.apiserver.webhooks import validation

Obj = dict[str, Any]

GROUP = "admissionregistration.k8s.io"
_WEBHOOKS = tables.column(
    "Webhooks",
    kind="integer",
    desc="Webhooks is a list of webhooks and the affected resources and operations.",
)


class _WebhookConfiguration(Kind):
    group = GROUP
    namespaced = False
    categories = ("api-extensions",)
    # `webhooks` merges by name (patchStrategy merge, patchMergeKey name upstream): kubectl apply's patches.
    mutating = False
    columns = (tables.NAME, _WEBHOOKS, tables.AGE)

    def default(self, obj: Obj, creating: bool) -> None:
        for hook in obj.get("webhooks") or []:
            if isinstance(hook, dict):
                validation.default_webhook(hook, self.mutating)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validation.configuration(obj, self.mutating)

    def cells(self, obj: Obj) -> list[Any]:
        return [obj["metadata"].get("name"), len(obj.get("webhooks") or []), age(obj)]


class MutatingWebhookConfigurationKind(_WebhookConfiguration):
    kind = "MutatingWebhookConfiguration"
    plural = "mutatingwebhookconfigurations"
    schema = "V1MutatingWebhookConfiguration"
    mutating = True


class ValidatingWebhookConfigurationKind(_WebhookConfiguration):
    kind = "ValidatingWebhookConfiguration"
    plural = "validatingwebhookconfigurations"
    schema = "V1ValidatingWebhookConfiguration"


MUTATING = MutatingWebhookConfigurationKind()
VALIDATING = ValidatingWebhookConfigurationKind()
