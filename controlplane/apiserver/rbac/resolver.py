"""The RBAC objects as the authorizer reads them (upstream's DefaultRuleResolver over listers), kept in
step with the watch cache and indexed so a request costs a few dictionary lookups.

Bindings are indexed by subject: a user's key and one key per group find every ClusterRoleBinding and
(per namespace) RoleBinding that names them, so the cost of a decision does not grow with the number
of bindings in the cluster. Roles are kept compiled by name; a binding resolves its role when asked,
so a role edited or created later takes effect at once, and a binding to a missing role grants
nothing (its error is the denial's reason, as upstream). What a user holds in a namespace is
remembered until any RBAC object changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from controlplane.apiserver.rbac.rules import PolicyRule, Rule, compile_rules, parse_rules
from controlplane.apiserver.userinfo import UserInfo

if TYPE_CHECKING:
    from controlplane.storage.cache import CacheEvent, WatchCache

GROUP = "rbac.authorization.k8s.io"
ROLES, CLUSTER_ROLES = f"roles.{GROUP}", f"clusterroles.{GROUP}"
ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS = f"rolebindings.{GROUP}", f"clusterrolebindings.{GROUP}"
SA_PREFIX = "system:serviceaccount:"
_CACHE_LIMIT = 8192

SubjectKey = tuple[str, str]  # ("user", name) or ("group", name); service accounts are users


def service_account_user(namespace: str, name: str) -> str:
    return f"{SA_PREFIX}{namespace}:{name}"


def describe_subject(subject: dict[str, Any], binding_namespace: str) -> str:
    """describeSubject: `User "alice"`, `ServiceAccount "default/ns"`."""
    kind, name = subject.get("kind", ""), subject.get("name", "")
    if kind == "ServiceAccount":
        return f'{kind} "{name}/{subject.get("namespace") or binding_namespace}"'
    return f'{kind} "{name}"'


def subject_key(subject: Any, binding_namespace: str) -> SubjectKey | None:
    """The index key a subject matches users by (appliesToUser); None if it matches nobody."""
    if not isinstance(subject, dict):
        return None
    kind, name = subject.get("kind"), subject.get("name") or ""
    if kind == "User":
        return ("user", name)
    if kind == "Group":
        return ("group", name)
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return ("user", service_account_user(namespace, name)) if namespace else None
    return None


def user_keys(user: UserInfo) -> list[SubjectKey]:
    return [("user", user.name)] + [("group", g) for g in user.groups]


@dataclass(frozen=True)
class Binding:
    kind: str  # ClusterRoleBinding or RoleBinding
    namespace: str
    name: str
    role_kind: str
    role_name: str
    subjects: tuple[dict[str, Any], ...]

    def describe(self, subject_index: int) -> str:
        """The describer the authorizer names in its reason (`ClusterRoleBinding "x" of ClusterRole "y" to ...`)."""
        name = f"{self.name}/{self.namespace}" if self.kind == "RoleBinding" else self.name
        subject = describe_subject(self.subjects[subject_index], self.namespace)
        return f'{self.kind} "{name}" of {self.role_kind} "{self.role_name}" to {subject}'


@dataclass(frozen=True)
class Grant:
    """One rule a user holds and where it comes from."""

    rule: Rule
    source: str  # the binding's description


@dataclass
class Resolved:
    """What one user holds at one scope: the rules, and the bindings whose roles are missing."""

    grants: tuple[Grant, ...] = ()
    errors: tuple[str, ...] = ()


@dataclass
class _Index:
    by_subject: dict[SubjectKey, dict[tuple[str, str], int]] = field(default_factory=dict)

    def add(self, binding_key: tuple[str, str], binding: Binding) -> None:
        for i, subject in enumerate(binding.subjects):
            key = subject_key(subject, binding.namespace)
            if key is not None:
                self.by_subject.setdefault(key, {}).setdefault(binding_key, i)

    def remove(self, binding_key: tuple[str, str], binding: Binding) -> None:
        for subject in binding.subjects:
            key = subject_key(subject, binding.namespace)
            entries = self.by_subject.get(key) if key is not None else None
            if entries is not None:
                entries.pop(binding_key, None)
                if not entries:
                    del self.by_subject[key]  # type: ignore[arg-type]


def not_found(resource: str, name: str) -> str:
    """A lister's NotFound text (`clusterrole.rbac.authorization.k8s.io "x" not found`)."""
    return f'{resource}.{GROUP} "{name}" not found'


class RuleResolver:
    def __init__(self) -> None:
        self.roles: dict[tuple[str, str], tuple[Rule, ...]] = {}  # (namespace, name)
        self.cluster_roles: dict[str, tuple[Rule, ...]] = {}
        self.role_sources: dict[tuple[str, str], tuple[PolicyRule, ...]] = {}
        self.cluster_role_sources: dict[str, tuple[PolicyRule, ...]] = {}
        self.bindings: dict[tuple[str, str], Binding] = {}  # (namespace or "", name) -> binding, both kinds
        self.cluster_index = _Index()
        self.namespace_index: dict[str, _Index] = {}
        self._resolved: dict[tuple[str, tuple[str, ...], str], Resolved] = {}
        self.generation = 0

    # --- feeding ----------------------------------------------------------------------------------------

    def start(self, cache: WatchCache) -> None:
        """Load the four kinds from the cache and follow every change after."""
        for bucket in (ROLES, CLUSTER_ROLES, ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS):
            for cached in cache.subscribe(bucket, self._on_event):
                self.apply(cached.key, cached.obj)

    def _on_event(self, event: CacheEvent) -> None:
        self.apply(event.obj.key, None if event.type == "DELETED" else event.obj.obj)

    def apply(self, key: str, obj: dict[str, Any] | None) -> None:
        """Store (or with None, forget) the object at a cache key (`/<bucket>/[<namespace>/]<name>`)."""
        parts = key.split("/")
        bucket, name = parts[1], parts[-1]
        namespace = parts[2] if len(parts) == 4 else ""
        self.invalidate()
        if bucket == ROLES:
            self._set(self.roles, self.role_sources, (namespace, name), obj)
        elif bucket == CLUSTER_ROLES:
            self._set(self.cluster_roles, self.cluster_role_sources, name, obj)
        elif bucket in (ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS):
            self._bind(bucket, namespace, name, obj)

    def invalidate(self) -> None:
        """Forget every user's resolution (any RBAC object changed)."""
        self.generation += 1
        self._resolved.clear()

    @staticmethod
    def _set(
        compiled: dict[Any, tuple[Rule, ...]],
        sources: dict[Any, tuple[PolicyRule, ...]],
        key: Any,
        obj: dict[str, Any] | None,
    ) -> None:
        if obj is None:
            compiled.pop(key, None)
            sources.pop(key, None)
            return
        rules = parse_rules(obj.get("rules"))
        sources[key] = rules
        compiled[key] = compile_rules(rules)

    def _bind(self, bucket: str, namespace: str, name: str, obj: dict[str, Any] | None) -> None:
        key = (namespace, name)
        index = (
            self.cluster_index
            if bucket == CLUSTER_ROLE_BINDINGS
            else self.namespace_index.setdefault(namespace, _Index())
        )
        old = self.bindings.pop(key, None)
        if old is not None:
            index.remove(key, old)
        if obj is None:
            return
        ref = obj.get("roleRef") or {}
        subjects = tuple(s for s in obj.get("subjects") or [] if isinstance(s, dict))
        binding = Binding(
            "ClusterRoleBinding" if bucket == CLUSTER_ROLE_BINDINGS else "RoleBinding",
            namespace,
            name,
            str(ref.get("kind") or ""),
            str(ref.get("name") or ""),
            subjects,
        )
        self.bindings[key] = binding
        index.add(key, binding)

    # --- reading ----------------------------------------------------------------------------------------

    def role_rules(self, kind: str, namespace: str, name: str) -> tuple[Rule, ...] | None:
        """The compiled rules of a role reference (None: the role does not exist)."""
        if kind == "ClusterRole":
            return self.cluster_roles.get(name)
        if kind == "Role":
            return self.roles.get((namespace, name))
        return None

    def role_sources_of(self, kind: str, namespace: str, name: str) -> tuple[PolicyRule, ...] | None:
        """GetRoleReferenceRules: the role's rules as written (None: it does not exist)."""
        if kind == "ClusterRole":
            return self.cluster_role_sources.get(name)
        if kind == "Role":
            return self.role_sources.get((namespace, name))
        return None

    def resolve(self, user: UserInfo, namespace: str) -> Resolved:
        """What `user` holds at the cluster scope ("") or in `namespace` (cluster bindings included)."""
        key = (user.name, user.groups, namespace)
        found = self._resolved.get(key)
        if found is None:
            if len(self._resolved) >= _CACHE_LIMIT:
                self._resolved.clear()
            found = self._resolved[key] = self._compute(user, namespace)
        return found

    def _compute(self, user: UserInfo, namespace: str) -> Resolved:
        grants: list[Grant] = []
        errors: list[str] = []
        for binding, index in self._matching(user, namespace):
            rules = self.role_rules(binding.role_kind, binding.namespace, binding.role_name)
            if rules is None:
                errors.append(not_found(binding.role_kind.lower(), binding.role_name))
                continue
            source = binding.describe(index)
            grants += [Grant(r, source) for r in rules]
        return Resolved(tuple(grants), tuple(errors))

    def _matching(self, user: UserInfo, namespace: str) -> Iterator[tuple[Binding, int]]:
        """The bindings naming the user (cluster-wide first, then the namespace's), each once with the
        first subject that names the user, in a stable order."""
        keys = user_keys(user)
        indexes = [self.cluster_index]
        if namespace and namespace in self.namespace_index:
            indexes.append(self.namespace_index[namespace])
        for index in indexes:
            matched: dict[tuple[str, str], int] = {}
            for key in keys:
                for binding_key, i in index.by_subject.get(key, {}).items():
                    if binding_key not in matched or i < matched[binding_key]:
                        matched[binding_key] = i
            for binding_key in sorted(matched):
                yield self.bindings[binding_key], matched[binding_key]

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[PolicyRule], list[str]]:
        """RulesFor: the rules as written that the user holds in `namespace`, and the resolution errors."""
        resolved = self.resolve(user, namespace)
        return [g.rule.source for g in resolved.grants], list(resolved.errors)

    def cached_objects(self) -> int:
        return len(self.bindings) + len(self.roles) + len(self.cluster_roles)


__all__ = [
    "CLUSTER_ROLES",
    "CLUSTER_ROLE_BINDINGS",
    "GROUP",
    "ROLES",
    "ROLE_BINDINGS",
    "Binding",
    "Grant",
    "Resolved",
    "RuleResolver",
    "describe_subject",
    "not_found",
    "service_account_user",
    "subject_key",
]
