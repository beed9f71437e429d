"""Who is calling, and may they: the delegated authentication and authorization of upstream's generic
API server (k8s.io/apiserver/pkg/authentication/request/headerrequest, .../authorizer/delegating), as
metrics-server runs them.

Authentication: a client certificate signed by the requestheader CA whose CN is an allowed name (the
API server's front-proxy client) makes the X-Remote-User / X-Remote-Group / X-Remote-Extra-* headers
the user; a client certificate from the client CA is its CN and O; else a bearer token is asked of the
API server (TokenReview); otherwise 401. Authorization: a SubjectAccessReview for the request's
attributes, remembered 10 s (allowed or denied, upstream's delegating defaults); /healthz, /livez,
/readyz are always allowed (--authorization-always-allow-paths).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from aiohttp import web
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from kubeclient.client import KubeClient
from kubeclient.ttlcache import TTLCache

Obj = dict[str, Any]
ALWAYS_ALLOW = ("/healthz", "/livez", "/readyz")
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
        import hashlib

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
    group: str = "metrics.k8s.io"
    version: str = "v1beta1"

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
