"""Who is calling, and may they: the delegated authentication and authorization of upstream's generic
API server (k8s.io/apiserver/pkg/authentication/request/headerrequest, .../authorizer/delegating), as
metrics-server, kube-scheduler and kube-controller-manager run them on their secure ports.

Authentication: a client certificate signed by the requestheader CA whose CN is an allowed name (the
API server's front-proxy client) makes the X-Remote-User / X-Remote-Group / X-Remote-Extra-* headers
the user; a client certificate from the client CA is its CN and O; else a bearer token is asked of the
API server (TokenReview); otherwise 401. Authorization: a SubjectAccessReview for the request's
attributes, remembered 10 s (allowed or denied, upstream's delegating defaults); /healthz, /livez,
/readyz are always allowed (--authorization-always-allow-paths).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from aiohttp import web
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.tlsverify import go_compatible
from kubeclient.ttlcache import TTLCache

log = logging.getLogger("kubeclient.delegatedauth")

Obj = dict[str, Any]
ALWAYS_ALLOW = ("/healthz", "/livez", "/readyz")
CONFIGMAP = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
DECISION_TTL = 10.0
TOKEN_TTL = 10.0


@dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class RequestHeaderConfig:
    """The requestheader settings (from extension-apiserver-authentication, or flags)."""

    client_ca: str  # PEM: the front-proxy CA
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)

    @classmethod
    def from_configmap(cls, data: Mapping[str, str]) -> RequestHeaderConfig:
        def listed(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
            raw = data.get(key)
            return tuple(json.loads(raw)) if raw else default

        return cls(
            data.get("requestheader-client-ca-file", ""),
            listed("requestheader-allowed-names", ()),
            listed("requestheader-username-headers", ("X-Remote-User",)),
            listed("requestheader-group-headers", ("X-Remote-Group",)),
            listed("requestheader-extra-headers-prefix", ("X-Remote-Extra-",)),
        )


def _peer(request: web.Request) -> tuple[Obj, bytes] | None:
    """The verified client certificate (ssl's dict and its DER), if one came."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if not isinstance(ssl_object, ssl.SSLObject):
        return None
    cert = ssl_object.getpeercert()
    der = ssl_object.getpeercert(binary_form=True)
    return (cert, der) if cert and der else None


def issued_by(der: bytes, ca: x509.Certificate | None) -> bool:
    """Whether the (already TLS-verified) certificate was signed by this CA, not by another trusted one."""
    if ca is None:
        return False
    cert = x509.load_der_x509_certificate(der)
    if cert.issuer != ca.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _name_parts(rdns: Any) -> tuple[tuple[str, str], ...]:
    return tuple((attr, value) for rdn in rdns or () for attr, value in rdn)


def _cn(parts: tuple[tuple[str, str], ...]) -> str:
    return next((v for k, v in parts if k == "commonName"), "")


def from_headers(headers: Mapping[str, str], config: RequestHeaderConfig) -> User | None:
    """The user the front proxy asserts (None without a user header), as headerrequest reads it."""
    getall = getattr(headers, "getall", None)

    def values(name: str) -> list[str]:
        if getall is not None:
            return list(getall(name, []))
        value = headers.get(name)
        return [value] if value else []

    name = next((v for h in config.username_headers for v in values(h) if v), "")
    if not name:
        return None
    groups = tuple(v for h in config.group_headers for v in values(h))
    extra: dict[str, list[str]] = {}
    for header in headers:
        for prefix in config.extra_prefixes:
            if header.lower().startswith(prefix.lower()):
                key = unquote(header[len(prefix) :]).lower()
                extra.setdefault(key, []).extend(values(header))
    return User(name, groups=groups, extra=tuple((k, tuple(v)) for k, v in sorted(extra.items())))


@dataclass
class Authenticator:
    requestheader: RequestHeaderConfig
    client: KubeClient
    front_proxy_ca: x509.Certificate | None = None  # the requestheader CA, parsed
    _tokens: TTLCache[str, User | None] = field(default_factory=TTLCache)

    async def authenticate(self, request: web.Request) -> User | None:
        peer = _peer(request)
        if peer is not None:
            cert, der = peer
            subject = _name_parts(cert.get("subject"))
            if issued_by(der, self.front_proxy_ca):
                allowed = self.requestheader.allowed_names
                if allowed and _cn(subject) not in allowed:
                    return None
                return from_headers(request.headers, self.requestheader)
            cn = _cn(subject)
            if cn:
                orgs = tuple(v for k, v in subject if k == "organizationName")
                return User(cn, groups=(*orgs, "system:authenticated"))
        header = request.headers.get("Authorization", "")
        if header[:7].lower() == "bearer ":
            return await self._token(header[7:].strip())
        return None

    async def _token(self, token: str) -> User | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        hit, cached = self._tokens.get(key)
        if hit:
            return cached
        review = await self.client.create(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
        )
        status = review.get("status") or {}
        user = None
        if status.get("authenticated"):
            info = status.get("user") or {}
            extra = tuple((k, tuple(v)) for k, v in sorted((info.get("extra") or {}).items()))
            user = User(info.get("username", ""), info.get("uid", ""), tuple(info.get("groups") or ()), extra)
        self._tokens.put(key, user, TOKEN_TTL)
        return user


@dataclass(frozen=True)
class Request:
    """What authorization judges: a resource request or a path."""

    verb: str
    path: str
    resource: str = ""
    namespace: str = ""
    name: str = ""
    group: str = ""
    version: str = ""

    def attributes(self) -> Obj:
        if not self.resource:
            return {"nonResourceAttributes": {"path": self.path, "verb": self.verb}}
        attrs = {"verb": self.verb, "group": self.group, "version": self.version, "resource": self.resource}
        if self.namespace:
            attrs["namespace"] = self.namespace
        if self.name:
            attrs["name"] = self.name
        return {"resourceAttributes": attrs}

    def forbidden_message(self, user: str) -> str:
        if not self.resource:
            return f'forbidden: User "{user}" cannot {self.verb} path "{self.path}"'
        where = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        subject = f"{self.resource}.{self.group}" + (f' "{self.name}"' if self.name else "")
        return (
            f'{subject} is forbidden: User "{user}" cannot {self.verb} resource "{self.resource}" '
            f'in API group "{self.group}" {where}'
        )


@dataclass
class Authorizer:
    client: KubeClient
    _decisions: TTLCache[str, tuple[bool, str]] = field(default_factory=TTLCache)

    async def authorize(self, user: User, req: Request) -> tuple[bool, str]:
        if req.path in ALWAYS_ALLOW:
            return True, ""
        spec: Obj = {"user": user.name, "groups": list(user.groups), **req.attributes()}
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        key = json.dumps(spec, sort_keys=True)
        hit, cached = self._decisions.get(key)
        if hit and cached is not None:
            return cached
        review = await self.client.create(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        status = review.get("status") or {}
        decision = (bool(status.get("allowed")), str(status.get("reason") or ""))
        self._decisions.put(key, decision, DECISION_TTL)
        return decision


def status(code: int, reason: str, message: str, details: Obj | None = None) -> web.Response:
    """A metav1.Status response, as the generic API server writes its failures."""
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    body["reason"] = reason
    if details is not None:
        body["details"] = details
    body["code"] = code
    return web.json_response(body, status=code)


def path_request(request: web.Request) -> Request:
    """A non-resource request: the path and the verb of its HTTP method."""
    verb = {"GET": "get", "HEAD": "get"}.get(request.method, request.method.lower())
    return Request(verb, request.path)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def auth_middleware(
    authenticator: Authenticator,
    authorizer: Authorizer,
    request_of: Callable[[web.Request], Request] = path_request,
) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """Authenticate, then authorize each request; anonymous callers reach only the always-allowed paths
    (401 elsewhere), a denial is 403 with upstream's message, a failed review 500."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            user = await authenticator.authenticate(request)
        except ApiError as err:
            log.warning("event=authentication-error cause=%s", err)
            return status(500, "InternalError", "Internal error occurred: authentication failed")
        if user is None and request.path in ALWAYS_ALLOW:
            return await handler(request)  # health checks need no credentials
        if user is None:
            return status(401, "Unauthorized", "Unauthorized")
        req = request_of(request)
        try:
            allowed, reason = await authorizer.authorize(user, req)
        except ApiError as err:
            log.warning("event=authorization-error cause=%s", err)
            return status(500, "InternalError", "Internal error occurred: authorization failed")
        if not allowed:
            message = req.forbidden_message(user.name) + (f": {reason}" if reason else "")
            details = {"name": req.name, "group": req.group, "kind": req.resource} if req.resource else None
            return status(403, "Forbidden", message, details)
        return await handler(request)

    return middleware


def serving_context(cert: Path, key: Path, cas: list[str]) -> ssl.SSLContext:
    """TLS for a secure port: a client certificate is verified when sent (against `cas`), never required
    (bearer tokens need none)."""
    ctx = go_compatible(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH))
    ctx.load_cert_chain(str(cert), str(key))
    for pem in cas:
        if pem.strip():
            ctx.load_verify_locations(cadata=pem)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


async def load_requestheader(
    client: KubeClient,
    requestheader_client_ca_file: Path | None = None,
    requestheader_allowed_names: str = "",
    client_ca_file: Path | None = None,
) -> tuple[RequestHeaderConfig, str]:
    """The requestheader settings and the client CA (PEM): flags first, else the API server's
    kube-system/extension-apiserver-authentication ConfigMap, as upstream's delegating options read them."""
    data: dict[str, str] = {}
    if requestheader_client_ca_file is None or client_ca_file is None:
        try:
            data = (await client.get(CONFIGMAP)).get("data") or {}
        except ApiError as err:
            log.warning("event=no-authentication-configmap cause=%s", err.message)
    config = RequestHeaderConfig.from_configmap(data)
    if requestheader_client_ca_file is not None:
        names = tuple(n for n in requestheader_allowed_names.split(",") if n)
        front_proxy_ca = await asyncio.to_thread(requestheader_client_ca_file.read_text)
        config = RequestHeaderConfig(front_proxy_ca, names or config.allowed_names)
    client_ca = (
        await asyncio.to_thread(client_ca_file.read_text)
        if client_ca_file
        else data.get("client-ca-file", "")
    )
    return config, client_ca


@dataclass(frozen=True)
class DelegatedAuth:
    """Everything a secure port needs: who is calling, may they, and the TLS that verifies their
    certificates."""

    authenticator: Authenticator
    authorizer: Authorizer
    cas: tuple[str, ...]  # PEM: the front-proxy CA and the client CA

    def middleware(
        self, request_of: Callable[[web.Request], Request] = path_request
    ) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
        return auth_middleware(self.authenticator, self.authorizer, request_of)

    def ssl_context(self, cert: Path, key: Path) -> ssl.SSLContext:
        return serving_context(cert, key, list(self.cas))


async def delegated_auth(
    client: KubeClient,
    requestheader_client_ca_file: Path | None = None,
    requestheader_allowed_names: str = "",
    client_ca_file: Path | None = None,
) -> DelegatedAuth:
    requestheader, client_ca = await load_requestheader(
        client, requestheader_client_ca_file, requestheader_allowed_names, client_ca_file
    )
    front_proxy_ca = (
        x509.load_pem_x509_certificate(requestheader.client_ca.encode()) if requestheader.client_ca else None
    )
    return DelegatedAuth(
        Authenticator(requestheader, client, front_proxy_ca),
        Authorizer(client),
        (requestheader.client_ca, client_ca),
    )
