"""Which requests a webhook or a policy sees: upstream's rules.Matcher (operations, API groups, versions,
resources with subresources, scope) and its namespace and object label selectors. Pure functions of a
parsed request (`Attributes`) so they are tested without a server."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeclient.selectors import Selector, SelectorError, from_label_selector

Obj = dict[str, Any]


@dataclass(frozen=True)
class Attributes:
    """One admission request as matching sees it."""

    operation: str  # CREATE, UPDATE, DELETE, CONNECT
    group: str
    version: str
    resource: str  # plural
    subresource: str
    namespace: str
    name: str
    obj: Obj | None
    old: Obj | None


@dataclass(frozen=True)
class Rule:
    operations: tuple[str, ...]
    groups: tuple[str, ...]
    versions: tuple[str, ...]
    resources: tuple[str, ...]
    scope: str = "*"

    @classmethod
    def parse(cls, rule: Obj) -> Rule:
        return cls(
            tuple(rule.get("operations") or ()),
            tuple(rule.get("apiGroups") or ()),
            tuple(rule.get("apiVersions") or ()),
            tuple(rule.get("resources") or ()),
            rule.get("scope") or "*",
        )

    def matches(self, attrs: Attributes) -> bool:
        return (
            _any(self.operations, attrs.operation)
            and _any(self.groups, attrs.group)
            and _any(self.versions, attrs.version)
            and self._resource(attrs)
            and self._scope(attrs)
        )

    def _resource(self, attrs: Attributes) -> bool:
        want = attrs.resource + ("/" + attrs.subresource if attrs.subresource else "")
        for item in self.resources:
            if item == "*/*" or item == want:
                return True
            res, _, sub = item.partition("/")
            if not sub:
                if res == "*" and not attrs.subresource:
                    return True
                continue
            if res == "*" and sub == attrs.subresource:
                return True
            if res == attrs.resource and sub == "*" and attrs.subresource:
                return True
        return False

    def _scope(self, attrs: Attributes) -> bool:
        if self.scope == "Cluster":
            return not attrs.namespace
        if self.scope == "Namespaced":
            # Namespaces are cluster-scoped, but upstream counts a namespace as namespaced (itself).
            return bool(attrs.namespace) or (attrs.group == "" and attrs.resource == "namespaces")
        return True


def _any(values: tuple[str, ...], value: str) -> bool:
    return "*" in values or value in values


def selector(obj: Obj | None) -> Selector:
    """A webhook's selector: absent is `{}`, which selects everything (defaulting leaves none absent)."""
    try:
        return from_label_selector(obj if obj is not None else {})
    except SelectorError:
        return from_label_selector({"matchExpressions": [{"key": "", "operator": "DoesNotExist"}]})


def _labels(obj: Obj | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def object_selected(sel: Selector, attrs: Attributes) -> bool:
    """objectSelector: the new or the old object's labels match (a DELETE has only the old)."""
    if sel.empty:
        return True
    return any(o is not None and sel.matches(_labels(o)) for o in (attrs.obj, attrs.old))


def namespace_selected(sel: Selector, attrs: Attributes, namespace_labels: Mapping[str, str] | None) -> bool:
    """namespaceSelector: cluster-scoped objects other than namespaces always match; a Namespace is
    judged by its own labels; anything else by its namespace's (`namespace_labels`)."""
    if sel.empty:
        return True
    if attrs.group == "" and attrs.resource == "namespaces" and not attrs.subresource:
        source = attrs.obj if attrs.obj is not None else attrs.old
        return sel.matches(_labels(source))
    if not attrs.namespace:
        return True
    return sel.matches(namespace_labels or {})
