"""Which webhooks a request reaches: the request as webhooks see it (its kind and resource, the
subresource's own kind, the objects, the user) and upstream's ShouldCallHook: rules, then the
namespace and object selectors, then the match conditions (CEL over `object`, `oldObject` and
`request`). The admissionregistration kinds themselves never reach a webhook, as upstream exempts
them so a broken webhook cannot lock its own configuration."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from controlplane.apiserver import cel, errors
from controlplane.apiserver.authn import UserInfo
from controlplane.apiserver.webhooks.review import Target, user_info
from controlplane.apiserver.webhooks.rules import Attributes, namespace_selected, object_selected
from controlplane.apiserver.webhooks.source import Webhook
from controlplane.storage.cache import WatchCache

if TYPE_CHECKING:
    from controlplane.apiserver.admission import AdmissionRequest
    from controlplane.apiserver.kinds.base import Kind
    from controlplane.apiserver.kindtable import KindTable

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


@dataclass(frozen=True)
class View:
    """The request as a webhook registered for `kind` sees it: that version's names and objects."""

    target: Target
    obj: Obj | None
    old: Obj | None


@dataclass
class Invocation:
    """One request for the webhooks and policies. `obj` and `old` are in the storage form the
    registry holds; `view(kind)` presents them in the version of `kind` (a v1 HorizontalPodAutoscaler
    request is sent as autoscaling/v1, converted from the stored v2 object)."""

    attrs: Attributes
    target: Target
    operation: str
    namespace: str
    name: str
    obj: Obj | None
    old: Obj | None
    user: UserInfo | None
    cache: WatchCache
    kind: Kind
    # Mutating admission of a create: upstream runs it before the store sets uid, creationTimestamp,
    # generation and a generated name, so the object is shown without them.
    before_create: bool = False
    # The server's kinds (kindtable.KindTable): the other versions a matchPolicy Equivalent webhook may
    # match, the kinds a policy's paramKind names.
    kinds: KindTable | None = None
    _views: dict[int, View] = field(default_factory=dict)

    def view(self, kind: Kind | None = None) -> View:
        kind = kind or self.kind
        got = self._views.get(id(kind))
        if got is None:
            target = self.target
            if kind is not self.kind:
                sub = kind.subresource(self.target.subresource) if self.target.subresource else None
                target = replace(
                    target,
                    group=kind.group,
                    version=kind.version,
                    kind=sub.kind if sub is not None and sub.kind else kind.kind,
                    resource=kind.plural,
                )
            obj = _present(kind, self.obj)
            if self.before_create and obj is not None:
                obj = _as_sent(obj, generated=not self.name)
            got = self._views[id(kind)] = View(target, obj, _present(kind, self.old))
        return got

    def changed(self, obj: Obj) -> None:
        """The object after a mutation (storage form): every view is rebuilt from it."""
        self.obj = obj
        self._views.clear()

    def namespace_labels(self) -> Mapping[str, str]:
        cached = self.cache.get(f"/{NAMESPACES_BUCKET}/{self.namespace}")
        if cached is None:
            return {}
        return (cached.view.get("metadata") or {}).get("labels") or {}

    def namespace_object(self) -> Obj | None:
        cached = self.cache.get(f"/{NAMESPACES_BUCKET}/{self.namespace}") if self.namespace else None
        return cached.obj if cached is not None else None

    def request_binding(self, dry_run: bool, kind: Kind | None = None) -> Obj:
        """The `request` variable of CEL: the review's request without the objects."""
        target = self.view(kind).target
        gvk = {"group": target.group, "version": target.version, "kind": target.kind}
        gvr = {"group": target.group, "version": target.version, "resource": target.resource}
        return {
            "kind": gvk,
            "resource": gvr,
            "subResource": target.subresource,
            "requestKind": {
                "group": target.request_group,
                "version": target.request_version,
                "kind": target.request_kind,
            },
            "requestResource": {
                "group": target.request_group,
                "version": target.request_version,
                "resource": target.request_resource,
            },
            "requestSubResource": target.subresource,
            "name": self.name,
            "namespace": self.namespace,
            "operation": self.operation,
            "userInfo": user_info(self.user),
            "dryRun": dry_run,
        }


_SET_BY_CREATE = ("uid", "creationTimestamp", "generation")


def _as_sent(obj: Obj, generated: bool) -> Obj:
    meta = obj.get("metadata") or {}
    drop = _SET_BY_CREATE + (("name",) if generated else ())
    return {**obj, "metadata": {k: v for k, v in meta.items() if k not in drop}}


def _present(kind: Kind, stored: Obj | None) -> Obj | None:
    if stored is None or not kind.converts:
        return stored
    return kind.from_storage(copy.deepcopy(stored))


def to_storage(kind: Kind, obj: Obj) -> Obj:
    return kind.to_storage(obj) if kind.converts else obj


def equivalents(kind: Kind, table: Iterable[Kind]) -> list[Kind]:
    """The other versions of the same resource (one storage) among the served kinds: what matchPolicy
    Equivalent also matches."""
    return [
        k for k in table if k is not kind and k.stored and k.bucket == kind.bucket and k.plural == kind.plural
    ]


def invocation(request: AdmissionRequest, mutating: bool = False) -> Invocation:
    """A DELETE carries the object as `old` only (the chain passes it in both). `mutating`: for the
    mutating webhooks, which see a create before the store has named and stamped the object."""
    # (a create through a subresource, a Binding or an Eviction, is shown as sent: no store stamps it)
    before_create = mutating and request.operation == "CREATE" and not request.subresource
    name = "" if before_create and request.generated_name else request.name
    kind = request.kind
    obj = None if request.operation == "DELETE" else request.obj
    sub = kind.subresource(request.subresource) if request.subresource else None
    kind_name = sub.kind if sub is not None and sub.kind else kind.kind
    target = Target(
        kind.group,
        kind.version,
        kind_name,
        kind.plural,
        request.subresource,
        kind.group,
        kind.version,
        kind_name,
        kind.plural,
    )
    attrs = Attributes(
        request.operation,
        kind.group,
        kind.version,
        kind.plural,
        request.subresource,
        request.namespace,
        name,
        obj,
        request.old,
    )
    return Invocation(
        attrs,
        target,
        request.operation,
        request.namespace,
        name,
        obj,
        request.old,
        request.user,
        request.registry.cache,
        kind,
        before_create,
        request.registry.kinds,
    )


def exempt(attrs: Attributes) -> bool:
    return attrs.group == EXEMPT_GROUP and attrs.resource in EXEMPT_RESOURCES


def _conditions_hold(hook: Webhook, inv: Invocation, kind: Kind) -> bool:
    """matchConditions (upstream's matcher): any false -> skip; else an error -> failurePolicy (Fail:
    the request is forbidden with the errors; Ignore: skip); else call."""
    if not hook.match_conditions:
        return True
    view = inv.view(kind)
    bindings = {"object": view.obj, "oldObject": view.old, "request": inv.request_binding(False, kind)}
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
    message = (
        f'{resource} "{inv.name}" is forbidden: {text}' if inv.name else f"{resource} is forbidden: {text}"
    )
    raise errors.forbidden_request(message, inv.target.resource, inv.target.group, inv.name)


def _matched_kind(hook: Webhook, inv: Invocation) -> Kind | None:
    """The version whose rules select the request: its own, or with matchPolicy Equivalent another
    version of the same resource (the webhook then sees the request in that version)."""
    if any(r.matches(inv.attrs) for r in hook.rules):
        return inv.kind
    if hook.match_policy != "Equivalent":
        return None
    for kind in equivalents(inv.kind, inv.kinds or ()):
        attrs = replace(inv.attrs, group=kind.group, version=kind.version, resource=kind.plural)
        if any(r.matches(attrs) for r in hook.rules):
            return kind
    return None


def relevant(hooks: tuple[Webhook, ...], inv: Invocation) -> list[tuple[Webhook, Kind]]:
    """upstream's ShouldCallHook for each webhook: (the webhook, the version it sees the request in)."""
    attrs = inv.attrs
    if exempt(attrs):
        return []
    out = []
    labels: Mapping[str, str] | None = None
    for hook in hooks:
        kind = _matched_kind(hook, inv)
        if kind is None:
            continue
        if not hook.namespace_selector.empty and attrs.namespace and labels is None:
            labels = inv.namespace_labels()
        if not namespace_selected(hook.namespace_selector, attrs, labels):
            continue
        if not object_selected(hook.object_selector, attrs):
            continue
        if not _conditions_hold(hook, inv, kind):
            continue
        out.append((hook, kind))
    return out
