"""An Ingress or HTTPRoute as a journey's root, through the API alone: the Services its rules send traffic
to (the journey goes on through them to their pods and EndpointSlices, where the endpoints and dataplane
boundaries judge them), and the `routes` boundary: an Ingress with no IngressClass or one that does not
exist, a backend Service or TLS Secret missing, no address in status.loadBalancer; an HTTPRoute no
Gateway controller has taken up (status.parents empty) or whose parent says Accepted or ResolvedRefs is
not True (upstream's reasons: NotAllowedByListeners, NoMatchingParent, RefNotPermitted, BackendNotFound,
...), or naming a Service that does not exist. Pure: the CLI reads the IngressClasses and Secrets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
ROUTE_KINDS = ("Ingress", "HTTPRoute")
CLASS_ANNOTATION = "kubernetes.io/ingress.class"  # the deprecated spelling controllers still honour
DEFAULT_CLASS = "ingressclass.kubernetes.io/is-default-class"
GRACE = 30.0  # seconds a new route may wait for its controller before that counts as stalled (`young`)


@dataclass
class RouteFacts:
    """What the CLI read besides the journey. None: could not be read (the note says why)."""

    classes: list[Obj] | None = None
    missing_secrets: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Problem:
    message: str
    evidence: list[str]
    next_step: str


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def backend_services(route: Obj) -> list[str]:
    """The Services (in the route's namespace) its rules and default backend name, in order."""
    spec, names = route.get("spec") or {}, []
    if route.get("kind") == "Ingress":
        backends = [spec.get("defaultBackend") or {}]
        for rule in spec.get("rules") or []:
            backends += [p.get("backend") or {} for p in ((rule or {}).get("http") or {}).get("paths") or []]
        names = [(b.get("service") or {}).get("name") for b in backends]
    elif route.get("kind") == "HTTPRoute":
        namespace = (route.get("metadata") or {}).get("namespace")
        for rule in spec.get("rules") or []:
            for ref in (rule or {}).get("backendRefs") or []:
                same = (ref.get("namespace") or namespace) == namespace
                if ref.get("kind", "Service") == "Service" and not ref.get("group") and same:
                    names.append(ref.get("name"))
    return list(dict.fromkeys(str(n) for n in names if n))


def tls_secrets(route: Obj) -> list[str]:
    if route.get("kind") != "Ingress":
        return []
    tls = (route.get("spec") or {}).get("tls") or []
    return list(dict.fromkeys(str(t.get("secretName")) for t in tls if (t or {}).get("secretName")))


def _ingress_problem(route: Obj, found: set[str], facts: RouteFacts, young: bool) -> Problem | None:
    spec, meta = route.get("spec") or {}, route.get("metadata") or {}
    wanted = spec.get("ingressClassName") or (meta.get("annotations") or {}).get(CLASS_ANNOTATION)
    if facts.classes is not None:
        names = [_name(c) for c in facts.classes]
        defaults = [
            _name(c)
            for c in facts.classes
            if ((c.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS) == "true"
        ]
        if not wanted:
            return Problem(
                "it names no IngressClass, so no controller serves it"
                + (f" (IngressClass {defaults[0]} became default after it was created)" if defaults else ""),
                [f"IngressClasses: {', '.join(names) or 'none'}; default: {', '.join(defaults) or 'none'}"],
                "set spec.ingressClassName (kubectl get ingressclass lists them)",
            )
        if wanted not in names:
            return Problem(
                f"IngressClass {wanted} does not exist",
                [f"IngressClasses: {', '.join(names) or 'none'}"],
                "set spec.ingressClassName to an existing IngressClass",
            )
    missing = [s for s in backend_services(route) if s not in found]
    if missing:
        return Problem(
            f"backend Service {', '.join(missing)} not found",
            [f"backends: {', '.join(backend_services(route))}"],
            "create the Service or correct the backend's service.name",
        )
    if facts.missing_secrets:
        return Problem(
            f"TLS Secret {', '.join(facts.missing_secrets)} not found",
            [f"spec.tls secretName: {', '.join(tls_secrets(route))}"],
            "create the kubernetes.io/tls Secret in the Ingress's namespace",
        )
    addresses = ((route.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    if not addresses and not young:
        return Problem(
            f"no address in status.loadBalancer: the controller of IngressClass {wanted} has not taken it up",
            ["status.loadBalancer.ingress is empty"],
            f"check that the ingress controller for class {wanted} runs, and its events on the Ingress",
        )
    return None


def _httproute_problem(route: Obj, found: set[str], young: bool) -> Problem | None:
    parents = (route.get("status") or {}).get("parents") or []
    refs = [
        f"{(p or {}).get('kind', 'Gateway')} {(p or {}).get('name')}"
        for p in (route.get("spec") or {}).get("parentRefs") or []
    ]
    if not parents and not young:
        return Problem(
            "no Gateway controller has taken it up (status.parents is empty)",
            [f"parentRefs: {', '.join(refs) or 'none'}"],
            "check that the parent Gateway exists, its GatewayClass's controller runs, and the listener "
            "allows routes from this namespace",
        )
    for parent in parents:
        ref = (parent or {}).get("parentRef") or {}
        where = f"parent {ref.get('kind', 'Gateway')} {ref.get('name')}"
        for cond in (parent or {}).get("conditions") or []:
            if cond.get("type") in ("Accepted", "ResolvedRefs") and cond.get("status") != "True":
                return Problem(
                    f"{where}: {cond.get('type')}={cond.get('status')} {cond.get('reason')} - "
                    f"{cond.get('message')}",
                    [f"controller {(parent or {}).get('controllerName')}"],
                    "RefNotPermitted wants a ReferenceGrant in the backend's namespace; BackendNotFound a "
                    "Service; NotAllowedByListeners a listener whose allowedRoutes admit this namespace",
                )
    missing = [s for s in backend_services(route) if s not in found]
    if missing:
        return Problem(
            f"backend Service {', '.join(missing)} not found",
            [f"backendRefs: {', '.join(backend_services(route))}"],
            "create the Service or correct the backendRef's name",
        )
    return None


def route_problem(route: Obj, services: list[Obj], facts: RouteFacts, young: bool) -> Problem | None:
    """What keeps the route from routing; `young`: created less than GRACE ago (its controller may not
    have written its status yet)."""
    found = {_name(s) for s in services}
    if route.get("kind") == "Ingress":
        return _ingress_problem(route, found, facts, young)
    return _httproute_problem(route, found, young)


def conditions(route: Obj) -> list[str]:
    """Each parent's conditions as its controller wrote them (an HTTPRoute; an Ingress has none)."""
    out = []
    for parent in (route.get("status") or {}).get("parents") or []:
        name = ((parent or {}).get("parentRef") or {}).get("name")
        listed = ", ".join(
            f"{c.get('type')}={c.get('status')} ({c.get('reason')})"
            for c in (parent or {}).get("conditions") or []
        )
        out.append(f"parent {name} ({(parent or {}).get('controllerName')}): {listed or 'no conditions'}")
    return out


def summary(route: Obj) -> str:
    """What routes: the backends and where the controller says it serves."""
    status = route.get("status") or {}
    if route.get("kind") == "Ingress":
        where = [
            a.get("ip") or a.get("hostname") for a in (status.get("loadBalancer") or {}).get("ingress") or []
        ]
        served = f"addresses {', '.join(map(str, where)) or 'none yet'}"
    else:
        parents = [((p or {}).get("parentRef") or {}).get("name") for p in status.get("parents") or []]
        served = f"accepted by {', '.join(map(str, parents)) or 'none yet'}"
    return f"backends {', '.join(backend_services(route)) or 'none'}; {served}"
