"""The pod spec, shared by every kind that holds one (Pod, PodTemplate, Deployment, ReplicaSet):
upstream's SetDefaults_PodSpec / SetDefaults_Container and ValidatePodSpec, and the facts about its
types the Python client's models leave out (which strings are quantities, which are int-or-string).
"""

from __future__ import annotations

import re
from typing import Any

from controlplane.apiserver.errors import FieldError, duplicate, forbidden, invalid, not_supported, required
from controlplane.apiserver.meta import timestamp
from controlplane.apiserver.validation import (
    dns_label,
    dns_subdomain,
    labels,
    nonnegative_quantity,
    port_number,
    qualified_name,
    quantity,
)
from kubeclient import names as name_rules

Obj = dict[str, Any]

QUANTITIES = "map[quantity]"
# Upstream types these as resource.Quantity / intstr.IntOrString; the Python client says str / object.
TYPE_MARKS: dict[tuple[str, str], str] = {
    ("V1ResourceRequirements", "limits"): QUANTITIES,
    ("V1ResourceRequirements", "requests"): QUANTITIES,
    ("V1VolumeResourceRequirements", "limits"): QUANTITIES,
    ("V1VolumeResourceRequirements", "requests"): QUANTITIES,
    ("V1ResourceFieldSelector", "divisor"): "quantity",
    ("V1EmptyDirVolumeSource", "sizeLimit"): "quantity",
    ("V1PodSpec", "overhead"): QUANTITIES,
    ("V1PodStatus", "allocatedResources"): QUANTITIES,
    ("V1ContainerStatus", "allocatedResources"): QUANTITIES,
    ("V1NodeAllocatableMappedResources", "quantity"): "quantity",
    ("V1NodeAllocatableOverheadResources", "perContainer"): "quantity",
    ("V1NodeAllocatableOverheadResources", "perPod"): "quantity",
    ("V1HTTPGetAction", "port"): "int-or-string",
    ("V1TCPSocketAction", "port"): "int-or-string",
}

# --- defaulting --------------------------------------------------------------------------------------

_PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
_DEFAULT_MODE_SOURCES = ("secret", "configMap", "downwardAPI", "projected")
_VOLUME_SOURCES = (
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
)


def pull_policy_for(image: str) -> str:
    """Always for `:latest` or an untagged image, else IfNotPresent (digests count as pinned)."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "Always"
    return "Always" if last.rsplit(":", 1)[1] == "latest" else "IfNotPresent"


def _probe(probe: Obj | None) -> None:
    if not isinstance(probe, dict):
        return
    for key, value in _PROBE_DEFAULTS.items():
        probe.setdefault(key, value)
    http = probe.get("httpGet")
    if isinstance(http, dict):
        http.setdefault("path", "/")
        http.setdefault("scheme", "HTTP")
    grpc = probe.get("grpc")
    if isinstance(grpc, dict):
        grpc.setdefault("service", "")


def _container(c: Obj) -> None:
    if c.get("image"):
        c.setdefault("imagePullPolicy", pull_policy_for(c["image"]))
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    resources = c.setdefault("resources", {})
    if resources.get("limits"):
        requests = resources.setdefault("requests", {})
        for name, amount in resources["limits"].items():
            requests.setdefault(name, amount)
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")
    for name in ("livenessProbe", "readinessProbe", "startupProbe"):
        _probe(c.get(name))
    for env in c.get("env") or []:
        ref = (env.get("valueFrom") or {}).get("fieldRef")
        if ref is not None:
            ref.setdefault("apiVersion", "v1")


def default_pod_spec(spec: Obj) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for group in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(group) or []:
            _container(c)
    for volume in spec.get("volumes") or []:
        if not any(source in volume for source in _VOLUME_SOURCES):
            volume["emptyDir"] = {}
        for source in _DEFAULT_MODE_SOURCES:
            if isinstance(volume.get(source), dict):
                volume[source].setdefault("defaultMode", 420)
        if isinstance(volume.get("hostPath"), dict):
            volume["hostPath"].setdefault("type", "")


def default_template(spec: Obj) -> None:
    """The pod template inside a workload's spec."""
    template = spec.get("template")
    if isinstance(template, dict):
        default_pod_spec(template.setdefault("spec", {}))


def initial_status(spec: Obj) -> Obj:
    """A new pod's status: Pending, its QoS class, and, with scheduling gates, upstream's
    PodScheduled=False condition with reason SchedulingGated (the scheduler does not try it)."""
    status: Obj = {"phase": "Pending", "qosClass": qos_class(spec)}
    if spec.get("schedulingGates"):
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": timestamp(),
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
            }
        ]
    return status


def qos_class(spec: Obj) -> str:
    """GetPodQOS: Guaranteed when every container limits cpu and memory with equal requests."""
    containers = [c for g in ("initContainers", "containers") for c in spec.get(g) or []]
    requests_any = False
    guaranteed = bool(containers)
    for c in containers:
        resources = c.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = resources.get("requests") or {}
        if limits or requests:
            requests_any = True
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                guaranteed = False
    if not requests_any:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


# --- validation --------------------------------------------------------------------------------------

_RESTART = ["Always", "OnFailure", "Never"]
_DNS = ["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"]
_PULL = ["Always", "IfNotPresent", "Never"]
_PROTOCOLS = ["SCTP", "TCP", "UDP"]
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_ENV_NAME_MSG = (
    "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', "
    "and must not start with a digit"
)
_STANDARD_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")

# upstream's sysctl names (validation.go: SysctlContainSlashFmt, SysctlMaxLength)
SYSCTL_MAX_LENGTH = 253
_SYSCTL_SEGMENT = r"[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
SYSCTL_PATTERN = rf"^({_SYSCTL_SEGMENT}[\./])*{_SYSCTL_SEGMENT}$"
_SYSCTL = re.compile(SYSCTL_PATTERN)
# Sysctls in the namespaces a pod shares with its host when hostNetwork / hostIPC is set
# (k8s.io/component-helpers/node/util/sysctl: GetNamespace).
_IPC_SYSCTLS = ("kernel.sem",)
_IPC_PREFIXES = ("kernel.shm", "kernel.msg", "fs.mqueue.")
_NET_PREFIXES = ("net.",)


def _sysctl_dotted(name: str) -> str:
    """NormalizeName: a name whose first separator is '/' uses '/' for '.' and the other way round."""
    first = next((c for c in name if c in "./"), ".")
    return name if first == "." else name.translate(str.maketrans("./", "/."))


def validate_sysctls(path: str, security: Obj) -> list[FieldError]:
    """validateSysctls: each name present, well formed, unique, and not of a namespace shared with the host."""
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, sysctl in enumerate(security.get("sysctls") or []):
        p = f"{path}[{i}].name"
        name = sysctl.get("name") or ""
        if not name:
            errors.append(required(p))
        elif len(name) > SYSCTL_MAX_LENGTH or not _SYSCTL.match(name):
            errors.append(
                invalid(
                    p,
                    name,
                    f"must have at most {SYSCTL_MAX_LENGTH} characters and match regex {SYSCTL_PATTERN}",
                )
            )
        elif name in seen:
            errors.append(duplicate(p, name))
        seen.add(name)
    return errors


def validate_host_sysctls(path: str, spec: Obj) -> list[FieldError]:
    """ValidateHostSysctl: a net.* sysctl with hostNetwork, an IPC one with hostIPC, would change the host."""
    errors: list[FieldError] = []
    for i, sysctl in enumerate((spec.get("securityContext") or {}).get("sysctls") or []):
        name = _sysctl_dotted(sysctl.get("name") or "")
        if spec.get("hostNetwork") and name.startswith(_NET_PREFIXES):
            errors.append(
                invalid(
                    f"{path}[{i}].name", sysctl["name"], "may not be specified when 'hostNetwork' is true"
                )
            )
        if spec.get("hostIPC") and (name in _IPC_SYSCTLS or name.startswith(_IPC_PREFIXES)):
            errors.append(
                invalid(f"{path}[{i}].name", sysctl["name"], "may not be specified when 'hostIPC' is true")
            )
    return errors


def _overcommit_allowed(resource: str) -> bool:
    """Native resources (no domain, or kubernetes.io) other than huge pages may request less than limits."""
    native = "/" not in resource or resource.split("/", 1)[0].endswith("kubernetes.io")
    return native and not resource.startswith("hugepages-")


def _container_resource_name(path: str, resource: str) -> list[FieldError]:
    if "/" not in resource:
        if resource not in _STANDARD_CONTAINER_RESOURCES and not resource.startswith("hugepages-"):
            return [invalid(path, resource, "must be a standard resource for containers")]
        return []
    return qualified_name(path, resource)


def validate_resources(path: str, resources: Obj, container: bool = True) -> list[FieldError]:
    """ValidateResourceRequirements: known names, non-negative amounts, requests within limits."""
    errors: list[FieldError] = []
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    for name, amount in limits.items():
        p = f"{path}.limits[{name}]"
        if container:
            errors += _container_resource_name(p, name)
        errors += nonnegative_quantity(p, amount)
    for name, amount in requests.items():
        p = f"{path}.requests[{name}]"
        if container:
            errors += _container_resource_name(p, name)
        errors += nonnegative_quantity(p, amount)
        request, limit = quantity(amount), quantity(limits[name]) if name in limits else None
        if request is None:
            continue
        if limit is not None:
            if request.amount != limit.amount and not _overcommit_allowed(name):
                errors.append(
                    invalid(f"{path}.requests", str(request), f"must be equal to {name} limit of {limit}")
                )
            elif request.amount > limit.amount:
                errors.append(
                    invalid(
                        f"{path}.requests",
                        str(request),
                        f"must be less than or equal to {name} limit of {limit}",
                    )
                )
        elif not _overcommit_allowed(name):
            errors.append(required(f"{path}.limits", "Limit must be set for non overcommitable resources"))
    return errors


def _ports(p: str, c: Obj) -> list[FieldError]:
    errors: list[FieldError] = []
    seen: set[tuple[Any, Any]] = set()
    for j, port in enumerate(c.get("ports") or []):
        pp = f"{p}.ports[{j}]"
        if "containerPort" not in port:
            errors.append(required(f"{pp}.containerPort"))
        else:
            errors += port_number(f"{pp}.containerPort", port["containerPort"])
        if port.get("hostPort"):
            errors += port_number(f"{pp}.hostPort", port["hostPort"])
        if port.get("protocol", "TCP") not in _PROTOCOLS:
            errors.append(not_supported(f"{pp}.protocol", port.get("protocol"), _PROTOCOLS))
        ident = (port.get("containerPort"), port.get("protocol", "TCP"))
        if ident in seen:
            errors.append(duplicate(pp, f"{ident[0]}/{ident[1]}"))
        seen.add(ident)
    return errors


def _containers(
    path: str, items: list[Obj] | None, volumes: set[str], required_nonempty: bool
) -> list[FieldError]:
    if not items:
        return [required(path)] if required_nonempty else []
    errors: list[FieldError] = []
    names: set[str] = set()
    for i, c in enumerate(items):
        p = f"{path}[{i}]"
        name = c.get("name")
        if not name:
            errors.append(required(f"{p}.name"))
        else:
            errors += dns_label(f"{p}.name", name)
            if name in names:
                errors.append(duplicate(f"{p}.name", name))
            names.add(name)
        if not c.get("image"):
            errors.append(required(f"{p}.image"))
        policy = c.get("imagePullPolicy")
        if policy is not None and policy not in _PULL:
            errors.append(not_supported(f"{p}.imagePullPolicy", policy, _PULL))
        errors += _ports(p, c)
        for j, env in enumerate(c.get("env") or []):
            if not env.get("name"):
                errors.append(required(f"{p}.env[{j}].name"))
            elif not _ENV_NAME.match(env["name"]):
                errors.append(invalid(f"{p}.env[{j}].name", env["name"], _ENV_NAME_MSG))
        for j, mount in enumerate(c.get("volumeMounts") or []):
            if not mount.get("name"):
                errors.append(required(f"{p}.volumeMounts[{j}].name"))
            elif mount["name"] not in volumes:
                errors.append(
                    FieldError(
                        "FieldValueNotFound", f"{p}.volumeMounts[{j}].name", f'Not found: "{mount["name"]}"'
                    )
                )
            if not mount.get("mountPath"):
                errors.append(required(f"{p}.volumeMounts[{j}].mountPath"))
        errors += validate_resources(f"{p}.resources", c.get("resources") or {})
    return errors


def _volumes(path: str, spec: Obj) -> tuple[list[FieldError], set[str]]:
    errors: list[FieldError] = []
    volumes: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        name = volume.get("name")
        if not name:
            errors.append(required(f"{path}.volumes[{i}].name"))
            continue
        errors += dns_label(f"{path}.volumes[{i}].name", name)
        if name in volumes:
            errors.append(duplicate(f"{path}.volumes[{i}].name", name))
        volumes.add(name)
        size = (volume.get("emptyDir") or {}).get("sizeLimit")
        q = quantity(size) if size is not None else None
        if q is not None and q.sign() < 0:
            errors.append(
                FieldError(
                    "FieldValueForbidden",
                    f"{path}.volumes[{i}].emptyDir.sizeLimit",
                    "Forbidden: SizeLimit field must be a valid resource quantity",
                )
            )
    return errors, volumes


def validate_pod_spec(spec: Any, path: str = "spec") -> list[FieldError]:
    if not isinstance(spec, dict):
        return [required(path)]
    errors, volumes = _volumes(path, spec)
    errors += _containers(f"{path}.containers", spec.get("containers"), volumes, True)
    errors += _containers(f"{path}.initContainers", spec.get("initContainers"), volumes, False)
    restart = spec.get("restartPolicy")
    if restart is not None and restart not in _RESTART:
        errors.append(not_supported(f"{path}.restartPolicy", restart, _RESTART))
    dns = spec.get("dnsPolicy")
    if dns is not None and dns not in _DNS:
        errors.append(not_supported(f"{path}.dnsPolicy", dns, _DNS))
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and grace < 0:
        errors.append(
            invalid(f"{path}.terminationGracePeriodSeconds", grace, "must be greater than or equal to 0")
        )
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and deadline <= 0:
        errors.append(
            invalid(f"{path}.activeDeadlineSeconds", deadline, "must be between 1 and 2147483647, inclusive")
        )
    if spec.get("nodeName"):
        errors += dns_subdomain(f"{path}.nodeName", spec["nodeName"])
    if spec.get("priorityClassName"):
        errors += dns_subdomain(f"{path}.priorityClassName", spec["priorityClassName"])
    errors += labels(f"{path}.nodeSelector", spec.get("nodeSelector"))
    security = spec.get("securityContext") or {}
    errors += validate_sysctls(f"{path}.securityContext.sysctls", security)
    errors += validate_host_sysctls(f"{path}.securityContext.sysctls", spec)
    for name, amount in (spec.get("overhead") or {}).items():
        errors += nonnegative_quantity(f"{path}.overhead[{name}]", amount)
    if spec.get("resources"):
        errors += validate_resources(f"{path}.resources", spec["resources"], container=False)
    errors += validate_pod_affinity(f"{path}.affinity", spec.get("affinity"))
    errors += validate_spread_constraints(
        f"{path}.topologySpreadConstraints", spec.get("topologySpreadConstraints")
    )
    return errors


# --- inter-pod affinity and topology spread (upstream's validatePodAffinityTerm and
# validateTopologySpreadConstraints) ---------------------------------------------------------------


def label_selector(path: str, selector: Any) -> list[FieldError]:
    """metav1 ValidateLabelSelector: labels, known operators, values only (and always) with In/NotIn."""
    if not isinstance(selector, dict):
        return []
    errors = labels(f"{path}.matchLabels", selector.get("matchLabels"))
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        where = f"{path}.matchExpressions[{i}]"
        expr = expr if isinstance(expr, dict) else {}
        operator, values = expr.get("operator", ""), expr.get("values") or []
        if operator in ("In", "NotIn"):
            if not values:
                errors.append(
                    required(f"{where}.values", "must be specified when `operator` is 'In' or 'NotIn'")
                )
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                errors.append(
                    forbidden(
                        f"{where}.values",
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    )
                )
        else:
            errors.append(invalid(f"{where}.operator", operator, "not a valid selector operator"))
        errors += qualified_name(f"{where}.key", expr.get("key") or "")
        for j, value in enumerate(values):
            errors += [invalid(f"{where}.values[{j}]", value, m) for m in name_rules.label_value(str(value))]
    return errors


def _label_keys(path: str, keys: Any, selector: Any, in_selector_too: bool = False) -> list[FieldError]:
    """matchLabelKeys/mismatchLabelKeys: only beside a labelSelector, label names; for a spread
    constraint, none may also be a key of its labelSelector."""
    if not keys:
        return []
    errors: list[FieldError] = []
    if selector is None:
        errors.append(forbidden(path, "must not be specified when labelSelector is not set"))
    taken: set[Any] = set()
    if in_selector_too and isinstance(selector, dict):
        taken = set((selector.get("matchLabels") or {}).keys())
        taken |= {e.get("key") for e in selector.get("matchExpressions") or [] if isinstance(e, dict)}
    for i, key in enumerate(keys):
        errors += qualified_name(f"{path}[{i}]", str(key))
        if key in taken:
            errors.append(invalid(f"{path}[{i}]", key, "exists in both matchLabelKeys and labelSelector"))
    return errors


def _affinity_term(path: str, term: Any) -> list[FieldError]:
    term = term if isinstance(term, dict) else {}
    errors = label_selector(f"{path}.labelSelector", term.get("labelSelector"))
    errors += label_selector(f"{path}.namespaceSelector", term.get("namespaceSelector"))
    for ns in term.get("namespaces") or []:
        errors += dns_label(f"{path}.namespace", str(ns))
    match_keys, mismatch_keys = term.get("matchLabelKeys") or [], term.get("mismatchLabelKeys") or []
    errors += _label_keys(f"{path}.matchLabelKeys", match_keys, term.get("labelSelector"))
    errors += _label_keys(f"{path}.mismatchLabelKeys", mismatch_keys, term.get("labelSelector"))
    for i, key in enumerate(match_keys):
        if key in mismatch_keys:
            errors.append(
                invalid(
                    f"{path}.matchLabelKeys[{i}]", key, "exists in both matchLabelKeys and mismatchLabelKeys"
                )
            )
    if not term.get("topologyKey"):
        return [*errors, required(f"{path}.topologyKey", "can not be empty")]
    return errors + qualified_name(f"{path}.topologyKey", str(term["topologyKey"]))


def validate_pod_affinity(path: str, affinity: Any) -> list[FieldError]:
    errors: list[FieldError] = []
    if not isinstance(affinity, dict):
        return errors
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind) or {}
        where = f"{path}.{kind}"
        for i, term in enumerate(section.get("requiredDuringSchedulingIgnoredDuringExecution") or []):
            errors += _affinity_term(f"{where}.requiredDuringSchedulingIgnoredDuringExecution[{i}]", term)
        for i, weighted in enumerate(section.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
            at = f"{where}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
            weighted = weighted if isinstance(weighted, dict) else {}
            weight = weighted.get("weight") or 0
            if not 1 <= weight <= 100:
                errors.append(invalid(f"{at}.weight", weight, "must be in the range 1-100"))
            errors += _affinity_term(f"{at}.podAffinityTerm", weighted.get("podAffinityTerm"))
    return errors


_WHEN_UNSATISFIABLE = ["DoNotSchedule", "ScheduleAnyway"]
_INCLUSION_POLICIES = ["Honor", "Ignore"]


def validate_spread_constraints(path: str, constraints: Any) -> list[FieldError]:
    errors: list[FieldError] = []
    constraints = constraints if isinstance(constraints, list) else []
    for i, c in enumerate(constraints):
        at = f"{path}[{i}]"
        c = c if isinstance(c, dict) else {}
        skew = c.get("maxSkew") or 0
        if skew <= 0:
            errors.append(invalid(f"{at}.maxSkew", skew, "must be greater than zero"))
        if not c.get("topologyKey"):
            errors.append(required(f"{at}.topologyKey", "can not be empty"))
        action = c.get("whenUnsatisfiable")
        if action not in _WHEN_UNSATISFIABLE:
            errors.append(not_supported(f"{at}.whenUnsatisfiable", action, _WHEN_UNSATISFIABLE))
        pair = (c.get("topologyKey"), action)
        if any(
            isinstance(o, dict) and (o.get("topologyKey"), o.get("whenUnsatisfiable")) == pair
            for o in constraints[i + 1 :]
        ):
            errors.append(duplicate(f"{at}.{{topologyKey, whenUnsatisfiable}}", f"{{{pair[0]}, {pair[1]}}}"))
        min_domains = c.get("minDomains")
        if min_domains is not None:
            if min_domains <= 0:
                errors.append(invalid(f"{at}.minDomains", min_domains, "must be greater than zero"))
            if action != "DoNotSchedule":
                errors.append(
                    invalid(
                        f"{at}.minDomains",
                        min_domains,
                        f"can only use minDomains if whenUnsatisfiable=DoNotSchedule, not {action}",
                    )
                )
        for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            value = c.get(policy)
            if value is not None and value not in _INCLUSION_POLICIES:
                errors.append(not_supported(f"{at}.{policy}", value, _INCLUSION_POLICIES))
        errors += _label_keys(f"{at}.matchLabelKeys", c.get("matchLabelKeys"), c.get("labelSelector"), True)
        errors += label_selector(f"{at}.labelSelector", c.get("labelSelector"))
    return errors
