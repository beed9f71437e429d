"""The PodSecurity admission plugin (on by default, as in 1.32): a validating plugin that judges

- pods (create and update, and the subresources that change the spec): refused with upstream's 403
  `pods "x" is forbidden: violates PodSecurity "restricted:latest": ...` under the namespace's enforce
  level, a `would violate PodSecurity ...` warning under its warn level, and the
  `pod-security.kubernetes.io/audit-violations` audit annotation under its audit level;
- the pod templates of the workload kinds: warnings and audit annotations only, never a refusal;
- namespaces: their pod-security labels must parse (upstream's 422), and a stricter enforce level is
  tried on the pods already there, each kind of violation a warning naming a pod (the dry run
  `kubectl label ns ... enforce=restricted` prints).

Exempt usernames, namespaces and runtime classes (the AdmissionConfiguration's) pass unjudged, with the
`pod-security.kubernetes.io/exempt` audit annotation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controlplane.apiserver import errors
from controlplane.apiserver.podsecurity.checks import evaluate, forbidden_detail, forbidden_reason
from controlplane.apiserver.podsecurity.config import PodSecurityConfig
from controlplane.apiserver.podsecurity.levels import (
    LABEL_PREFIX,
    MODES,
    PRIVILEGED,
    LevelVersion,
    Policy,
    compare_levels,
    policy_from_labels,
)
from controlplane.apiserver.webhooks import context

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import AdmissionRequest

Obj = dict[str, Any]

ANNOTATION_PREFIX = "pod-security.kubernetes.io/"
DEFAULT_CONFIG = PodSecurityConfig()
# Upstream's limit on the pods a namespace relabel tries the new level on.
MAX_PODS_TO_CHECK = 3000
IGNORED_POD_SUBRESOURCES = frozenset(
    ("exec", "attach", "binding", "eviction", "log", "portforward", "proxy", "status")
)
# (group, resource) of the kinds whose pod template is judged, and where each keeps it.
_TEMPLATES: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "podtemplates"): ("template",),
    ("", "replicationcontrollers"): ("spec", "template"),
    ("apps", "replicasets"): ("spec", "template"),
    ("apps", "deployments"): ("spec", "template"),
    ("apps", "statefulsets"): ("spec", "template"),
    ("apps", "daemonsets"): ("spec", "template"),
    ("batch", "jobs"): ("spec", "template"),
    ("batch", "cronjobs"): ("spec", "jobTemplate", "spec", "template"),
}


def _template(obj: Obj, path: tuple[str, ...]) -> Obj | None:
    node: Any = obj
    for step in path:
        node = node.get(step) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _annotate(key: str, value: str) -> None:
    context.add_audit_annotation(ANNOTATION_PREFIX + key, value)


class PodSecurity:
    name = "PodSecurity"

    def validate(self, request: AdmissionRequest) -> None:
        if request.operation not in ("CREATE", "UPDATE"):
            return
        kind = request.kind
        where = (kind.group, kind.plural)
        if where == ("", "namespaces"):
            if not request.subresource:
                self._namespace(request)
        elif where == ("", "pods"):
            if request.subresource not in IGNORED_POD_SUBRESOURCES:
                self._pod(request)
        elif where in _TEMPLATES and not request.subresource:
            self._workload(request, _TEMPLATES[where])

    # --- pods and templates ------------------------------------------------------------------------

    def _config(self, request: AdmissionRequest) -> PodSecurityConfig:
        return getattr(request.registry, "pod_security", None) or DEFAULT_CONFIG

    def _exempt(self, request: AdmissionRequest, config: PodSecurityConfig) -> bool:
        if request.namespace and request.namespace in config.namespaces:
            _annotate("exempt", "namespace")
            return True
        user = request.user.name if request.user is not None else ""
        if user and user in config.usernames:
            _annotate("exempt", "user")
            return True
        return False

    def _namespace_policy(
        self, request: AdmissionRequest, config: PodSecurityConfig
    ) -> tuple[Policy, list[errors.FieldError]]:
        ns_kind = request.registry.kinds.by_kind("v1", "Namespace")
        cached = request.registry.cache.get(ns_kind.key("", request.namespace)) if ns_kind else None
        labels = ((cached.view.get("metadata") or {}).get("labels") or {}) if cached is not None else {}
        return policy_from_labels(labels, config.defaults)

    def _pod(self, request: AdmissionRequest) -> None:
        config = self._config(request)
        if self._exempt(request, config):
            return
        policy, errs = self._namespace_policy(request, config)
        if not errs and policy.fully_privileged():
            return
        pod = request.obj
        if (
            request.operation == "UPDATE"
            and request.old is not None
            and not _significant_update(pod, request.old)
        ):
            return
        self._evaluate(request, config, policy, errs, pod.get("metadata") or {}, pod.get("spec") or {}, True)

    def _workload(self, request: AdmissionRequest, path: tuple[str, ...]) -> None:
        config = self._config(request)
        if self._exempt(request, config):
            return
        policy, errs = self._namespace_policy(request, config)
        if not errs and policy.warn.level == PRIVILEGED and policy.audit.level == PRIVILEGED:
            return
        template = _template(request.obj, path)
        if template is None:
            return
        meta, spec = template.get("metadata") or {}, template.get("spec") or {}
        self._evaluate(request, config, policy, errs, meta, spec, False)

    def _evaluate(
        self,
        request: AdmissionRequest,
        config: PodSecurityConfig,
        policy: Policy,
        errs: list[errors.FieldError],
        meta: Obj,
        spec: Obj,
        enforce: bool,
    ) -> None:
        runtime_class = spec.get("runtimeClassName")
        if runtime_class and runtime_class in config.runtime_classes:
            _annotate("exempt", "runtimeClass")
            return
        if errs:
            _annotate("error", "Failed to parse policy: " + _aggregate(errs))
        results: dict[LevelVersion, list[tuple[str, str]]] = {}

        def judged(lv: LevelVersion) -> list[tuple[str, str]]:
            if lv not in results:
                results[lv] = evaluate(lv, meta, spec)
            return results[lv]

        refusal = None
        if enforce:
            _annotate("enforce-policy", str(policy.enforce))
            violations = judged(policy.enforce)
            if violations:
                kind = request.kind
                name = request.name or (request.obj.get("metadata") or {}).get("name") or ""
                qualified = f'{kind.resource} "{name}"' if name else kind.resource
                refusal = errors.forbidden_request(
                    f"{qualified} is forbidden: violates PodSecurity "
                    f'"{policy.enforce}": {forbidden_detail(violations)}',
                    kind.plural,
                    kind.group,
                    name,
                )
        audit = judged(policy.audit)
        if audit:
            _annotate(
                "audit-violations", f'would violate PodSecurity "{policy.audit}": {forbidden_detail(audit)}'
            )
        if refusal is not None:
            raise refusal  # no warnings on a request refused anyway
        warn = judged(policy.warn)
        if warn:
            context.add_warning(f'would violate PodSecurity "{policy.warn}": {forbidden_detail(warn)}')

    # --- namespaces --------------------------------------------------------------------------------

    def _namespace(self, request: AdmissionRequest) -> None:
        config = self._config(request)
        ns = request.obj
        name = (ns.get("metadata") or {}).get("name") or request.name
        labels = (ns.get("metadata") or {}).get("labels") or {}
        new, new_errs = policy_from_labels(labels, config.defaults)
        if request.operation == "CREATE":
            if new_errs:
                raise errors.invalid_object("Namespace", "", name, new_errs)
            if name in config.namespaces:
                self._warn_exempt(name, new, labels, config)
            return
        old_labels = ((request.old or {}).get("metadata") or {}).get("labels") or {}
        old, old_errs = policy_from_labels(old_labels, config.defaults)
        if new_errs and (not old_errs or new_errs != old_errs):
            raise errors.invalid_object("Namespace", "", name, new_errs)
        if new.enforce == old.enforce or new.enforce.level == PRIVILEGED:
            return
        if (
            new.enforce.version == old.enforce.version
            and compare_levels(new.enforce.level, old.enforce.level) < 1
        ):
            return
        if name in config.namespaces:
            self._warn_exempt(name, new, labels, config)
            return
        for warning in self._dry_run(request, name, new.enforce, config):
            context.add_warning(warning)

    def _warn_exempt(
        self, name: str, policy: Policy, labels: dict[str, str], config: PodSecurityConfig
    ) -> None:
        if policy.fully_privileged() or policy == config.defaults:
            return
        parts = []
        for mode in MODES:
            lv = getattr(policy, mode)
            key = LABEL_PREFIX + mode
            if lv.level != PRIVILEGED and (key in labels or key + "-version" in labels):
                parts.append(f"{mode}={lv}")
        context.add_warning(
            f'namespace "{name}" is exempt from Pod Security, and the policy ({", ".join(parts)}) will be ignored'
        )

    def _dry_run(
        self, request: AdmissionRequest, namespace: str, enforce: LevelVersion, config: PodSecurityConfig
    ) -> list[str]:
        """The existing pods judged under the new enforce level: one line per distinct set of reasons,
        naming the first pod (by name) and how many others share it."""
        pod_kind = request.registry.kinds.by_kind("v1", "Pod")
        if pod_kind is None:
            return []
        pods = [c.obj for c in request.registry.cache.list(pod_kind.bucket, pod_kind.prefix(namespace))]
        pods = _prioritized(pods, config)
        total = len(pods)
        pods = pods[:MAX_PODS_TO_CHECK]
        found: dict[str, tuple[str, int]] = {}  # reasons -> (first pod name, count)
        order: list[str] = []
        for pod in pods:
            violations = evaluate(enforce, pod.get("metadata") or {}, pod.get("spec") or {})
            if not violations:
                continue
            reason = forbidden_reason(violations)
            pod_name = (pod.get("metadata") or {}).get("name") or ""
            if reason not in found:
                order.append(reason)
                found[reason] = (pod_name, 1)
            else:
                first, count = found[reason]
                found[reason] = (min(first, pod_name), count + 1)
        warnings = []
        if len(pods) < total:
            warnings.append(
                f"new PodSecurity enforce level only checked against the first {len(pods)} of {total} existing pods"
            )
        if order:
            warnings.append(
                f'existing pods in namespace "{namespace}" violate the new PodSecurity enforce level "{enforce}"'
            )
        lines = []
        for reason in order:
            first, count = found[reason]
            if count == 1:
                lines.append(f"{first}: {reason}")
            elif count == 2:
                lines.append(f"{first} (and 1 other pod): {reason}")
            else:
                lines.append(f"{first} (and {count - 1} other pods): {reason}")
        return warnings + sorted(lines)


def _aggregate(errs: list[errors.FieldError]) -> str:
    parts = [f"{e.field}: {e.detail}" for e in errs]
    return parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"


def _prioritized(pods: list[Obj], config: PodSecurityConfig) -> list[Obj]:
    """Pods of an exempt runtime class left out; one pod per controller first, its siblings after."""
    first: list[Obj] = []
    later: list[Obj] = []
    seen: set[str] = set()
    for pod in pods:
        if (pod.get("spec") or {}).get("runtimeClassName") in config.runtime_classes:
            continue
        owner = next(
            (r for r in (pod.get("metadata") or {}).get("ownerReferences") or () if r.get("controller")), None
        )
        if owner is None:
            first.append(pod)
        elif owner.get("uid") in seen:
            later.append(pod)
        else:
            seen.add(owner.get("uid"))
            first.append(pod)
    return first + later


def _significant_update(pod: Obj, old: Obj) -> bool:
    """Whether a pod update changes what PodSecurity judges (the images, ephemeral containers, the
    seccomp annotations); other updates of a running pod pass unjudged, as upstream."""
    spec, old_spec = pod.get("spec") or {}, old.get("spec") or {}
    ann, old_ann = (
        (pod.get("metadata") or {}).get("annotations") or {},
        (old.get("metadata") or {}).get("annotations") or {},
    )
    for field in ("containers", "initContainers"):
        new_list, old_list = spec.get(field) or [], old_spec.get(field) or []
        if len(new_list) != len(old_list):
            return True
        for c, o in zip(new_list, old_list, strict=True):
            if _significant_container(c, o, ann, old_ann):
                return True
    old_ephemeral = {c.get("name"): c for c in old_spec.get("ephemeralContainers") or []}
    for c in spec.get("ephemeralContainers") or []:
        o = old_ephemeral.get(c.get("name"))
        if o is None or _significant_container(c, o, ann, old_ann):
            return True
    return False


def _significant_container(c: Obj, old: Obj, ann: dict[str, str], old_ann: dict[str, str]) -> bool:
    if c.get("image") != old.get("image"):
        return True
    key = "container.seccomp.security.alpha.kubernetes.io/" + str(c.get("name", ""))
    return ann.get(key) != old_ann.get(key)
