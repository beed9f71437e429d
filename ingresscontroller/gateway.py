"""Gateway API v1 (GatewayClass, Gateway, HTTPRoute), decided from the cached objects without I/O: the
locations the HTTPRoutes attached to our Gateways add to nginx's configuration, and the status each
object should carry (conditions with upstream's reasons), for the controller to write.

Served: GatewayClasses whose `controllerName` is ours (Accepted); their Gateways' HTTP and HTTPS
(Terminate) listeners (each on the port it names, as `listenerports` places it: a port that cannot be
served is PortUnavailable, one Gateway's protocols clashing on a port ProtocolConflict, listeners with the
same port, protocol and hostname HostnameConflict (the older Gateway's kept); `hostname`; an HTTPS
listener's certificateRefs all resolved, each host given the first certificate whose names cover it;
`allowedRoutes.namespaces.from` Same, All or Selector; `allowedRoutes.kinds` HTTPRoute, any other kind
InvalidRouteKinds; other protocols are refused with UnsupportedProtocol); HTTPRoutes attached to them by
`parentRefs` (optionally a `sectionName`), their `hostnames` intersected with the listener's, rules
read by `routematch` (path, header, query parameter and method matches in the API's precedence; header
modifiers, redirects, URL rewrites, request mirrors) whose backendRefs are Services, weighted (nginx's
per-address weights: each backend's share of the rule is its weight, whatever its number of
endpoints). A rule `routematch.unsupported` refuses makes the route Accepted False (UnsupportedValue). A
backendRef or mirror to another namespace without a ReferenceGrant is refused with RefNotPermitted, a
missing Service with BackendNotFound; a rule left with no usable backend answers 500, as the API asks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ingresscontroller import model, referencegrant, routematch
from ingresscontroller.listenerports import Placement, Ports, place
from ingresscontroller.tlscerts import check_pair, names
from kubeclient.selectors import SelectorError, from_label_selector

Obj = dict[str, Any]
GROUP = "gateway.networking.k8s.io"
VERSION = "v1"


@dataclass
class Statuses:
    """The status to write, by (plural, namespace/name or name)."""

    classes: dict[str, Obj] = field(default_factory=dict)
    gateways: dict[str, Obj] = field(default_factory=dict)
    routes: dict[str, Obj] = field(default_factory=dict)


def condition(kind: str, ok: bool, reason: str, message: str, generation: int) -> Obj:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


def _gen(obj: Obj) -> int:
    return int(obj["metadata"].get("generation") or 0)


def _key(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


@dataclass
class _Listener:
    gateway: Obj
    spec: Obj
    ok: bool  # a protocol we serve (HTTP, HTTPS)
    refs: tuple[str, str] = ("ResolvedRefs", "")  # the ResolvedRefs reason and message
    certificates: tuple[model.Certificate, ...] = ()  # an HTTPS listener's, resolved, in its order
    kinds: tuple[Obj, ...] = ({"group": GROUP, "kind": "HTTPRoute"},)  # supportedKinds
    attached: int = 0
    placement: Placement = Placement(0, False)  # its port, or why it cannot be served there

    @property
    def tls(self) -> bool:
        return self.spec.get("protocol") == "HTTPS"

    @property
    def serving(self) -> bool:
        return self.ok and self.refs[0] == "ResolvedRefs" and self.placement.ok


@dataclass(frozen=True)
class _Refs:
    """What resolving references needs: the cache's objects, the ReferenceGrants, the pair check."""

    cluster: model.Cluster
    grants: list[Obj]
    check: model.CertCheck


def _host_matches(pattern: str, host: str) -> bool:
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and host.count(".") >= pattern.count(".")
    return pattern == host


def _hostnames(listener: Obj, route: Obj) -> list[str] | None:
    """The hostnames a route serves through a listener; None when they do not intersect."""
    mine = listener.get("hostname") or ""
    wanted = route["spec"].get("hostnames") or []
    if not wanted:
        return [mine]
    if not mine:
        return list(wanted)
    kept = [h for h in wanted if _host_matches(mine, h)] + [mine for h in wanted if _host_matches(h, mine)]
    return sorted(set(kept)) or None


def _resolve_ref(
    route: Obj, ref: Obj, cluster: model.Cluster, grants: list[Obj]
) -> tuple[model.Upstream | None, tuple[str, str]]:
    """A backendRef's Service port as an upstream, else None and the ResolvedRefs (reason, message)."""
    namespace = route["metadata"]["namespace"]
    if (ref.get("group") or "") != "" or (ref.get("kind") or "Service") != "Service":
        return None, ("InvalidKind", f"backendRef {ref.get('name')}: only Services are supported")
    target = ref.get("namespace") or namespace
    if not referencegrant.permitted(
        grants, ("HTTPRoute", namespace), ("", "Service", target, ref.get("name") or "")
    ):
        return None, (
            "RefNotPermitted",
            f"backendRef {target}/{ref.get('name')}: no ReferenceGrant in {target} allows it",
        )
    try:
        backend = {"service": {"name": ref.get("name", ""), "port": {"number": ref.get("port") or 0}}}
        return model.resolve_backend(target, backend, cluster), ("", "")
    except model.LeftOut as err:
        return None, ("BackendNotFound", str(err))


def _mirrors(
    route: Obj, rule: Obj, cluster: model.Cluster, grants: list[Obj]
) -> tuple[tuple[model.Upstream, ...], tuple[str, str]]:
    """The upstreams a rule's RequestMirror filters copy requests to (those with ready endpoints), and a
    ResolvedRefs problem (reason, message) of one that does not resolve."""
    found: list[model.Upstream] = []
    problem = ("", "")
    for item in rule.get("filters") or []:
        if item.get("type") != "RequestMirror":
            continue
        upstream, why = _resolve_ref(
            route, (item.get("requestMirror") or {}).get("backendRef") or {}, cluster, grants
        )
        if upstream is None:
            problem = why
        elif upstream.addresses:
            found.append(upstream)
    return tuple(found), problem


def _backends(
    route: Obj, index: int, rule: Obj, cluster: model.Cluster, grants: list[Obj] | None = None
) -> tuple[model.Upstream | None, str, str]:
    """The rule's weighted upstream (None: no usable backend), and a ResolvedRefs problem (reason, message)."""
    namespace = route["metadata"]["namespace"]
    chosen: list[tuple[model.Upstream, int]] = []
    problem = ("", "")
    for ref in rule.get("backendRefs") or []:
        upstream, why = _resolve_ref(route, ref, cluster, grants or [])
        if upstream is None:
            problem = why
            continue
        weight = int(ref.get("weight", 1))
        if weight > 0 and upstream.addresses:
            chosen.append((upstream, weight))
    if not chosen:
        return None, *problem
    if len(chosen) == 1:
        # One Service: its own upstream (`namespace_service_port`), shared by every rule, route and
        # Ingress sending there, so its idle connections serve them all and nginx parses one upstream
        # block for them, not one per rule (1 000 single-backend routes were 1 000 upstreams, each with
        # its own pool of idle connections allocated on every reload).
        return chosen[0][0], *problem
    common = math.lcm(*(len(u.addresses) for u, _ in chosen))
    addresses: list[str] = []
    weights: list[int] = []
    for upstream, weight in chosen:
        for address in upstream.addresses:
            addresses.append(address)
            weights.append(weight * common // len(upstream.addresses))
    divisor = math.gcd(*weights)
    name = f"route_{namespace}_{route['metadata']['name']}_{index}"
    return model.Upstream(name, tuple(addresses), tuple(w // divisor for w in weights)), *problem


def _certificates(gateway: Obj, spec: Obj, refs: _Refs) -> tuple[tuple[model.Certificate, ...], str, str]:
    """An HTTPS listener's certificates (every certificateRef, each usable), or the ResolvedRefs (reason,
    message) of the first that is not."""
    tls = spec.get("tls") or {}
    if (tls.get("mode") or "Terminate") != "Terminate":
        return (), "InvalidCertificateRef", f"TLS mode {tls.get('mode')} is not supported on HTTPS"
    certificate_refs = tls.get("certificateRefs") or []
    if not certificate_refs:
        return (), "InvalidCertificateRef", "an HTTPS listener needs a certificateRef"
    namespace = gateway["metadata"]["namespace"]
    found = []
    for ref in certificate_refs:
        target, name = ref.get("namespace") or namespace, ref.get("name") or ""
        if (ref.get("group") or "") != "" or (ref.get("kind") or "Secret") != "Secret":
            return (), "InvalidCertificateRef", f"certificateRef {name}: only core Secrets are supported"
        if not referencegrant.permitted(refs.grants, ("Gateway", namespace), ("", "Secret", target, name)):
            return (
                (),
                "RefNotPermitted",
                f"certificateRef {target}/{name}: no ReferenceGrant in {target} allows it",
            )
        try:
            found.append(model.resolve_certificate(target, name, refs.cluster, refs.check))
        except model.LeftOut as err:
            return (), "InvalidCertificateRef", str(err)
    return tuple(found), "ResolvedRefs", ""


def _route_kinds(spec: Obj) -> tuple[tuple[Obj, ...], str]:
    """The listener's supportedKinds (those of `allowedRoutes.kinds` we serve: HTTPRoute) and the
    InvalidRouteKinds message when it names others."""
    wanted = (spec.get("allowedRoutes") or {}).get("kinds")
    if wanted is None:
        return ({"group": GROUP, "kind": "HTTPRoute"},), ""
    valid = [k for k in wanted if (k.get("group") or GROUP) == GROUP and k.get("kind") == "HTTPRoute"]
    kinds = ({"group": GROUP, "kind": "HTTPRoute"},) if valid else ()
    invalid = [k.get("kind") for k in wanted if k not in valid]
    return kinds, (f"route kinds {', '.join(map(str, invalid))} are not supported" if invalid else "")


def _listener(gateway: Obj, spec: Obj, refs: _Refs, placement: Placement) -> _Listener:
    protocol = spec.get("protocol")
    kinds, bad_kinds = _route_kinds(spec)
    if protocol == "HTTPS":
        certificates, reason, message = _certificates(gateway, spec, refs)
        listener = _Listener(gateway, spec, True, (reason, message), certificates, kinds)
    else:
        listener = _Listener(gateway, spec, protocol == "HTTP", kinds=kinds)
    if bad_kinds and listener.refs[0] == "ResolvedRefs":
        listener.refs = ("InvalidRouteKinds", bad_kinds)
    listener.placement = placement
    return listener


def _listeners(gateways: list[Obj], ours: set[str], refs: _Refs, ports: Ports) -> dict[str, list[_Listener]]:
    mine = [g for g in gateways if g["spec"].get("gatewayClassName") in ours]
    placements = place(mine, ports)
    found: dict[str, list[_Listener]] = {}
    for gateway in mine:
        meta = gateway["metadata"]
        found[_key(gateway)] = [
            _listener(
                gateway, spec, refs, placements[(meta["namespace"], meta["name"], spec.get("name") or "")]
            )
            for spec in gateway["spec"].get("listeners") or []
        ]
    return found


def _allowed(listener: Obj, gateway: Obj, route: Obj, cluster: model.Cluster) -> bool:
    """Whether the listener's `allowedRoutes.namespaces` admits the route's namespace (Same by default;
    All; Selector: a label selector on the route's Namespace, one that does not parse admitting none)."""
    namespaces = (listener.get("allowedRoutes") or {}).get("namespaces") or {}
    where = namespaces.get("from", "Same")
    namespace = route["metadata"]["namespace"]
    if where == "Selector":
        try:
            selector = from_label_selector(namespaces.get("selector"))
        except SelectorError:
            return False
        return namespace in cluster.namespace_labels and selector.matches(cluster.namespace_labels[namespace])
    return where == "All" or (where == "Same" and gateway["metadata"]["namespace"] == namespace)


def _attach(
    route: Obj, ref: Obj, listeners: dict[str, list[_Listener]], cluster: model.Cluster
) -> tuple[list[tuple[_Listener, list[str]]], str, str]:
    """The listeners a parentRef attaches the route to, with its hostnames there; else (reason, message)."""
    namespace = ref.get("namespace") or route["metadata"]["namespace"]
    candidates = listeners.get(f"{namespace}/{ref.get('name')}")
    if candidates is None:
        return [], "NoMatchingParent", f"no Gateway {namespace}/{ref.get('name')} of this controller"
    section = ref.get("sectionName")
    candidates = [c for c in candidates if c.serving and (not section or c.spec.get("name") == section)]
    allowed = [c for c in candidates if _allowed(c.spec, c.gateway, route, cluster)]
    if not allowed:
        return [], "NotAllowedByListeners", "no listener of the Gateway admits this route"
    matched = [(c, hosts) for c in allowed if (hosts := _hostnames(c.spec, route)) is not None]
    if not matched:
        return [], "NoMatchingListenerHostname", "no listener hostname matches the route's hostnames"
    return matched, "Accepted", "Route is accepted"


def _route_status(
    route: Obj,
    config: model.Config,
    refs: _Refs,
    listeners: dict[str, list[_Listener]],
    controller: str,
) -> list[Obj]:
    parents = []
    unsupported = next(
        (why for rule in route["spec"].get("rules") or [] if (why := routematch.unsupported(rule))), ""
    )
    resolved = ("ResolvedRefs", "all references are resolved")
    upstreams: list[model.Upstream | None] = []
    mirrors: list[tuple[model.Upstream, ...]] = []
    for index, rule in enumerate(route["spec"].get("rules") or []):
        upstream, reason, message = _backends(route, index, rule, refs.cluster, refs.grants)
        upstreams.append(upstream)
        copies, problem = _mirrors(route, rule, refs.cluster, refs.grants)
        mirrors.append(copies)
        for why in ((reason, message), problem):
            if why[0]:
                resolved = why
    for ref in route["spec"].get("parentRefs") or []:
        namespace = ref.get("namespace") or route["metadata"]["namespace"]
        if (ref.get("kind") or "Gateway") != "Gateway" or f"{namespace}/{ref.get('name')}" not in listeners:
            continue  # another implementation's parent: its status entry is not ours to write
        attached, reason, message = _attach(route, ref, listeners, refs.cluster)
        if attached and unsupported:
            attached, reason, message = [], "UnsupportedValue", unsupported
        for listener, hosts in attached:
            listener.attached += 1
            for host in hosts:
                _merge(config, route, listener, host, upstreams, mirrors)
        gen = _gen(route)
        parents.append(
            {
                "parentRef": {"group": GROUP, "kind": "Gateway", **ref},
                "controllerName": controller,
                "conditions": [
                    condition("Accepted", bool(attached), reason, message, gen),
                    condition("ResolvedRefs", resolved[0] == "ResolvedRefs", *resolved, gen),
                ],
            }
        )
    return parents


def _merge(
    config: model.Config,
    route: Obj,
    listener: _Listener,
    host: str,
    upstreams: list[model.Upstream | None],
    mirrors: list[tuple[model.Upstream, ...]],
) -> None:
    """The route's matches on `host` through `listener`, on the listener's port (an HTTPS listener's
    with its certificate)."""
    servers = _servers(config, listener.placement)
    server = servers.setdefault(host, model.Server(host))
    certificate = _certificate_for(host, listener.certificates)
    if certificate is not None and not server.certificate:
        server.certificate = certificate.name
        config.certificates[certificate.name] = certificate
    age = route["metadata"].get("creationTimestamp") or ""
    for index, rule in enumerate(route["spec"].get("rules") or []):
        upstream = upstreams[index]
        for used in (upstream, *mirrors[index]):
            if used is not None:
                config.upstreams[used.name] = used
        copies = tuple(m.name for m in mirrors[index])
        for number, match in enumerate(routematch.matches(rule)):
            action = routematch.action(rule, match, upstream.name if upstream else "", copies)
            server.routes.append(model.RouteEntry(match, (age, _key(route), index, number), action))


def _servers(config: model.Config, placement: Placement) -> dict[str, model.Server]:
    """The servers of a listener's port: the Ingresses' on the controller's ports, else the port's own."""
    if placement.slot == "http":
        return config.servers
    if placement.slot == "https":
        return config.tls_servers
    return config.ports.setdefault((placement.port, placement.tls), {})


def _host_matches_name(name: str, host: str) -> bool:
    """Whether a certificate's DNS name covers `host` (a `*.` name one label, as TLS matches it)."""
    if name.startswith("*."):
        return host.endswith(name[1:]) and host.count(".") == name.count(".")
    return name == host


def _certificate_for(host: str, certificates: tuple[model.Certificate, ...]) -> model.Certificate | None:
    """Of a listener's certificates, the first whose names cover `host` (a wildcard host by the same
    wildcard), else the first: SNI then gets the certificate made for the name asked."""
    for certificate in certificates:
        if any(n == host or _host_matches_name(n, host) for n in names(certificate.cert)):
            return certificate
    return certificates[0] if certificates else None


def build(
    config: model.Config,
    classes: list[Obj],
    gateways: list[Obj],
    routes: list[Obj],
    cluster: model.Cluster,
    controller: str,
    address: str,
    grants: list[Obj] | None = None,
    check: model.CertCheck = check_pair,
    ports: Ports | None = None,
) -> Statuses:
    """Add the routes of our Gateways to `config`; the statuses to write. `grants` are the
    ReferenceGrants, `check` the test of a certificate pair, `ports` the controller's Ingress ports and
    those no listener can have."""
    statuses = Statuses()
    ours = {
        c["metadata"]["name"] for c in classes if (c.get("spec") or {}).get("controllerName") == controller
    }
    for cls in classes:
        if cls["metadata"]["name"] in ours:
            statuses.classes[_key(cls)] = {
                "conditions": [condition("Accepted", True, "Accepted", "GatewayClass is accepted", _gen(cls))]
            }
    refs = _Refs(cluster, grants or [], check)
    listeners = _listeners(gateways, ours, refs, ports or Ports())
    for items in listeners.values():  # a listener's port is listened on, with or without routes
        for item in items:
            if item.serving and item.placement.slot == "own":
                config.ports.setdefault((item.placement.port, item.placement.tls), {})
    for route in sorted(routes, key=lambda r: (r["metadata"].get("creationTimestamp") or "", _key(r))):
        parents = _route_status(route, config, refs, listeners, controller)
        if parents:
            statuses.routes[_key(route)] = {"parents": parents}
    for key, items in listeners.items():
        gateway = items[0].gateway if items else None
        if gateway is None:
            continue
        gen = _gen(gateway)
        statuses.gateways[key] = {
            "addresses": [{"type": "IPAddress", "value": address}],
            "conditions": [_accepted(items, gen), _programmed(items, gen)],
            "listeners": [_listener_status(i, gen) for i in items],
        }
    return statuses


def _accepted(items: list[_Listener], gen: int) -> Obj:
    """Accepted, with ListenersNotValid naming the listeners not served (conflicted ones among them, as
    the API asks) and those that are."""
    invalid = [str(i.spec.get("name")) for i in items if not i.serving]
    if not invalid:
        return condition("Accepted", True, "Accepted", "Gateway is accepted", gen)
    conflicted = [str(i.spec.get("name")) for i in items if i.placement.conflict]
    valid = [str(i.spec.get("name")) for i in items if i.serving]
    message = "; ".join(
        part
        for part in (
            f"listeners not valid: {', '.join(invalid)}",
            f"conflicted: {', '.join(conflicted)}" if conflicted else "",
            f"accepted: {', '.join(valid)}" if valid else "",
        )
        if part
    )
    return condition("Accepted", True, "ListenersNotValid", message, gen)


def _programmed(items: list[_Listener], gen: int) -> Obj:
    if any(i.serving for i in items):
        return condition("Programmed", True, "Programmed", "Gateway is programmed", gen)
    return condition("Programmed", False, "Invalid", "no listener of the Gateway can be served", gen)


def _listener_status(listener: _Listener, gen: int) -> Obj:
    placement = listener.placement
    if placement.conflict:  # not distinct: Conflicted True, neither accepted nor programmed, no route
        return {
            "name": listener.spec.get("name"),
            "supportedKinds": list(listener.kinds) if listener.ok else [],
            "attachedRoutes": 0,
            "conditions": [
                condition("Accepted", False, placement.reason, placement.message, gen),
                condition("Programmed", False, "Invalid", placement.message, gen),
                condition("ResolvedRefs", listener.refs[0] == "ResolvedRefs", *listener.refs, gen),
                condition("Conflicted", True, placement.conflict, placement.message, gen),
            ],
        }
    if not listener.ok:
        reason, message = "UnsupportedProtocol", f"protocol {listener.spec.get('protocol')} is not supported"
        return {
            "name": listener.spec.get("name"),
            "supportedKinds": [],
            "attachedRoutes": 0,
            "conditions": [
                condition("Accepted", False, reason, message, gen),
                condition("Programmed", False, "Invalid", message, gen),
                condition("ResolvedRefs", True, "ResolvedRefs", "", gen),
                condition("Conflicted", False, "NoConflicts", "", gen),
            ],
        }
    reason, message = listener.refs
    if listener.serving:
        programmed = condition("Programmed", True, "Programmed", "Listener is programmed", gen)
    else:
        programmed = condition("Programmed", False, "Invalid", placement.message or message, gen)
    if placement.ok:
        accepted = condition("Accepted", True, "Accepted", "Listener is accepted", gen)
    else:
        accepted = condition("Accepted", False, placement.reason, placement.message, gen)
    return {
        "name": listener.spec.get("name"),
        "supportedKinds": list(listener.kinds),
        "attachedRoutes": listener.attached,
        "conditions": [
            accepted,
            programmed,
            condition("ResolvedRefs", reason == "ResolvedRefs", reason, message, gen),
            condition("Conflicted", False, "NoConflicts", "", gen),
        ],
    }


def with_transition_times(new: list[Obj], old: list[Obj], now: str) -> list[Obj]:
    """Conditions keep their lastTransitionTime while their status stays (metav1.Condition's rule)."""
    before = {c.get("type"): c for c in old or []}
    out = []
    for cond in new:
        prior = before.get(cond["type"])
        keep = prior is not None and prior.get("status") == cond["status"] and prior.get("lastTransitionTime")
        out.append({**cond, "lastTransitionTime": prior["lastTransitionTime"] if keep else now})
    return out
