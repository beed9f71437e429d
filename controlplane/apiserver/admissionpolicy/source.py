"""Policies and bindings in memory, parsed once and kept in step with the watch cache (synchronous
subscriptions, as the webhook configurations are): a request only walks the parsed pairs."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from controlplane.apiserver.webhooks.rules import (
    Attributes,
    Rule,
    namespace_selected,
    object_selected,
    selector,
)
from controlplane.storage.cache import CacheEvent, WatchCache
from kubeclient.selectors import Selector

Obj = dict[str, Any]

POLICIES_BUCKET = "validatingadmissionpolicies.admissionregistration.k8s.io"
BINDINGS_BUCKET = "validatingadmissionpolicybindings.admissionregistration.k8s.io"


@dataclass(frozen=True)
class NamedRule:
    rule: Rule
    names: tuple[str, ...]

    def matches(self, attrs: Attributes) -> bool:
        return self.rule.matches(attrs) and (not self.names or attrs.name in self.names)


@dataclass(frozen=True)
class MatchResources:
    rules: tuple[NamedRule, ...]
    excluded: tuple[NamedRule, ...]
    namespace_selector: Selector
    object_selector: Selector

    @classmethod
    def parse(cls, match: Any) -> MatchResources | None:
        if not isinstance(match, dict):
            return None

        def named(items: Any) -> tuple[NamedRule, ...]:
            return tuple(
                NamedRule(Rule.parse(r), tuple(r.get("resourceNames") or ()))
                for r in items or []
                if isinstance(r, dict)
            )

        return cls(
            named(match.get("resourceRules")),
            named(match.get("excludeResourceRules")),
            selector(match.get("namespaceSelector")),
            selector(match.get("objectSelector")),
        )

    def matches(self, attrs: Attributes, namespace_labels: Any, rules_required: bool = True) -> bool:
        if self.rules or rules_required:
            if not any(r.matches(attrs) for r in self.rules):
                return False
        if any(r.matches(attrs) for r in self.excluded):
            return False
        return namespace_selected(self.namespace_selector, attrs, namespace_labels) and object_selected(
            self.object_selector, attrs
        )


@dataclass(frozen=True)
class Validation:
    expression: str
    message: str
    message_expression: str
    reason: str


@dataclass(frozen=True)
class Policy:
    name: str
    param_kind: tuple[str, str] | None  # (apiVersion, kind)
    match: MatchResources | None
    validations: tuple[Validation, ...]
    failure_policy: str
    match_conditions: tuple[tuple[str, str], ...]
    variables: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, obj: Obj) -> Policy:
        spec = obj.get("spec") or {}
        kind = spec.get("paramKind")
        return cls(
            obj["metadata"]["name"],
            (kind.get("apiVersion", ""), kind.get("kind", "")) if isinstance(kind, dict) else None,
            MatchResources.parse(spec.get("matchConstraints")),
            tuple(
                Validation(
                    v.get("expression", ""),
                    (v.get("message") or "").strip(),
                    v.get("messageExpression") or "",
                    v.get("reason") or "",
                )
                for v in spec.get("validations") or []
                if isinstance(v, dict)
            ),
            spec.get("failurePolicy") or "Fail",
            tuple((c.get("name", ""), c.get("expression", "")) for c in spec.get("matchConditions") or []),
            tuple((v.get("name", ""), v.get("expression", "")) for v in spec.get("variables") or []),
        )


@dataclass(frozen=True)
class ParamRef:
    name: str
    namespace: str
    selector: Selector | None
    not_found: str  # Allow or Deny


@dataclass(frozen=True)
class Binding:
    name: str
    policy: str
    actions: frozenset[str]
    param_ref: ParamRef | None
    match: MatchResources | None

    @classmethod
    def parse(cls, obj: Obj) -> Binding:
        spec = obj.get("spec") or {}
        ref = spec.get("paramRef")
        return cls(
            obj["metadata"]["name"],
            spec.get("policyName", ""),
            frozenset(spec.get("validationActions") or ()),
            ParamRef(
                ref.get("name") or "",
                ref.get("namespace") or "",
                selector(ref["selector"]) if ref.get("selector") is not None else None,
                ref.get("parameterNotFoundAction") or "Deny",
            )
            if isinstance(ref, dict)
            else None,
            MatchResources.parse(spec.get("matchResources")),
        )


class PolicySource:
    """The (policy, binding) pairs, one view per watch cache (the plugin is one object per process)."""

    def __init__(self) -> None:
        self._views: weakref.WeakKeyDictionary[WatchCache, _View] = weakref.WeakKeyDictionary()

    def pairs(self, cache: WatchCache) -> tuple[tuple[Policy, Binding], ...]:
        view = self._views.get(cache)
        if view is None:
            view = self._views[cache] = _View(cache)
        return view.pairs


class _View:
    def __init__(self, cache: WatchCache) -> None:
        self.pairs: tuple[tuple[Policy, Binding], ...] = ()
        self._policies = {
            c.obj["metadata"]["name"]: Policy.parse(c.obj)
            for c in cache.subscribe(POLICIES_BUCKET, self._on_policy)
        }
        self._bindings = {
            c.obj["metadata"]["name"]: Binding.parse(c.obj)
            for c in cache.subscribe(BINDINGS_BUCKET, self._on_binding)
        }
        self._rebuild()

    def _on_policy(self, event: CacheEvent) -> None:
        obj = event.obj.obj
        if event.type == "DELETED":
            self._policies.pop(obj["metadata"]["name"], None)
        else:
            self._policies[obj["metadata"]["name"]] = Policy.parse(obj)
        self._rebuild()

    def _on_binding(self, event: CacheEvent) -> None:
        obj = event.obj.obj
        if event.type == "DELETED":
            self._bindings.pop(obj["metadata"]["name"], None)
        else:
            self._bindings[obj["metadata"]["name"]] = Binding.parse(obj)
        self._rebuild()

    def _rebuild(self) -> None:
        pairs = []
        for name in sorted(self._policies):
            for bname in sorted(self._bindings):
                binding = self._bindings[bname]
                if binding.policy == name:
                    pairs.append((self._policies[name], binding))
        self.pairs = tuple(pairs)
