"""Validation of the served types; failures become 422 Invalid with one cause per field.

Messages follow upstream's wording (`spec.containers[0].image: Required value`) because users and
tools match on them.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any

from controlplane.apiserver.errors import FieldError, duplicate, forbidden, invalid, not_supported, required

Obj = dict[str, Any]

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_C_IDENTIFIER_ISH = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")

LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def dns_label(path: str, value: str) -> list[FieldError]:
    if len(value) > 63:
        return [invalid(path, value, "must be no more than 63 characters")]
    if not _DNS1123_LABEL.match(value):
        return [invalid(path, value, LABEL_MSG)]
    return []


def dns_subdomain(path: str, value: str) -> list[FieldError]:
    if len(value) > 253:
        return [invalid(path, value, "must be no more than 253 characters")]
    if not _DNS1123_SUBDOMAIN.match(value):
        return [invalid(path, value, SUBDOMAIN_MSG)]
    return []


def _qualified_name(path: str, key: str) -> list[FieldError]:
    prefix, _, name = key.rpartition("/")
    errors: list[FieldError] = []
    if prefix and not _DNS1123_SUBDOMAIN.match(prefix):
        errors.append(invalid(path, key, "prefix part " + SUBDOMAIN_MSG))
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        errors.append(
            invalid(
                path,
                key,
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            )
        )
    return errors


def labels(path: str, value: Any) -> list[FieldError]:
    if value is None:
        return []
    if not isinstance(value, dict):
        return [invalid(path, value, "must be a map of strings")]
    errors: list[FieldError] = []
    for key, val in value.items():
        errors += _qualified_name(path, key)
        if not isinstance(val, str) or len(val) > 63 or not _LABEL_VALUE.match(val):
            errors.append(
                invalid(
                    path,
                    val,
                    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
                    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
                    "'my_value',  or '12345', regex used for validation is "
                    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
                )
            )
    return errors


def annotations(path: str, value: Any) -> list[FieldError]:
    if value is None:
        return []
    if not isinstance(value, dict):
        return [invalid(path, value, "must be a map of strings")]
    errors: list[FieldError] = []
    total = 0
    for key, val in value.items():
        errors += _qualified_name(path, key)
        if not isinstance(val, str):
            errors.append(invalid(f"{path}[{key}]", val, "must be a string"))
        else:
            total += len(key) + len(val)
    if total > 256 * 1024:
        errors.append(FieldError("FieldValueTooLong", path, "Too long: must have at most 262144 bytes"))
    return errors


def object_meta(meta: Any, namespaced: bool, name_check: Callable[[str, str], list[FieldError]]) -> list[FieldError]:
    if not isinstance(meta, dict):
        return [required("metadata")]
    errors: list[FieldError] = []
    name = meta.get("name")
    if not name:
        errors.append(required("metadata.name", "name or generateName is required"))
    elif not isinstance(name, str):
        errors.append(invalid("metadata.name", name, "must be a string"))
    else:
        errors += name_check("metadata.name", name)
    errors += labels("metadata.labels", meta.get("labels"))
    errors += annotations("metadata.annotations", meta.get("annotations"))
    finalizers = meta.get("finalizers")
    if finalizers is not None:
        if not isinstance(finalizers, list):
            errors.append(invalid("metadata.finalizers", finalizers, "must be a list"))
        else:
            for i, f in enumerate(finalizers):
                if not isinstance(f, str) or "/" not in f and f not in ("kubernetes", "orphan", "foregroundDeletion"):
                    if not isinstance(f, str) or _qualified_name(f"metadata.finalizers[{i}]", f):
                        errors.append(invalid(f"metadata.finalizers[{i}]", f, "name is neither a standard finalizer name nor is it fully qualified"))
    for i, ref in enumerate(meta.get("ownerReferences") or []):
        for field in ("apiVersion", "kind", "name", "uid"):
            if not isinstance(ref, dict) or not ref.get(field):
                errors.append(required(f"metadata.ownerReferences[{i}].{field}"))
    return errors


_RESTART = ["Always", "OnFailure", "Never"]
_DNS = ["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"]
_PULL = ["Always", "IfNotPresent", "Never"]
_PROTOCOLS = ["SCTP", "TCP", "UDP"]


def _port(path: str, value: Any) -> list[FieldError]:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        return [invalid(path, value, "must be between 1 and 65535, inclusive")]
    return []


def _containers(path: str, items: Any, volumes: set[str], required_nonempty: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    if not isinstance(items, list) or (required_nonempty and not items):
        return [required(path)] if required_nonempty else []
    names: set[str] = set()
    for i, c in enumerate(items):
        p = f"{path}[{i}]"
        if not isinstance(c, dict):
            errors.append(invalid(p, c, "must be an object"))
            continue
        name = c.get("name")
        if not name:
            errors.append(required(f"{p}.name"))
        elif isinstance(name, str):
            errors += dns_label(f"{p}.name", name)
            if name in names:
                errors.append(duplicate(f"{p}.name", name))
            names.add(name)
        if not c.get("image"):
            errors.append(required(f"{p}.image"))
        policy = c.get("imagePullPolicy")
        if policy is not None and policy not in _PULL:
            errors.append(not_supported(f"{p}.imagePullPolicy", policy, _PULL))
        ports: set[tuple[Any, Any]] = set()
        for j, port in enumerate(c.get("ports") or []):
            pp = f"{p}.ports[{j}]"
            if not isinstance(port, dict):
                continue
            if "containerPort" not in port:
                errors.append(required(f"{pp}.containerPort"))
            else:
                errors += _port(f"{pp}.containerPort", port["containerPort"])
            if "hostPort" in port and port["hostPort"]:
                errors += _port(f"{pp}.hostPort", port["hostPort"])
            if port.get("protocol", "TCP") not in _PROTOCOLS:
                errors.append(not_supported(f"{pp}.protocol", port.get("protocol"), _PROTOCOLS))
            ident = (port.get("containerPort"), port.get("protocol", "TCP"))
            if ident in ports:
                errors.append(duplicate(f"{pp}", f"{ident[0]}/{ident[1]}"))
            ports.add(ident)
        for j, env in enumerate(c.get("env") or []):
            if not isinstance(env, dict) or not env.get("name"):
                errors.append(required(f"{p}.env[{j}].name"))
            elif not _C_IDENTIFIER_ISH.match(env["name"]):
                errors.append(invalid(f"{p}.env[{j}].name", env["name"], "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit"))
        for j, mount in enumerate(c.get("volumeMounts") or []):
            if not isinstance(mount, dict):
                continue
            if not mount.get("name"):
                errors.append(required(f"{p}.volumeMounts[{j}].name"))
            elif mount["name"] not in volumes:
                errors.append(FieldError("FieldValueNotFound", f"{p}.volumeMounts[{j}].name", f'Not found: "{mount["name"]}"'))
            if not mount.get("mountPath"):
                errors.append(required(f"{p}.volumeMounts[{j}].mountPath"))
    return errors


def pod_spec(spec: Any, path: str = "spec") -> list[FieldError]:
    if not isinstance(spec, dict):
        return [required(path)]
    errors: list[FieldError] = []
    volumes: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        name = volume.get("name") if isinstance(volume, dict) else None
        if not name:
            errors.append(required(f"{path}.volumes[{i}].name"))
            continue
        errors += dns_label(f"{path}.volumes[{i}].name", name)
        if name in volumes:
            errors.append(duplicate(f"{path}.volumes[{i}].name", name))
        volumes.add(name)
    errors += _containers(f"{path}.containers", spec.get("containers"), volumes, True)
    errors += _containers(f"{path}.initContainers", spec.get("initContainers"), volumes, False)
    restart = spec.get("restartPolicy")
    if restart is not None and restart not in _RESTART:
        errors.append(not_supported(f"{path}.restartPolicy", restart, _RESTART))
    dns = spec.get("dnsPolicy")
    if dns is not None and dns not in _DNS:
        errors.append(not_supported(f"{path}.dnsPolicy", dns, _DNS))
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or grace < 0):
        errors.append(invalid(f"{path}.terminationGracePeriodSeconds", grace, "must be greater than or equal to 0"))
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and (not isinstance(deadline, int) or deadline <= 0):
        errors.append(invalid(f"{path}.activeDeadlineSeconds", deadline, "must be between 1 and 2147483647, inclusive"))
    node = spec.get("nodeName")
    if node:
        errors += dns_subdomain(f"{path}.nodeName", node)
    return errors


def _selector_matches(selector: Any, labels_: dict[str, str]) -> bool:
    if not isinstance(selector, dict):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels_.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels_.get(key) not in values:
            return False
        if op == "NotIn" and labels_.get(key) in values:
            return False
        if op == "Exists" and key not in labels_:
            return False
        if op == "DoesNotExist" and key in labels_:
            return False
    return True


def _workload(obj: Obj) -> list[FieldError]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    errors: list[FieldError] = []
    replicas = spec.get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or replicas < 0):
        errors.append(invalid("spec.replicas", replicas, "must be greater than or equal to 0"))
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        errors.append(required("spec.selector"))
    template = spec.get("template")
    if not isinstance(template, dict):
        errors.append(required("spec.template"))
        return errors
    tlabels = (template.get("metadata") or {}).get("labels") or {}
    errors += labels("spec.template.metadata.labels", tlabels)
    if isinstance(selector, dict) and not _selector_matches(selector, tlabels):
        errors.append(invalid("spec.template.metadata.labels", tlabels, "`selector` does not match template `labels`"))
    errors += pod_spec(template.get("spec"), "spec.template.spec")
    restart = (template.get("spec") or {}).get("restartPolicy")
    if restart not in (None, "Always"):
        errors.append(not_supported("spec.template.spec.restartPolicy", restart, ["Always"]))
    return errors


def _service(obj: Obj) -> list[FieldError]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    errors: list[FieldError] = []
    kinds = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]
    if spec.get("type") not in kinds:
        errors.append(not_supported("spec.type", spec.get("type"), kinds))
    ports = spec.get("ports") or []
    if not ports and spec.get("type") != "ExternalName" and spec.get("clusterIP") != "None":
        errors.append(required("spec.ports"))
    names: set[str] = set()
    for i, port in enumerate(ports):
        if not isinstance(port, dict):
            continue
        errors += _port(f"spec.ports[{i}].port", port.get("port"))
        if len(ports) > 1 and not port.get("name"):
            errors.append(required(f"spec.ports[{i}].name"))
        if port.get("name"):
            if port["name"] in names:
                errors.append(duplicate(f"spec.ports[{i}].name", port["name"]))
            names.add(port["name"])
    return errors


def _data_keys(obj: Obj, fields: tuple[str, ...]) -> list[FieldError]:
    errors: list[FieldError] = []
    for field in fields:
        data = obj.get(field)
        if data is None:
            continue
        if not isinstance(data, dict):
            errors.append(invalid(field, data, "must be a map"))
            continue
        for key, value in data.items():
            if not _CONFIG_KEY.match(key) or len(key) > 253:
                errors.append(invalid(f"{field}", key, "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"))
            if field in ("data", "binaryData") and obj.get("kind") == "Secret" or field == "binaryData":
                try:
                    base64.b64decode(value, validate=True)
                except (ValueError, TypeError):
                    errors.append(invalid(f"{field}[{key}]", "<value omitted>", "illegal base64 data"))
    return errors


def _event(obj: Obj) -> list[FieldError]:
    errors: list[FieldError] = []
    involved = obj.get("involvedObject")
    if not isinstance(involved, dict):
        errors.append(required("involvedObject"))
    if obj.get("type") not in (None, "", "Normal", "Warning"):
        errors.append(not_supported("type", obj.get("type"), ["Normal", "Warning"]))
    return errors


def _lease(obj: Obj) -> list[FieldError]:
    spec = obj.get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or duration <= 0):
        return [invalid("spec.leaseDurationSeconds", duration, "must be greater than 0")]
    return []


def _pod(obj: Obj) -> list[FieldError]:
    return pod_spec(obj.get("spec"))


VALIDATORS: dict[str, Callable[[Obj], list[FieldError]]] = {
    "Pod": _pod,
    "Deployment": _workload,
    "ReplicaSet": _workload,
    "Service": _service,
    "ConfigMap": lambda o: _data_keys(o, ("data", "binaryData")),
    "Secret": lambda o: _data_keys(o, ("data",)),
    "Event": _event,
    "Lease": _lease,
}

# Names are DNS labels for these kinds, subdomains for the rest.
_LABEL_NAMED = {"Namespace", "Service"}


def validate(kind: str, obj: Obj, namespaced: bool) -> list[FieldError]:
    check = dns_label if kind in _LABEL_NAMED else dns_subdomain
    if kind in ("Event",):
        check = lambda path, value: []  # noqa: E731 - event names carry dots and timestamps freely
    errors = object_meta(obj.get("metadata"), namespaced, check)
    validator = VALIDATORS.get(kind)
    if validator is not None:
        errors += validator(obj)
    return errors


# Pod spec fields a pod update may change (upstream ValidatePodUpdate).
def pod_update(old: Obj, new: Obj) -> list[FieldError]:
    old_spec = dict(old.get("spec") or {})
    new_spec = dict(new.get("spec") or {})
    errors: list[FieldError] = []
    for group in ("containers", "initContainers"):
        olds, news = old_spec.get(group) or [], new_spec.get(group) or []
        if group in old_spec and len(olds) == len(news):
            # Images may change; copy the new ones over the old so the rest can be compared.
            old_spec[group] = [
                {**o, "image": n.get("image")} if isinstance(o, dict) and isinstance(n, dict) else o
                for o, n in zip(olds, news, strict=True)
            ]
    old_tolerations = old_spec.get("tolerations") or []
    new_tolerations = new_spec.get("tolerations") or []
    if any(t not in new_tolerations for t in old_tolerations):
        errors.append(forbidden("spec.tolerations", "existing toleration can not be modified except its tolerationSeconds"))
    for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates"):
        old_spec.pop(key, None)
        new_spec.pop(key, None)
    if old_spec != new_spec:
        errors.append(
            forbidden(
                "spec",
                "pod updates may not change fields other than `spec.containers[*].image`,"
                "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                "(allow it to be set to 1 if it was previously negative)",
            )
        )
    return errors


def service_update(old: Obj, new: Obj) -> list[FieldError]:
    """spec.clusterIP is immutable once allocated (upstream), except for a change to/from ExternalName."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if "ExternalName" in (old_spec.get("type"), new_spec.get("type")):
        return []
    if old_spec.get("clusterIP") and new_spec.get("clusterIP", old_spec["clusterIP"]) != old_spec["clusterIP"]:
        return [invalid("spec.clusterIPs[0]", new_spec.get("clusterIP"), "may not change once set")]
    return []
