"""What nginx must serve, decided from the cached objects without I/O.

`build` takes the Ingresses of our class with the Services, EndpointSlices and Secrets they name and
returns the servers (one per host, `""` the catch-all), their locations, the upstreams (the ready pod
addresses of each Service port: no Service hop) and the certificates, plus the Ingresses left out and
why. An Ingress is taken whole or not at all: one naming a missing Service or port, a resource backend
or an unusable TLS Secret is left out (the controller puts a Warning event on it) and the others are
served as if it did not exist.

Matching follows the Ingress API: Exact matches the path alone; Prefix matches by path elements (`/foo`
serves `/foo` and `/foo/bar`, never `/foobar`; a trailing slash is ignored); ImplementationSpecific is
served as Prefix (as documented in README.md); the longest path wins and Exact beats Prefix for the same
path. Where two Ingresses claim one host and path, the older one (creationTimestamp, then namespace and
name) wins, as ingress-nginx decides. A request for a known host that no path matches goes to that
Ingress's defaultBackend; one for an unknown host to the oldest defaultBackend (else 404).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

DEFAULT_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"
LEGACY_CLASS_ANNOTATION = "kubernetes.io/ingress.class"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclass(frozen=True)
class Upstream:
    name: str  # namespace_service_port (no name holds an underscore), nginx's upstream name
    addresses: tuple[str, ...]  # ip:port of ready endpoints, sorted
    weights: tuple[int, ...] = ()  # nginx's weight per address (weighted HTTPRoute backends), () = equal


@dataclass(frozen=True)
class Location:
    path: str
    exact: bool
    upstream: str  # an Upstream's name
    implied: bool = False  # the exact match a Prefix path implies (an explicit Exact one takes its place)
    fixed: int = 0  # answer this status instead of proxying (an HTTPRoute rule without a usable backend: 500)


@dataclass(frozen=True)
class Certificate:
    name: str  # namespace_secret: the file names
    cert: bytes
    key: bytes


@dataclass(frozen=True)
class Condition:
    """One header or query parameter condition of an HTTPRoute match."""

    name: str
    regex: bool  # RegularExpression, else Exact
    value: str


@dataclass(frozen=True)
class RouteMatch:
    """One HTTPRouteMatch: a path (exact or by path elements) and what else the request must carry."""

    exact: bool
    path: str  # as `normalize` leaves it
    method: str = ""
    headers: tuple[Condition, ...] = ()
    query: tuple[Condition, ...] = ()
    path_regex: str = ""  # a RegularExpression path (the whole path must match; `path` is then "/")


@dataclass(frozen=True)
class HeaderEdit:
    """An HTTPHeaderFilter: set replaces, add appends (comma-joined), remove drops."""

    set: tuple[tuple[str, str], ...] = ()
    add: tuple[tuple[str, str], ...] = ()
    remove: tuple[str, ...] = ()


@dataclass(frozen=True)
class PathChange:
    """URLRewrite's or RequestRedirect's path: ReplaceFullPath, or ReplacePrefixMatch of `prefix`."""

    full: bool
    value: str
    prefix: str = ""  # the matched prefix ReplacePrefixMatch replaces


@dataclass(frozen=True)
class Redirect:
    scheme: str = ""
    hostname: str = ""
    port: int = 0
    path: PathChange | None = None
    status: int = 302


@dataclass(frozen=True)
class Action:
    """What a matched HTTPRoute rule does: proxy (with its filters) to `upstream`, redirect, or answer
    `fixed` (a rule without a usable backend: 500)."""

    upstream: str = ""
    fixed: int = 0
    request_headers: HeaderEdit = HeaderEdit()
    response_headers: HeaderEdit = HeaderEdit()
    redirect: Redirect | None = None
    host: str = ""  # URLRewrite hostname
    path: PathChange | None = None  # URLRewrite path
    mirrors: tuple[str, ...] = ()  # RequestMirror: upstreams each request is copied to


@dataclass(frozen=True)
class RouteEntry:
    """A match of one HTTPRoute rule on one host; `order` ranks ties (route age and name, rule, match)."""

    match: RouteMatch
    order: tuple[str, str, int, int]
    action: Action


@dataclass
class Server:
    host: str  # "" = the catch-all (default_server)
    locations: dict[tuple[bool, str], Location] = field(default_factory=dict)  # (exact, path) -> location
    certificate: str = ""  # a Certificate's name, "" = plain HTTP only
    default_upstream: str = ""  # for requests no location matches
    routes: list[RouteEntry] = field(default_factory=list)  # HTTPRoute matches (Gateway API)


@dataclass(frozen=True)
class Problem:
    ingress: str  # namespace/name
    reason: str
    message: str


@dataclass
class Config:
    servers: dict[str, Server] = field(default_factory=dict)
    tls_servers: dict[str, Server] = field(default_factory=dict)  # HTTPS only (Gateway HTTPS listeners)
    # Gateway listeners on ports of their own (not the Ingresses'): (port, TLS) -> host -> server.
    ports: dict[tuple[int, bool], dict[str, Server]] = field(default_factory=dict)
    upstreams: dict[str, Upstream] = field(default_factory=dict)
    certificates: dict[str, Certificate] = field(default_factory=dict)
    served: list[str] = field(default_factory=list)  # the Ingresses (namespace/name) taken
    problems: list[Problem] = field(default_factory=list)


# What ingress-nginx serves anyway, with an empty upstream (503) and a Warning on the Ingress.
SERVED_EMPTY = ("ServiceNotFound", "PortNotFound")


class LeftOut(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# A certificate check: (cert PEM, key PEM) -> None, or the reason the pair cannot be used.
CertCheck = Callable[[bytes, bytes], str | None]


@dataclass
class Cluster:
    """The cached objects `build` reads, keyed namespace/name."""

    services: dict[str, Obj]
    slices: dict[str, list[Obj]]  # namespace/service -> its EndpointSlices
    secrets: dict[str, Obj]
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)  # for allowedRoutes Selector


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def our_classes(classes: list[Obj], controller: str) -> tuple[set[str], bool]:
    """The names of the IngressClasses whose controller is ours, and whether one of them is the default."""
    ours = [c for c in classes if (c.get("spec") or {}).get("controller") == controller]
    names = {c["metadata"]["name"] for c in ours}
    default = any(
        (c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true" for c in ours
    )
    return names, default


def is_ours(ingress: Obj, classes: set[str]) -> bool:
    """`spec.ingressClassName`, else the legacy annotation, names one of our classes."""
    named = (ingress.get("spec") or {}).get("ingressClassName")
    if named is None:
        named = (ingress["metadata"].get("annotations") or {}).get(LEGACY_CLASS_ANNOTATION)
    return named in classes


def _ready_addresses(slices: list[Obj], port_name: str) -> tuple[str, ...]:
    """ip:port of every ready endpoint of the Service port named `port_name` (a missing `ready`
    condition counts as ready, as the API documents)."""
    found: set[str] = set()
    for slice_ in slices:
        if slice_.get("addressType") != "IPv4":
            continue
        ports = [
            p
            for p in slice_.get("ports") or []
            if (p.get("name") or "") == port_name and (p.get("protocol") or "TCP") == "TCP" and p.get("port")
        ]
        for endpoint in slice_.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            for address in endpoint.get("addresses") or []:
                found.update(f"{address}:{p['port']}" for p in ports)
    return tuple(sorted(found))


def resolve_backend(namespace: str, backend: Obj, cluster: Cluster) -> Upstream:
    """The upstream of one IngressBackend; LeftOut when it cannot be served."""
    service = backend.get("service")
    if service is None:
        raise LeftOut("UnsupportedBackend", "resource backends are not supported by this controller")
    name = service.get("name", "")
    svc = cluster.services.get(f"{namespace}/{name}")
    if svc is None:
        raise LeftOut("ServiceNotFound", f'Service "{namespace}/{name}" not found')
    spec = svc.get("spec") or {}
    if spec.get("type") == "ExternalName":
        raise LeftOut("UnsupportedBackend", f'Service "{namespace}/{name}" is of type ExternalName')
    wanted = service.get("port") or {}
    for port in spec.get("ports") or []:
        if (wanted.get("number") and port.get("port") == wanted["number"]) or (
            wanted.get("name") and port.get("name") == wanted["name"]
        ):
            port_name = port.get("name") or ""
            label = wanted.get("number") or wanted.get("name")
            addresses = _ready_addresses(cluster.slices.get(f"{namespace}/{name}", []), port_name)
            return Upstream(f"{namespace}_{name}_{label}", addresses)
    shown = wanted.get("number") or wanted.get("name")
    raise LeftOut("PortNotFound", f'Service "{namespace}/{name}" has no port {shown}')


def resolve_certificate(namespace: str, secret_name: str, cluster: Cluster, check: CertCheck) -> Certificate:
    secret = cluster.secrets.get(f"{namespace}/{secret_name}")
    if secret is None:
        raise LeftOut("SecretNotFound", f'TLS Secret "{namespace}/{secret_name}" not found')
    data = secret.get("data") or {}
    if "tls.crt" not in data or "tls.key" not in data:
        raise LeftOut(
            "InvalidCertificate", f'TLS Secret "{namespace}/{secret_name}" has no tls.crt and tls.key'
        )
    try:
        cert, key = base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"])
    except ValueError:
        raise LeftOut("InvalidCertificate", f'TLS Secret "{namespace}/{secret_name}" is not base64') from None
    why = check(cert, key)
    if why is not None:
        raise LeftOut("InvalidCertificate", f'TLS Secret "{namespace}/{secret_name}": {why}')
    return Certificate(f"{namespace}_{secret_name}", cert, key)


# What an update may change that no configuration reads: a status (the controller's own writes among
# them) and the bookkeeping of the write.
_UNREAD_METADATA = ("resourceVersion", "managedFields")


def _read_part(obj: Obj) -> Obj:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _UNREAD_METADATA}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


def changes_config(old: Obj, new: Obj) -> bool:
    """Whether an update touches anything `build` reads: a status-only write (the statuses the
    controller writes itself) wakes no sync."""
    return _read_part(old) != _read_part(new)


def normalize(path: str, path_type: str) -> tuple[bool, str]:
    """(exact, path): Exact as given; Prefix and ImplementationSpecific without a trailing slash."""
    if path_type == "Exact":
        return True, path
    trimmed = path.rstrip("/")
    return False, trimmed or "/"


@dataclass
class _Plan:
    """One Ingress resolved, before it is merged."""

    key: str
    upstreams: dict[str, Upstream]
    paths: list[tuple[str, tuple[bool, str], str]]  # (host, (exact, path), upstream)
    default: str  # the defaultBackend's upstream, ""
    hosts: list[str]
    tls: dict[str, Certificate]  # host -> certificate
    warnings: list[Problem] = field(default_factory=list)  # served anyway, reported with a Warning


def plan(ingress: Obj, cluster: Cluster, check: CertCheck) -> _Plan:
    namespace = ingress["metadata"].get("namespace", "")
    spec = ingress.get("spec") or {}
    upstreams: dict[str, Upstream] = {}

    warnings: list[Problem] = []

    def upstream(backend: Obj) -> str:
        try:
            resolved = resolve_backend(namespace, backend, cluster)
        except LeftOut as err:
            if err.reason not in SERVED_EMPTY:
                raise
            # As ingress-nginx: the path is served, by an upstream without endpoints (503), and the
            # Ingress gets a Warning; a Service created later fills it.
            warnings.append(Problem(_key(ingress), err.reason, str(err)))
            service = backend.get("service") or {}
            wanted = service.get("port") or {}
            label = wanted.get("number") or wanted.get("name")
            resolved = Upstream(f"{namespace}_{service.get('name', '')}_{label}", ())
        upstreams[resolved.name] = resolved
        return resolved.name

    default = upstream(spec["defaultBackend"]) if spec.get("defaultBackend") else ""
    paths: list[tuple[str, tuple[bool, str], str]] = []
    hosts: list[str] = []
    for rule in spec.get("rules") or []:
        host = rule.get("host") or ""
        hosts.append(host)
        for item in (rule.get("http") or {}).get("paths") or []:
            where = normalize(item.get("path") or "/", item.get("pathType") or "Prefix")
            paths.append((host, where, upstream(item.get("backend") or {})))
    tls: dict[str, Certificate] = {}
    for entry in spec.get("tls") or []:
        if not entry.get("secretName"):
            continue
        try:
            certificate = resolve_certificate(namespace, entry["secretName"], cluster, check)
        except LeftOut as err:
            # As ingress-nginx: the hosts are still served, over HTTPS with the default certificate.
            warnings.append(Problem(_key(ingress), err.reason, str(err)))
            continue
        for host in entry.get("hosts") or []:
            tls.setdefault(host, certificate)
    return _Plan(_key(ingress), upstreams, paths, default, hosts, tls, warnings)


def _age_order(ingress: Obj) -> tuple[str, str]:
    return (ingress["metadata"].get("creationTimestamp") or "", _key(ingress))


def build(
    ingresses: list[Obj], cluster: Cluster, check: CertCheck, excluded: frozenset[str] = frozenset()
) -> Config:
    """The configuration for `ingresses` (all of our class); `excluded` are left out (nginx refused them)."""
    config = Config()
    for ingress in sorted(ingresses, key=_age_order):
        key = _key(ingress)
        if key in excluded:
            continue
        try:
            resolved = plan(ingress, cluster, check)
        except LeftOut as err:
            config.problems.append(Problem(key, err.reason, str(err)))
            continue
        config.problems.extend(resolved.warnings)
        merge(config, resolved)
    return config


def merge(config: Config, resolved: _Plan) -> None:
    config.served.append(resolved.key)
    config.upstreams.update(resolved.upstreams)
    for host in resolved.hosts or [""]:
        server = config.servers.setdefault(host, Server(host))
        if resolved.default and not server.default_upstream:
            server.default_upstream = resolved.default
    for host, where, upstream in resolved.paths:
        server = config.servers.setdefault(host, Server(host))
        taken = server.locations.get(where)
        if taken is None or taken.implied:
            server.locations[where] = Location(where[1], where[0], upstream)
        if not where[0] and where[1] != "/" and (True, where[1]) not in server.locations:
            # Prefix /foo also serves /foo itself, unless an Exact /foo claims it.
            server.locations[(True, where[1])] = Location(where[1], True, upstream, implied=True)
    if resolved.default:
        catch_all = config.servers.setdefault("", Server(""))
        catch_all.default_upstream = catch_all.default_upstream or resolved.default
    for host, certificate in resolved.tls.items():
        server = config.servers.setdefault(host, Server(host))
        if not server.certificate:
            server.certificate = certificate.name
            config.certificates[certificate.name] = certificate
