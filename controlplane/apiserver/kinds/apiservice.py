"""apiregistration.k8s.io/v1 APIService: one group/version served by another server behind this one (the
aggregation layer, kube-aggregator). An APIService with a `service` makes the API server proxy
/apis/<group>/<version> to that Service's endpoints (aggregator/); one without is served locally.

Validation as upstream's ValidateAPIService (k8s.io/kube-aggregator/pkg/apis/apiregistration/validation);
the Available condition is written by the availability check (aggregator/availability.py).
"""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, invalid, required
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import dns_label, dns_subdomain, port_number

Obj = dict[str, Any]


def service_cell(obj: Obj) -> str:
    svc = (obj.get("spec") or {}).get("service")
    return f"{svc.get('namespace', '')}/{svc.get('name', '')}" if svc else "Local"


def available_cell(obj: Obj) -> str:
    """upstream's printer: the Available condition's status, with its reason when not True."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Available":
            status = cond.get("status", "Unknown")
            return status if status == "True" else f"{status} ({cond.get('reason', '')})"
    return "Unknown"


class APIService(Kind):
    group = "apiregistration.k8s.io"
    kind = "APIService"
    plural = "apiservices"
    etcd_resource_prefix = "apiregistration.k8s.io/apiservices"  # served by kube-aggregator's own storage
    namespaced = False
    categories = ("api-extensions",)
    schema = "V1APIService"
    subresources = (StatusSubresource(),)
    columns = (
        tables.NAME,
        tables.column("Service", desc="The reference to the service that hosts this API endpoint."),
        tables.column("Available", desc="Whether this service is available."),
        tables.AGE,
    )

    def default(self, obj: Obj, creating: bool) -> None:
        svc = (obj.get("spec") or {}).get("service")
        if isinstance(svc, dict) and svc.get("port") is None:
            svc["port"] = 443

    def validate_name(self, path: str, name: str) -> list[FieldError]:
        return []  # checked against spec.version and spec.group in validate_spec, as upstream

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        name = (obj.get("metadata") or {}).get("name", "")
        spec = obj.get("spec") or {}
        group, version = spec.get("group", "") or "", spec.get("version", "") or ""
        errs: list[FieldError] = []
        if name != f"{version}.{group}":
            errs.append(invalid("metadata.name", name, 'must be `spec.version+"."+spec.group`'))
        if not group:
            if version != "v1":
                errs.append(
                    required("spec.group", "only v1 may have an empty group and it better be legacy kube")
                )
        else:
            errs += dns_subdomain("spec.group", group)
        if not version:
            errs.append(required("spec.version", ""))
        else:
            errs += dns_label("spec.version", version)
        minimum, priority = spec.get("groupPriorityMinimum") or 0, spec.get("versionPriority") or 0
        if not 0 < minimum <= 20000:
            errs.append(invalid("spec.groupPriorityMinimum", minimum, "must be positive and less than 20000"))
        if not 0 < priority <= 1000:
            errs.append(invalid("spec.versionPriority", priority, "must be positive and less than 1000"))
        errs += self._validate_service(spec)
        return errs

    @staticmethod
    def _validate_service(spec: Obj) -> list[FieldError]:
        svc = spec.get("service")
        errs: list[FieldError] = []
        if svc is None:
            if spec.get("caBundle"):
                errs.append(invalid("spec.caBundle", "", "local APIServices may not have a caBundle"))
            if spec.get("insecureSkipTLSVerify"):
                errs.append(
                    invalid(
                        "spec.insecureSkipTLSVerify",
                        True,
                        "local APIServices may not have insecureSkipTLSVerify",
                    )
                )
            return errs
        if not svc.get("namespace"):
            errs.append(required("spec.service.namespace", ""))
        if not svc.get("name"):
            errs.append(required("spec.service.name", ""))
        errs += port_number("spec.service.port", svc.get("port"))
        if spec.get("insecureSkipTLSVerify") and spec.get("caBundle"):
            errs.append(invalid("spec.insecureSkipTLSVerify", True, "may not be true if caBundle is present"))
        return errs

    def cells(self, obj: Obj) -> list[Any]:
        return [obj["metadata"].get("name"), service_cell(obj), available_cell(obj), age(obj)]


KIND = APIService()
