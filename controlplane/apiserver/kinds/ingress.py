"""networking.k8s.io/v1 Ingress (+status), and the DefaultIngressClass admission plugin.

An Ingress maps hosts and paths to Services for an ingress controller to serve; its status carries the
addresses the controller listens on. Validation is upstream's ValidateIngressCreate/Update (a rule or a
default backend; hosts DNS names or `*.` wildcards, never IPs; pathType required, Exact and Prefix paths
absolute without `//`, `/./`, `/../`, `%2f` nor a trailing `/.` or `/..`; a backend is a Service (a
DNS-1035 name and a port name or number) or a resource, not both; TLS hosts and Secret names; on create
the legacy `kubernetes.io/ingress.class` annotation must agree with `ingressClassName`) and its status
update (load balancer IPs and hostnames).

DefaultIngressClass (upstream's plugin/pkg/admission/network/defaultingressclass): a new Ingress that
names no class, by field or by the legacy annotation, gets the class annotated as the default; with
several defaults the most recently created wins (ties: the first name).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, invalid, not_supported, required
from controlplane.apiserver.kinds import ingressclass
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import dns1035_label, dns_subdomain, ip_address, port_number
from kubeclient import names

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import AdmissionRequest

Obj = dict[str, Any]

LEGACY_CLASS_ANNOTATION = "kubernetes.io/ingress.class"
PATH_TYPES = ["Exact", "ImplementationSpecific", "Prefix"]
_BAD_SEQUENCES = ("//", "/./", "/../", "%2f", "%2F")
_BAD_SUFFIXES = ("/..", "/.")
NOT_IP = "must be a DNS name, not an IP address"


def _is_ip(value: str) -> bool:
    return not ip_address("", value)


def _host(path: str, host: str) -> list[FieldError]:
    """A rule's or TLS entry's host: a DNS subdomain or a `*.` wildcard one."""
    checks = names.wildcard_dns1123_subdomain(host) if "*" in host else names.dns1123_subdomain(host)
    return [invalid(path, host, msg) for msg in checks]


def validate_backend(path: str, backend: Obj) -> list[FieldError]:
    service, resource = backend.get("service"), backend.get("resource")
    if service is not None and resource is not None:
        return [invalid(path, "", "cannot set both resource and service backends")]
    if resource is not None:
        return ingressclass.typed_reference(f"{path}.resource", resource)
    if service is None:
        return [invalid(path, "", "resource or service backend is required")]
    errors: list[FieldError] = []
    name = service.get("name") or ""
    if not name:
        errors.append(required(f"{path}.service.name"))
    else:
        errors += dns1035_label(f"{path}.service.name", name)
    port = service.get("port") or {}
    port_name, number = port.get("name") or "", port.get("number") or 0
    if port_name and number:
        errors.append(invalid(path, "", "cannot set both port name & port number"))
    elif port_name:
        errors += [invalid(f"{path}.service.port.name", port_name, m) for m in names.port_name(port_name)]
    elif number:
        errors += port_number(f"{path}.service.port.number", number)
    else:
        errors.append(required(path, "port name or number is required"))
    return errors


def _http_path(path: str, item: Obj) -> list[FieldError]:
    kind = item.get("pathType")
    if kind is None:
        return [required(f"{path}.pathType", "pathType must be specified")]
    value = item.get("path") or ""
    errors: list[FieldError] = []
    if kind in ("Exact", "Prefix"):
        if not value.startswith("/"):
            errors.append(invalid(f"{path}.path", value, "must be an absolute path"))
        errors += [
            invalid(f"{path}.path", value, f"must not contain '{s}'") for s in _BAD_SEQUENCES if s in value
        ]
        errors += [
            invalid(f"{path}.path", value, f"cannot end with '{s}'")
            for s in _BAD_SUFFIXES
            if value.endswith(s)
        ]
    elif kind == "ImplementationSpecific":
        if value and not value.startswith("/"):
            errors.append(invalid(f"{path}.path", value, "must be an absolute path"))
    else:
        errors.append(not_supported(f"{path}.pathType", kind, PATH_TYPES))
    return errors + validate_backend(f"{path}.backend", item.get("backend") or {})


def _rules(rules: list[Obj]) -> list[FieldError]:
    errors: list[FieldError] = []
    for i, rule in enumerate(rules):
        at = f"spec.rules[{i}]"
        host = rule.get("host") or ""
        if host:
            if _is_ip(host):
                errors.append(invalid(f"{at}.host", host, NOT_IP))
            errors += _host(f"{at}.host", host)
        http = rule.get("http")
        if http is None:
            continue
        paths = http.get("paths") or []
        if not paths:
            errors.append(required(f"{at}.http.paths"))
        for j, item in enumerate(paths):
            errors += _http_path(f"{at}.http.paths[{j}]", item)
    return errors


def _tls(entries: list[Obj]) -> list[FieldError]:
    errors: list[FieldError] = []
    for i, entry in enumerate(entries):
        for j, host in enumerate(entry.get("hosts") or []):
            errors += _host(f"spec.tls[{i}].hosts[{j}]", host)
        secret = entry.get("secretName") or ""
        if secret:
            errors += dns_subdomain(f"spec.tls[{i}].secretName", secret)
    return errors


def validate_ingress_spec(spec: Obj) -> list[FieldError]:
    errors: list[FieldError] = []
    rules = spec.get("rules") or []
    if not rules and spec.get("defaultBackend") is None:
        errors.append(
            invalid("spec", spec.get("rules"), "either `defaultBackend` or `rules` must be specified")
        )
    if spec.get("defaultBackend") is not None:
        errors += validate_backend("spec.defaultBackend", spec["defaultBackend"])
    errors += _rules(rules) + _tls(spec.get("tls") or [])
    if spec.get("ingressClassName") is not None:
        errors += dns_subdomain("spec.ingressClassName", spec["ingressClassName"])
    return errors


def validate_load_balancer(status: Obj) -> list[FieldError]:
    errors: list[FieldError] = []
    for i, entry in enumerate((status.get("loadBalancer") or {}).get("ingress") or []):
        at = f"status.loadBalancer.ingress[{i}]"
        if entry.get("ip"):
            errors += ip_address(f"{at}.ip", entry["ip"])
        hostname = entry.get("hostname") or ""
        if hostname:
            errors += dns_subdomain(f"{at}.hostname", hostname)
            if _is_ip(hostname):
                errors.append(invalid(f"{at}.hostname", hostname, NOT_IP))
    return errors


def pick_default_class(classes: list[Obj]) -> Obj | None:
    """The newest class marked default (equal times: the first name), as upstream's getDefaultClass."""
    defaults = [c for c in classes if ingressclass.is_default(c)]
    if not defaults:
        return None
    defaults.sort(key=lambda c: c["metadata"]["name"])
    return max(defaults, key=lambda c: c["metadata"].get("creationTimestamp") or "")


class DefaultIngressClass:
    """Upstream's DefaultIngressClass admission plugin: Ingress creates only."""

    name = "DefaultIngressClass"

    def admit(self, request: AdmissionRequest) -> None:
        if request.kind is not KIND or request.subresource or request.operation != "CREATE":
            return
        spec = request.obj.setdefault("spec", {})
        annotations = request.obj.get("metadata", {}).get("annotations") or {}
        if spec.get("ingressClassName") is not None or LEGACY_CLASS_ANNOTATION in annotations:
            return
        cache = request.registry.cache
        classes = [c.obj for c in cache.list(ingressclass.KIND.bucket, ingressclass.KIND.prefix(""))]
        chosen = pick_default_class(classes)
        if chosen is not None:
            spec["ingressClassName"] = chosen["metadata"]["name"]


def _hosts(rules: list[Obj]) -> str:
    """printers.go formatHosts: the first three hosts named, `+ N more...` when rules remain after
    them, `*` when none is named."""
    shown: list[str] = []
    more = False
    for rule in rules:
        more = more or len(shown) == 3
        if not more and rule.get("host"):
            shown.append(rule["host"])
    if not shown:
        return "*"
    return ",".join(shown) + (f" + {len(rules) - 3} more..." if more else "")


def _address(status: Obj) -> str:
    """The load balancer's IPs (else hostnames), sorted and unique; the server's tables are wide, so
    never cut."""
    entries = (status.get("loadBalancer") or {}).get("ingress") or []
    return ",".join(
        sorted({e.get("ip") or e.get("hostname") for e in entries if e.get("ip") or e.get("hostname")})
    )


class Ingress(Kind):
    group = "networking.k8s.io"
    kind = "Ingress"
    plural = "ingresses"
    etcd_resource_prefix = "ingress"  # upstream's SpecialDefaultResourcePrefixes
    short_names = ("ing",)
    schema = "V1Ingress"
    generation = True
    subresources = (StatusSubresource("Ingress", "networking.k8s.io"),)
    admission = (DefaultIngressClass(),)
    columns = (
        tables.NAME,
        tables.column(
            "Class",
            desc="The name of the IngressClass resource that should be used to implement this Ingress",
        ),
        tables.column(
            "Hosts", desc="Hosts that incoming requests are matched against before the ingress rule"
        ),
        tables.column("Address", desc="Address is a list containing ingress points for the load-balancer"),
        tables.column("Ports", desc="Ports of TLS configurations that open"),
        tables.AGE,
    )

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"loadBalancer": {}}

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validate_ingress_spec(obj.get("spec") or {}) + validate_load_balancer(obj.get("status") or {})

    def validate_object(self, obj: Obj, old: Obj | None) -> list[FieldError]:
        errors = self.validate(obj)
        legacy = (obj.get("metadata", {}).get("annotations") or {}).get(LEGACY_CLASS_ANNOTATION)
        named = (obj.get("spec") or {}).get("ingressClassName")
        if old is None and legacy is not None and named is not None and legacy != named:
            errors.append(
                invalid(
                    f"annotations.{LEGACY_CLASS_ANNOTATION}",
                    legacy,
                    "must match `ingressClassName` when both are specified",
                )
            )
        return errors

    def cells(self, obj: Obj) -> list[Any]:
        spec = obj.get("spec") or {}
        return [
            obj["metadata"].get("name"),
            spec.get("ingressClassName") or "<none>",
            _hosts(spec.get("rules") or []),
            _address(obj.get("status") or {}),
            "80, 443" if spec.get("tls") else "80",
            age(obj),
        ]


KIND = Ingress()
