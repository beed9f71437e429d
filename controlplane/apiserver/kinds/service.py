"""core/v1 Service: defaults, validation, and the allocations the server makes (a cluster IP from
--service-cluster-ip-range, node ports from --service-node-port-range for NodePort and LoadBalancer
services: `registry.service_ranges`) which updates keep."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any

from controlplane.apiserver import errors, tables
from controlplane.apiserver.errors import FieldError, duplicate, forbidden, invalid, not_supported, required
from controlplane.apiserver.kinds.base import REFUSE_UNSUPPORTED, Kind, StatusSubresource, fields
from controlplane.apiserver.meta import age
from controlplane.apiserver.resourceproxy import Proxy, service_location
from controlplane.apiserver.smp_schema import CONDITIONS, META, ListSpec
from controlplane.apiserver.validation import dns1035_label, port_number

if TYPE_CHECKING:
    from controlplane.apiserver.registry import Registry
    from controlplane.apiserver.serviceranges import ServiceRanges

Obj = dict[str, Any]

TYPES = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]


def _node_ports(spec: Obj) -> bool:
    """Whether the server allocates node ports: NodePort, and LoadBalancer unless
    allocateLoadBalancerNodePorts is false (then only the node ports a user sets are kept)."""
    if spec.get("type") == "LoadBalancer":
        return spec.get("allocateLoadBalancerNodePorts") is not False
    return spec.get("type") == "NodePort"


class Service(Kind):
    kind = "Service"
    plural = "services"
    short_names = ("svc",)
    categories = ("all",)
    subresources = (StatusSubresource("Service"), Proxy("ServiceProxyOptions", service_location))
    schema = "V1Service"
    field_selectors = fields("spec.clusterIP", "spec.type")
    field_refusal = REFUSE_UNSUPPORTED
    return_deleted_object = True
    type_marks = {("V1ServicePort", "targetPort"): "int-or-string"}
    smp = {"metadata": META, "spec": {"ports": ListSpec("port")}, "status": CONDITIONS}
    columns = (
        tables.NAME,
        tables.column("Type", desc="type determines how the Service is exposed."),
        tables.column("Cluster-IP", desc="clusterIP is the IP address of the service."),
        tables.column(
            "External-IP",
            desc="externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
        ),
        tables.column("Port(s)", desc="The list of ports that are exposed by this service."),
        tables.AGE,
        tables.column(
            "Selector",
            1,
            desc="Route service traffic to pods with label keys and values matching this selector.",
        ),
    )

    def validate_name(self, path: str, name: str) -> list[FieldError]:
        """ValidateServiceName: a DNS-1035 label (the name becomes a DNS name and an env var prefix)."""
        return dns1035_label(path, name)

    def default(self, obj: Obj, creating: bool) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec["type"] != "ExternalName":
            spec.setdefault("ipFamilyPolicy", "SingleStack")
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("internalTrafficPolicy", "Cluster")
        if spec["type"] == "LoadBalancer":
            spec.setdefault("allocateLoadBalancerNodePorts", True)
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            # 0 or "" too: Go clients always send targetPort, as 0 when unset (SetDefaults_Service).
            if "port" in port and port.get("targetPort") in (None, 0, ""):
                port["targetPort"] = port["port"]

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"loadBalancer": {}}

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        super().prepare_for_update(new, old)
        _drop_type_dependent_fields(old, new)
        _keep_allocations(old, new)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [required("spec")]
        errors: list[FieldError] = []
        if spec.get("type") not in TYPES:
            errors.append(not_supported("spec.type", spec.get("type"), TYPES))
        ports = spec.get("ports") or []
        if not ports and spec.get("type") != "ExternalName" and spec.get("clusterIP") != "None":
            errors.append(required("spec.ports"))
        if "allocateLoadBalancerNodePorts" in spec and spec.get("type") != "LoadBalancer":
            errors.append(
                forbidden(
                    "spec.allocateLoadBalancerNodePorts", "may only be used when `type` is 'LoadBalancer'"
                )
            )
        if spec.get("loadBalancerSourceRanges") and spec.get("type") != "LoadBalancer":
            errors.append(
                forbidden("spec.loadBalancerSourceRanges", "may only be used when `type` is 'LoadBalancer'")
            )
        for i, cidr in enumerate(spec.get("loadBalancerSourceRanges") or []):
            try:
                ipaddress.ip_network(str(cidr).strip(), strict=False)
            except ValueError:
                errors.append(
                    invalid(
                        f"spec.loadBalancerSourceRanges[{i}]",
                        cidr,
                        "must be a list of IP ranges. For example, 10.240.0.0/24,10.250.0.0/24 ",
                    )
                )
        names: set[str] = set()
        for i, port in enumerate(ports):
            errors += port_number(f"spec.ports[{i}].port", port.get("port"))
            if len(ports) > 1 and not port.get("name"):
                errors.append(required(f"spec.ports[{i}].name"))
            if port.get("name"):
                if port["name"] in names:
                    errors.append(duplicate(f"spec.ports[{i}].name", port["name"]))
                names.add(port["name"])
        return errors

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        """spec.clusterIP is immutable once allocated, except for a change to or from ExternalName."""
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        if "ExternalName" in (old_spec.get("type"), new_spec.get("type")):
            return []
        if (
            old_spec.get("clusterIP")
            and new_spec.get("clusterIP", old_spec["clusterIP"]) != old_spec["clusterIP"]
        ):
            return [invalid("spec.clusterIPs[0]", new_spec.get("clusterIP"), "may not change once set")]
        return []

    async def begin_create(self, registry: Registry, obj: Obj) -> None:
        """Allocate node ports and the cluster IP (upstream's service REST does it before storing)."""
        _check_in_ranges(obj, registry.service_ranges)
        self._allocate(registry, obj.setdefault("spec", {}))

    async def begin_update(self, registry: Registry, new: Obj, old: Obj) -> None:
        """A type change from ExternalName gets its cluster IP, one to NodePort or LoadBalancer its node
        ports, as upstream's service REST allocates them on update (a change to ExternalName released
        them: _drop_type_dependent_fields)."""
        spec = new.get("spec")
        if isinstance(spec, dict) and spec.get("type") != (old.get("spec") or {}).get("type"):
            _check_in_ranges(new, registry.service_ranges)
            self._allocate(registry, spec)

    def _allocate(self, registry: Registry, spec: Obj) -> None:
        ranges = registry.service_ranges
        services = [c.obj.get("spec") or {} for c in registry.cache.list(self.bucket, self.prefix(""))]
        if spec.get("type") in ("NodePort", "LoadBalancer"):
            spec.setdefault("externalTrafficPolicy", "Cluster")
        used_ports = {p.get("nodePort") for s in services for p in s.get("ports") or []}
        used_ports |= {s.get("healthCheckNodePort") for s in services}
        free = (n for n in ranges.node_ports if n not in used_ports)
        if _node_ports(spec):
            for port in spec.get("ports") or []:
                if not port.get("nodePort"):
                    port["nodePort"] = next(free, None)
        if (
            spec.get("type") == "LoadBalancer"
            and spec.get("externalTrafficPolicy") == "Local"
            and not spec.get("healthCheckNodePort")
        ):
            # upstream allocates the health check node port of a Local LoadBalancer from the same range
            spec["healthCheckNodePort"] = next(free, None)
        if spec.get("type") == "ExternalName" or spec.get("clusterIP") == "None":
            if spec.get("clusterIP") == "None":
                spec["clusterIPs"] = ["None"]
            return
        if spec.get("clusterIP"):
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
            return
        used = {s.get("clusterIP") for s in services}
        for ip in ranges.ip_candidates():
            if ip not in used:
                spec["clusterIP"] = ip
                spec["clusterIPs"] = [ip]
                return
        raise errors.internal("service IP range exhausted")

    def cells(self, obj: Obj) -> list[Any]:
        spec = obj.get("spec") or {}
        kind = spec.get("type", "ClusterIP")
        external = "<none>"
        if kind == "LoadBalancer":
            ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
            ips = [i.get("ip") or i.get("hostname") for i in ingress] + (spec.get("externalIPs") or [])
            external = ",".join(ips) if ips else "<pending>"
        elif kind == "ExternalName":
            external = spec.get("externalName", "<none>")
        elif spec.get("externalIPs"):
            external = ",".join(spec["externalIPs"])
        ports = []
        for p in spec.get("ports") or []:
            text = f"{p.get('port')}:{p['nodePort']}" if p.get("nodePort") else str(p.get("port"))
            ports.append(f"{text}/{p.get('protocol', 'TCP')}")
        return [
            obj["metadata"].get("name"),
            kind,
            spec.get("clusterIP") or "<none>",
            external,
            ",".join(ports) or "<none>",
            age(obj),
            tables.format_labels(spec.get("selector")),
        ]


def _check_in_ranges(obj: Obj, ranges: ServiceRanges) -> None:
    """A clusterIP or nodePort the user names must lie in the server's ranges (upstream's allocators
    refuse the others with these texts)."""
    spec = obj.get("spec") or {}
    problems: list[FieldError] = []
    ip = spec.get("clusterIP")
    if ip and ip != "None" and spec.get("type") != "ExternalName" and not ranges.contains_ip(ip):
        problems.append(
            invalid(
                "spec.clusterIPs",
                [ip],
                f"failed to allocate IP {ip}: provided IP ({ip}) is not in the valid range. "
                f"The range of valid IPs is {ranges.cluster_ip_range}",
            )
        )
    for i, port in enumerate(spec.get("ports") or []):
        node_port = port.get("nodePort")
        if isinstance(node_port, int) and node_port and node_port not in ranges.node_ports:
            problems.append(
                invalid(
                    f"spec.ports[{i}].nodePort",
                    node_port,
                    "provided port is not in the valid range. "
                    f"The range of valid ports is {ranges.port_range_text()}",
                )
            )
    if problems:
        raise errors.invalid_object("Service", "", obj["metadata"].get("name", ""), problems)


def _drop_type_dependent_fields(current: Obj, new: Obj) -> None:
    """A type change drops the fields only the old type has, when the update left them as they were
    (upstream's dropTypeDependentFields): node ports, the health check node port,
    allocateLoadBalancerNodePorts, loadBalancerClass and externalTrafficPolicy."""
    old_spec, spec = current.get("spec") or {}, new.get("spec")
    if not isinstance(spec, dict) or spec.get("type") == old_spec.get("type"):
        return
    if spec.get("type") == "ExternalName":
        # No cluster IP any more: the allocated addresses and what goes with them go, unless the update
        # set them itself (validation then refuses them).
        for field in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "internalTrafficPolicy"):
            if field in spec and spec[field] == old_spec.get(field):
                del spec[field]
    external = spec.get("type") in ("NodePort", "LoadBalancer") or bool(spec.get("externalIPs"))
    if spec.get("type") not in ("NodePort", "LoadBalancer"):
        old_ports = [p.get("nodePort") for p in old_spec.get("ports") or []]
        if [p.get("nodePort") for p in spec.get("ports") or []] == old_ports:
            for port in spec.get("ports") or []:
                port.pop("nodePort", None)
    if spec.get("type") != "LoadBalancer":
        for field in ("healthCheckNodePort", "allocateLoadBalancerNodePorts", "loadBalancerClass"):
            if field in spec and spec[field] == old_spec.get(field):
                del spec[field]
    if not external and spec.get("externalTrafficPolicy") == old_spec.get("externalTrafficPolicy"):
        spec.pop("externalTrafficPolicy", None)


def _keep_allocations(current: Obj, new: Obj) -> None:
    """An update that leaves out the allocated cluster IP or node ports keeps them (as upstream)."""
    old_spec, spec = current.get("spec") or {}, new.get("spec")
    if not isinstance(spec, dict) or "ExternalName" in (old_spec.get("type"), spec.get("type")):
        return
    for field in ("clusterIP", "clusterIPs"):
        if not spec.get(field) and old_spec.get(field):
            spec[field] = old_spec[field]
    old_ports = {
        (p.get("port"), p.get("protocol", "TCP")): p.get("nodePort") for p in old_spec.get("ports") or []
    }
    for port in spec.get("ports") or []:
        if not port.get("nodePort") and _node_ports(spec):
            node_port = old_ports.get((port.get("port"), port.get("protocol", "TCP")))
            if node_port:
                port["nodePort"] = node_port
    if (
        old_spec.get("healthCheckNodePort")
        and not spec.get("healthCheckNodePort")
        and spec.get("type") == "LoadBalancer"
        and spec.get("externalTrafficPolicy", old_spec.get("externalTrafficPolicy")) == "Local"
    ):
        spec["healthCheckNodePort"] = old_spec["healthCheckNodePort"]


KIND = Service()
