"""Which webhooks a request reaches: the request as webhooks see it (its kind and resource, the
subresource's own kind, the objects, the user) and upstream's ShouldCallHook: rules, then the
namespace and object selectors, then the match conditions (CEL over `object`, `oldObject` and
`request`). The admissionregistration kinds themselves never reach a webhook, as upstream exempts
them so a broken webhook cannot lock its own configuration."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from controlplane.apiserver import cel, errors
from controlplane.apiserver.authn import UserInfo
from controlplane.apiserver.webhooks.review import Target, user_info
from controlplane.apiserver.webhooks.rules import Attributes, namespace_selected, object_selected
from controlplane.apiserver.webhooks.source import Webhook
from controlplane.storage.cache import WatchCache

if TYPE_CHECKING:
    from controlplane.apiserver.admission import AdmissionRequest

log = logging.getLogger("controlplane.apiserver.webhooks")
Obj = dict[str, Any]

EXEMPT_GROUP = "admissionregistration.k8s.io"
EXEMPT_RESOURCES = frozenset(
    {
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "mutatingadmissionpolicies",
        "mutatingadmissionpolicybindings",
    }
)
NAMESPACES_BUCKET = "namespaces"


@dataclass
class Invocation:
    attrs: Attributes
    target: Target
    operation: str
    namespace: str
    name: str
    obj: Obj | None
    old: Obj | None
    user: UserInfo | None
    cache: WatchCache

    def namespace_labels(self) -> Mapping[str, str]:
        cached = self.cache.get(f"/{NAMESPACES_BUCKET}/{self.namespace}")
        if cached is None:
            return {}
        return (cached.view.get("metadata") or {}).get("labels") or {}

    def namespace_object(self) -> Obj | None:
        cached = self.cache.get(f"/{NAMESPACES_BUCKET}/{self.namespace}") if self.namespace else None
        return cached.obj if cached is not None else None

    def request_binding(self, dry_run: bool) -> Obj:
        """The `request` variable of CEL: the review's request without the objects."""
        gvk = {"group": self.target.group, "version": self.target.version, "kind": self.target.kind}
        gvr = {"group": self.target.group, "version": self.target.version, "resource": self.target.resource}
        return {
            "kind": gvk,
            "resource": gvr,
            "subResource": self.target.subresource,
            "requestKind": gvk,
            "requestResource": gvr,
            "requestSubResource": self.target.subresource,
            "name": self.name,
            "namespace": self.namespace,
            "operation": self.operation,
            "userInfo": user_info(self.user),
            "dryRun": dry_run,
        }


def invocation(request: AdmissionRequest) -> Invocation:
    """A DELETE carries the object as `old` only (the chain passes it in both)."""
    kind = request.kind
    obj = None if request.operation == "DELETE" else request.obj
    sub = kind.subresource(request.subresource) if request.subresource else None
    target = Target(
        kind.group,
        kind.version,
        (sub.kind if sub is not None and sub.kind else kind.kind),
        kind.plural,
        request.subresource,
    )
    attrs = Attributes(
        request.operation,
        kind.group,
        kind.version,
        kind.plural,
        request.subresource,
        request.namespace,
        request.name,
        obj,
        request.old,
    )
    return Invocation(
        attrs,
        target,
        request.operation,
        request.namespace,
        request.name,
        obj,
        request.old,
        request.user,
        request.registry.cache,
    )


def exempt(attrs: Attributes) -> bool:
    return attrs.group == EXEMPT_GROUP and attrs.resource in EXEMPT_RESOURCES


def _conditions_hold(hook: Webhook, inv: Invocation) -> bool:
    """matchConditions (upstream's matcher): any false -> skip; else an error -> failurePolicy (Fail:
    the request is forbidden with the errors; Ignore: skip); else call."""
    if not hook.match_conditions:
        return True
    bindings = {"object": inv.obj, "oldObject": inv.old, "request": inv.request_binding(False)}
    failures: list[str] = []
    for cond in hook.match_conditions:
        try:
            result = cel.evaluate(cond.expression, bindings)
        except cel.CelError as err:
            failures.append(f"expression '{cond.expression}' resulted in error: {err}")
            continue
        if result is False:
            return False
        if result is not True:
            failures.append(f"expression '{cond.expression}' must evaluate to bool")
    if not failures:
        return True
    log.warning("event=match-conditions-failed webhook=%s fail_open=%s", hook.name, hook.fails_open)
    if hook.fails_open:
        return False
    text = failures[0] if len(failures) == 1 else "[" + ", ".join(failures) + "]"
    resource = f"{inv.target.resource}.{inv.target.group}" if inv.target.group else inv.target.resource
    message = f'{resource} "{inv.name}" is forbidden: {text}' if inv.name else f"{resource} is forbidden: {text}"
    raise errors.forbidden_request(message, inv.target.resource, inv.target.group, inv.name)


def relevant(hooks: tuple[Webhook, ...], inv: Invocation) -> list[Webhook]:
    attrs = inv.attrs
    if exempt(attrs):
        return []
    out = []
    labels: Mapping[str, str] | None = None
    for hook in hooks:
        if not any(r.matches(attrs) for r in hook.rules):
            continue
        if not hook.namespace_selector.empty and attrs.namespace and labels is None:
            labels = inv.namespace_labels()
        if not namespace_selected(hook.namespace_selector, attrs, labels):
            continue
        if not object_selected(hook.object_selector, attrs):
            continue
        if not _conditions_hold(hook, inv):
            continue
        out.append(hook)
    return out
