"""Usage evaluators (upstream's pkg/quota/v1/evaluator/core and quota/v1/generic): for one resource,
which quota names it affects, whether a quota's scopes match an object, what the object uses, and
what it must declare. The admission plugin charges `usage(new) - usage(old)`; the controller sums
`usage` over the live objects; both ask the same evaluator.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from controlplane.quota import podresources
from controlplane.quota.resources import ONE, Resources, add, parse
from kubeclient.quantity import Quantity

Obj = dict[str, Any]

# Scopes (core/v1 ResourceQuotaScope).
TERMINATING = "Terminating"
NOT_TERMINATING = "NotTerminating"
BEST_EFFORT = "BestEffort"
NOT_BEST_EFFORT = "NotBestEffort"
PRIORITY_CLASS = "PriorityClass"
CROSS_NAMESPACE_POD_AFFINITY = "CrossNamespacePodAffinity"
SCOPES = (
    TERMINATING,
    NOT_TERMINATING,
    BEST_EFFORT,
    NOT_BEST_EFFORT,
    PRIORITY_CLASS,
    CROSS_NAMESPACE_POD_AFFINITY,
)

REQUESTS_PREFIX = "requests."
STORAGE_CLASS_SUFFIX = ".storageclass.storage.k8s.io/"
BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"

# If a quota tracks cpu or memory, each container must declare it (upstream's validationSet, a
# backward-compatibility rule it says never to extend).
MUST_DECLARE = frozenset({"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"})
POD_RESOURCES = (
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
)
POD_PREFIXES = ("hugepages-", "requests.hugepages-")


def count_name(resource: str, group: str) -> str:
    """ObjectCountQuotaResourceNameFor: `count/pods`, `count/deployments.apps`."""
    return f"count/{resource}.{group}" if group else f"count/{resource}"


def scope_selectors(quota: Obj) -> list[Obj]:
    """A quota's scopes as selector requirements (spec.scopes as Exists, then spec.scopeSelector)."""
    spec = quota.get("spec") or {}
    out: list[Obj] = [{"scopeName": s, "operator": "Exists"} for s in spec.get("scopes") or []]
    out += list((spec.get("scopeSelector") or {}).get("matchExpressions") or [])
    return out


def is_native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _extended(name: str) -> bool:
    """IsExtendedResourceName for a container's resource (not native, no requests. prefix)."""
    return not is_native(name) and not name.startswith(REQUESTS_PREFIX)


def _quota_extended(name: str) -> bool:
    return not is_native(name) and name.startswith(REQUESTS_PREFIX)


@dataclass(frozen=True)
class Evaluator:
    """The object-count evaluator (generic.ObjectCountEvaluator): one per resource, creates only."""

    resource: str
    group: str = ""
    legacy: str = ""  # the pre-count/ name (configmaps, secrets, ...)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n in (count_name(self.resource, self.group), self.legacy) if n)

    def handles(self, operation: str, subresource: str) -> bool:
        return operation == "CREATE" and not subresource

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        own = set(self.names)
        return [n for n in names if n in own]

    def scope_matches(self, selector: Obj, obj: Obj) -> bool:
        return False  # MatchesNoScopeFunc: a scoped quota counts pods only

    def matches(self, quota: Obj, obj: Obj) -> bool:
        """generic.Matches: the quota limits one of our names and every scope matches the object."""
        hard = ((quota.get("status") or {}).get("hard")) or {}
        if not self.matching_resources(hard):
            return False
        return all(self.scope_matches(s, obj) for s in scope_selectors(quota))

    def constraints(self, required: list[str], obj: Obj) -> str | None:
        return None

    def usage(self, obj: Obj, now: datetime | None = None) -> Resources:
        return dict.fromkeys(self.names, ONE)


class PodEvaluator(Evaluator):
    def __init__(self) -> None:
        super().__init__("pods")

    def handles(self, operation: str, subresource: str) -> bool:
        if subresource not in ("", "resize"):
            return False
        return operation == "CREATE" or (subresource == "resize" and operation == "UPDATE")

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if n in POD_RESOURCES or n.startswith(POD_PREFIXES) or _quota_extended(n)]

    def scope_matches(self, selector: Obj, obj: Obj) -> bool:
        spec = obj.get("spec") or {}
        scope = selector.get("scopeName")
        if scope == TERMINATING:
            return is_terminating(obj)
        if scope == NOT_TERMINATING:
            return not is_terminating(obj)
        if scope == BEST_EFFORT:
            return podresources.is_best_effort(obj)
        if scope == NOT_BEST_EFFORT:
            return not podresources.is_best_effort(obj)
        if scope == PRIORITY_CLASS:
            return _priority_class_matches(selector, spec.get("priorityClassName") or "")
        if scope == CROSS_NAMESPACE_POD_AFFINITY:
            return uses_cross_namespace_affinity(obj)
        return False

    def constraints(self, required: list[str], obj: Obj) -> str | None:
        """Each container must declare what a cpu/memory quota tracks: `must specify requests.cpu for: a,b`."""
        needed = set(required) & MUST_DECLARE
        missing: dict[str, set[str]] = {}
        spec = obj.get("spec") or {}
        for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            have = _compute_usage(
                podresources.container_resources(container, "requests"),
                podresources.container_resources(container, "limits"),
            )
            for name in needed - have.keys():
                missing.setdefault(name, set()).add(container.get("name", ""))
        if not missing:
            return None
        parts = [f"{name} for: {','.join(sorted(missing[name]))}" for name in sorted(missing)]
        return "must specify " + "; ".join(parts)

    def usage(self, obj: Obj, now: datetime | None = None) -> Resources:
        """PodUsageFunc: count/pods always; the rest only while the pod counts (QuotaV1Pod)."""
        result: Resources = {"count/pods": ONE}
        if not counts(obj, now):
            return result
        requests = podresources.pod_resources(obj, "requests")
        limits = podresources.pod_resources(obj, "limits")
        return add(result, _compute_usage(requests, limits))


def _compute_usage(requests: Resources, limits: Resources) -> Resources:
    """podComputeUsageHelper."""
    out: Resources = {"pods": ONE}
    for name in ("cpu", "memory", "ephemeral-storage"):
        if name in requests:
            out[name] = requests[name]
            out[REQUESTS_PREFIX + name] = requests[name]
        if name in limits:
            out["limits." + name] = limits[name]
    for name, q in requests.items():
        if name.startswith("hugepages-"):
            out[name] = q
            out[REQUESTS_PREFIX + name] = q
        elif _extended(name):
            out[REQUESTS_PREFIX + name] = q
    return out


def is_terminating(pod: Obj) -> bool:
    deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    return isinstance(deadline, int) and deadline >= 0


def counts(pod: Obj, now: datetime | None = None) -> bool:
    """QuotaV1Pod: not terminal, and not stuck terminating past its grace period."""
    if (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
        return False
    meta = pod.get("metadata") or {}
    stamp, grace = meta.get("deletionTimestamp"), meta.get("deletionGracePeriodSeconds")
    if stamp and grace is not None:
        try:
            deleted = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
        except ValueError:
            return True
        if (now or datetime.now(UTC)) > deleted + timedelta(seconds=int(grace)):
            return False
    return True


def _priority_class_matches(selector: Obj, name: str) -> bool:
    """ScopedResourceSelectorRequirementsAsSelector on {PriorityClass: name} (no label without a class)."""
    op, values = selector.get("operator"), set(selector.get("values") or [])
    if op == "Exists":
        return bool(name)
    if op == "DoesNotExist":
        return not name
    if op == "In":
        return bool(name) and name in values
    if op == "NotIn":
        return not name or name not in values
    return False


def uses_cross_namespace_affinity(pod: Obj) -> bool:
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        rules = affinity.get(kind) or {}
        terms = list(rules.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        terms += [
            w.get("podAffinityTerm") or {}
            for w in rules.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        ]
        if any(t.get("namespaces") or t.get("namespaceSelector") is not None for t in terms):
            return True
    return False


class ServiceEvaluator(Evaluator):
    def __init__(self) -> None:
        super().__init__("services", legacy="services")

    @property
    def names(self) -> tuple[str, ...]:
        return ("count/services", "services", "services.nodeports", "services.loadbalancers")

    def handles(self, operation: str, subresource: str) -> bool:
        # Updates too: a Service may become a NodePort or LoadBalancer.
        return operation in ("CREATE", "UPDATE") and not subresource

    def usage(self, obj: Obj, now: datetime | None = None) -> Resources:
        spec = obj.get("spec") or {}
        ports = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
        out: Resources = {"services": ONE, "count/services": ONE}
        kind = spec.get("type") or "ClusterIP"
        if kind == "NodePort":
            out["services.nodeports"] = _count(len(ports))
        elif kind == "LoadBalancer":
            if spec.get("allocateLoadBalancerNodePorts") is False:
                out["services.nodeports"] = _count(sum(1 for p in ports if p.get("nodePort")))
            else:
                out["services.nodeports"] = _count(len(ports))
            out["services.loadbalancers"] = ONE
        return out


def service_quota_type(svc: Obj) -> str:
    """GetQuotaServiceType: the type a quota tells apart (NodePort, LoadBalancer, or none)."""
    kind = (svc.get("spec") or {}).get("type") or ""
    return kind if kind in ("NodePort", "LoadBalancer") else ""


def _count(n: int) -> Quantity:
    return Quantity(Decimal(n))


def storage_class_of(pvc: Obj) -> str:
    annotations = (pvc.get("metadata") or {}).get("annotations") or {}
    if BETA_STORAGE_CLASS in annotations:
        return str(annotations[BETA_STORAGE_CLASS])
    return str((pvc.get("spec") or {}).get("storageClassName") or "")


class PVCEvaluator(Evaluator):
    def __init__(self) -> None:
        super().__init__("persistentvolumeclaims", legacy="persistentvolumeclaims")

    def handles(self, operation: str, subresource: str) -> bool:
        # Updates too: a claim may grow (resize).
        return operation in ("CREATE", "UPDATE") and not subresource

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        own = {"count/persistentvolumeclaims", "persistentvolumeclaims", "requests.storage"}
        return [
            n
            for n in names
            if n in own
            or (
                STORAGE_CLASS_SUFFIX in n
                and n.rsplit("/", 1)[-1] in ("persistentvolumeclaims", "requests.storage")
            )
        ]

    def usage(self, obj: Obj, now: datetime | None = None) -> Resources:
        out: Resources = {"persistentvolumeclaims": ONE, "count/persistentvolumeclaims": ONE}
        cls = storage_class_of(obj)
        if cls:
            out[cls + STORAGE_CLASS_SUFFIX + "persistentvolumeclaims"] = ONE
        requests = parse(((obj.get("spec") or {}).get("resources") or {}).get("requests"))
        if "storage" in requests:
            out["requests.storage"] = requests["storage"]
            if cls:
                out[cls + STORAGE_CLASS_SUFFIX + "requests.storage"] = requests["storage"]
        return out


# The evaluators upstream registers by name (install.NewQuotaConfigurationForAdmission): the three
# with their own rules, and object counts with a legacy name.
_BUILT_IN: dict[tuple[str, str], Evaluator] = {
    ("", "pods"): PodEvaluator(),
    ("", "services"): ServiceEvaluator(),
    ("", "persistentvolumeclaims"): PVCEvaluator(),
    ("", "configmaps"): Evaluator("configmaps", legacy="configmaps"),
    ("", "secrets"): Evaluator("secrets", legacy="secrets"),
    ("", "replicationcontrollers"): Evaluator("replicationcontrollers", legacy="replicationcontrollers"),
    ("", "resourcequotas"): Evaluator("resourcequotas", legacy="resourcequotas"),
}
# Never charged (install's ignoredResources): virtual kinds and events.
IGNORED = frozenset({("", "events"), ("events.k8s.io", "events"), ("", "bindings")})


def evaluator_for(group: str, resource: str) -> Evaluator | None:
    """The resource's evaluator: its own, or an object count (`count/<resource>.<group>`)."""
    if (group, resource) in IGNORED:
        return None
    return _BUILT_IN.get((group, resource)) or Evaluator(resource, group)


def resource_of_count(name: str) -> tuple[str, str] | None:
    """(group, resource) a `count/<resource>[.<group>]` name counts."""
    if not name.startswith("count/"):
        return None
    resource, _, group = name[len("count/") :].partition(".")
    return group, resource


def evaluators_for(hard: Iterable[str]) -> list[tuple[tuple[str, str], Evaluator]]:
    """Every evaluator one of the `hard` names needs, keyed by (group, resource)."""
    names = list(hard)
    found: dict[tuple[str, str], Evaluator] = {}
    for key, ev in _BUILT_IN.items():
        if ev.matching_resources(names):
            found[key] = ev
    for name in names:
        gr = resource_of_count(name)
        if gr is not None and gr not in found and gr not in IGNORED:
            found[gr] = evaluator_for(*gr)  # type: ignore[assignment]
    return list(found.items())
