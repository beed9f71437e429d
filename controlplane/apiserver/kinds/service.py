"""core/v1 Service: defaults, validation, and the allocations the server makes (a cluster IP from
--service-cluster-ip-range, node ports from --service-node-port-range for NodePort and LoadBalancer
services: `registry.service_ranges`) which updates keep."""

from __future__ import annotations

import ipaddress
import logging
import time
import weakref
from typing import TYPE_CHECKING, Any

from controlplane.apiserver import errors, serviceallocator, tables
from controlplane.apiserver.errors import FieldError, duplicate, forbidden, invalid, not_supported, required
from controlplane.apiserver.kinds.base import (
    REFUSE_UNSUPPORTED,
    Finish,
    Kind,
    Proxy,
    StatusSubresource,
    fields,
)
from controlplane.apiserver.meta import age
from controlplane.apiserver.serviceallocator import Full, Holder, RangeAllocator, Request, Taken
from controlplane.apiserver.validation import dns1035_label, port_number

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import Registry
    from controlplane.apiserver.serviceranges import ServiceRanges

Obj = dict[str, Any]
log = logging.getLogger(__name__)

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
    etcd_resource_prefix = "services/specs"  # upstream's SpecialDefaultResourcePrefixes
    short_names = ("svc",)
    categories = ("all",)
    subresources = (StatusSubresource("Service"), Proxy("ServiceProxyOptions"))
    schema = "V1Service"
    field_selectors = fields("spec.clusterIP", "spec.type")
    field_refusal = REFUSE_UNSUPPORTED
    return_deleted_object = True
    type_marks = {("V1ServicePort", "targetPort"): "int-or-string"}
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

    async def begin_create(self, registry: Registry, obj: Obj, dry_run: bool = False) -> Finish | None:
        """Take the cluster IP and node ports from the shared allocation records before the Service is
        stored (upstream's service REST BeginCreate); given back when the write does not happen."""
        _check_in_ranges(obj, registry.service_ranges)
        return await _allocate(registry, obj, None, dry_run)

    async def begin_update(
        self, registry: Registry, new: Obj, old: Obj, dry_run: bool = False
    ) -> Finish | None:
        """Take what the update adds (a cluster IP when leaving ExternalName, node ports for a type
        change or a port added); what it drops is given back once the update is stored."""
        if not isinstance(new.get("spec"), dict):
            return None
        _check_in_ranges(new, registry.service_ranges, old)
        return await _allocate(registry, new, old, dry_run)

    async def after_delete(self, registry: Registry, obj: Obj) -> None:
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        spec = obj.get("spec") or {}
        await _release(
            registry, uid, serviceallocator.service_ips(spec), serviceallocator.service_ports(spec)
        )

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


def _check_in_ranges(obj: Obj, ranges: ServiceRanges, old: Obj | None = None) -> None:
    """A clusterIP or nodePort the user names must lie in the server's ranges (upstream's allocators
    refuse the others with these texts); values the Service held before an update are not asked again."""
    spec = obj.get("spec") or {}
    old_spec = (old or {}).get("spec") or {}
    held_ips = serviceallocator.service_ips(old_spec) if old is not None else set()
    held_ports = serviceallocator.service_ports(old_spec) if old is not None else set()
    problems: list[FieldError] = []
    ip = spec.get("clusterIP")
    if (
        ip
        and ip != "None"
        and spec.get("type") != "ExternalName"
        and ip not in held_ips
        and not ranges.contains_ip(ip)
    ):
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
        if (
            isinstance(node_port, int)
            and node_port
            and str(node_port) not in held_ports
            and node_port not in ranges.node_ports
        ):
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


_allocators_of: weakref.WeakKeyDictionary[Any, tuple[RangeAllocator, RangeAllocator]] = (
    weakref.WeakKeyDictionary()
)


def _allocators(registry: Registry) -> tuple[RangeAllocator, RangeAllocator]:
    """The registry's two allocators, kept with it: each remembers where its next search for a free
    value starts and that its record was seen complete."""
    pair = _allocators_of.get(registry)
    if pair is not None:
        return pair
    ranges = registry.service_ranges
    ips = RangeAllocator(
        registry.store,
        serviceallocator.IPS_KEY,
        str(ranges.cluster_ip_range),
        ranges.ip_count,
        ranges.ip_at,
        serviceallocator.service_ips,
        ranges.contains_ip,
    )
    ports = RangeAllocator(
        registry.store,
        serviceallocator.PORTS_KEY,
        ranges.port_range_text(),
        len(ranges.node_ports),
        lambda index: str(ranges.node_ports[index]),
        serviceallocator.service_ports,
        lambda value: value.isdigit() and int(value) in ranges.node_ports,
    )
    _allocators_of[registry] = (ips, ports)
    return ips, ports


async def _allocate(registry: Registry, obj: Obj, old: Obj | None, dry_run: bool) -> Finish:
    """Fill in and reserve what `obj` needs beyond what `old` (None on create) held: upstream's
    allocateCreate/allocateUpdate. Returns the Finish that releases what the outcome frees."""
    spec, meta = obj["spec"], obj["metadata"]
    old_spec = (old or {}).get("spec") or {}
    uid = str(((old or obj).get("metadata") or {}).get("uid", ""))
    name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    owner = Holder(uid, name, time.time())
    if spec.get("type") in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if spec.get("clusterIP") == "None":
        spec["clusterIPs"] = ["None"]
    elif spec.get("clusterIP") and spec.get("type") != "ExternalName":
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
    old_ips = serviceallocator.service_ips(old_spec) if old is not None else set()
    old_ports = serviceallocator.service_ports(old_spec) if old is not None else set()
    ip_allocator, port_allocator = _allocators(registry)

    ip_request = Request(owner, sorted(serviceallocator.service_ips(spec) - old_ips))
    wants_ip = spec.get("type") != "ExternalName" and spec.get("clusterIP") != "None"
    if wants_ip and not spec.get("clusterIP"):
        ip_request.fresh = 1
    try:
        fresh_ips = await ip_allocator.take(ip_request, dry_run)
    except Taken as err:
        if err.owner == name and old is None:
            raise errors.already_exists("services", "", meta.get("name", "")) from None
        message = f"failed to allocate IP {err.value}: {serviceallocator.IP_TAKEN}"
        raise errors.invalid_object(
            "Service", "", meta.get("name", ""), [invalid("spec.clusterIPs", [err.value], message)]
        ) from None
    except Full:
        raise errors.internal(f"failed to allocate a serviceIP: {serviceallocator.RANGE_FULL}") from None
    if fresh_ips:
        spec["clusterIP"] = fresh_ips[0]
        spec["clusterIPs"] = [fresh_ips[0]]
    taken_ips = set(ip_request.named) | set(fresh_ips)

    try:
        taken_ports = await _allocate_ports(port_allocator, spec, owner, old_ports, dry_run, old is None)
    except BaseException:
        if not dry_run:
            await ip_allocator.release(uid, taken_ips)
        raise

    async def finish(stored: bool) -> None:
        if dry_run:
            return
        if stored:
            await _release(
                registry,
                uid,
                old_ips - serviceallocator.service_ips(spec),
                old_ports - serviceallocator.service_ports(spec),
            )
        else:
            await _release(registry, uid, taken_ips - old_ips, taken_ports - old_ports)

    return finish


async def _allocate_ports(
    allocator: RangeAllocator, spec: Obj, owner: Holder, old_ports: set[str], dry_run: bool, creating: bool
) -> set[str]:
    """Node ports: the ones named, one new port per service port number that needs one (ports that
    share a number share the node port, as upstream's initNodePorts), and the health check node port
    of a LoadBalancer with externalTrafficPolicy Local."""
    ports = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
    by_number = {
        p.get("port"): p["nodePort"] for p in ports if isinstance(p.get("nodePort"), int) and p["nodePort"]
    }
    needing = [
        p for p in ports if not p.get("nodePort") and (p.get("port") in by_number or _node_ports(spec))
    ]
    health = (
        spec.get("type") == "LoadBalancer"
        and spec.get("externalTrafficPolicy") == "Local"
        and not spec.get("healthCheckNodePort")
    )
    new_numbers = list(dict.fromkeys(p.get("port") for p in needing if p.get("port") not in by_number))
    request = Request(
        owner, sorted(serviceallocator.service_ports(spec) - old_ports), len(new_numbers) + int(health)
    )
    try:
        fresh = await allocator.take(request, dry_run)
    except Taken as err:
        index = next(
            (i for i, p in enumerate(spec.get("ports") or []) if str(p.get("nodePort")) == err.value), None
        )
        if index is None:  # the health check node port
            raise errors.internal(
                f"failed to allocate requested HealthCheck NodePort {err.value}: {serviceallocator.PORT_TAKEN}"
            ) from None
        problem = invalid(f"spec.ports[{index}].nodePort", int(err.value), serviceallocator.PORT_TAKEN)
        raise errors.invalid_object("Service", "", owner.name.split("/", 1)[1], [problem]) from None
    except Full:
        raise errors.internal(f"failed to allocate a nodePort: {serviceallocator.RANGE_FULL}") from None
    numbers = iter(fresh)
    for number in new_numbers:
        by_number[number] = int(next(numbers))
    for port in needing:
        port["nodePort"] = by_number[port.get("port")]
    if health:
        spec["healthCheckNodePort"] = int(next(numbers))
    return set(request.named) | set(fresh)


async def _release(registry: Registry, uid: str, ips: set[str], ports: set[str]) -> None:
    """Give back what a Service no longer holds; a failure here (storage away) leaves a leak the
    allocator takes over later, never a failed request whose write already happened."""
    ip_allocator, port_allocator = _allocators(registry)
    try:
        await ip_allocator.release(uid, ips)
        await port_allocator.release(uid, ports)
    except Exception as err:
        log.warning("event=service-allocation-release-failed uid=%s cause=%s", uid, err)


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
