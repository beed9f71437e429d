"""Who may call the kubelet API, decided as upstream's kubelet decides it (pkg/kubelet/server/auth.go,
the delegating authenticator and the Webhook authorizer of k8s.io/apiserver).

Authentication, first that answers wins: a client certificate signed by authentication.x509.clientCAFile
(the TLS layer verifies it; CN is the user, O the groups); a bearer token, asked of the API server with
a TokenReview (authentication.webhook.enabled) and remembered for authentication.webhook.cacheTTL
(2 min) under its SHA-256, never the token; else anonymous when authentication.anonymous.enabled, and a
401 otherwise. Every authenticated user is in system:authenticated.

Authorization (authorization.mode): AlwaysAllow, or Webhook: a SubjectAccessReview for the request as a
node resource (verb from the HTTP method; resource nodes, name this node, subresource stats, metrics,
log or proxy by path), its answer remembered for cacheAuthorizedTTL (5 min) when allowed and
cacheUnauthorizedTTL (30 s) when not, as upstream.
"""

from __future__ import annotations

import hashlib
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from agent.kube.tokens import ReviewedUser
from kubeclient.delegatedauth import User
from kubeclient.errors import ApiError
from kubeclient.serving import peer_subject
from kubeclient.ttlcache import TTLCache

log = logging.getLogger("agent.server.auth")

TokenReviewer = Callable[[str], Awaitable[ReviewedUser | None]]
AccessReviewer = Callable[[dict[str, Any]], Awaitable[tuple[bool, bool, str]]]

ANONYMOUS = "system:anonymous"
_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
# Paths with their own subresource; everything else is nodes/proxy.
_SUBRESOURCES = (("/stats", "stats"), ("/metrics", "metrics"), ("/logs", "log"))


@dataclass(frozen=True)
class Attributes:
    """A kubelet API request as a resource request on this node."""

    user: User
    verb: str
    subresource: str
    node: str
    path: str

    def review_spec(self) -> dict[str, Any]:
        """The SubjectAccessReview spec upstream's Webhook authorizer sends for it."""
        spec: dict[str, Any] = {
            "resourceAttributes": {
                "verb": self.verb,
                "version": "v1",
                "resource": "nodes",
                "subresource": self.subresource,
                "name": self.node,
            },
            "user": self.user.name,
            "groups": list(self.user.groups),
        }
        if self.user.uid:
            spec["uid"] = self.user.uid
        if self.user.extra:
            spec["extra"] = {k: list(v) for k, v in self.user.extra}
        return spec


def _is_subpath(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def request_attributes(user: User, method: str, path: str, node: str) -> Attributes:
    """Upstream's nodeAuthorizerAttributesGetter."""
    subresource = next((sub for prefix, sub in _SUBRESOURCES if _is_subpath(path, prefix)), "proxy")
    return Attributes(user, _VERBS.get(method, ""), subresource, node, path)


def certificate_user(request: web.Request) -> User | None:
    """The verified client certificate's subject (CN user, O groups), if one came with the request."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if not isinstance(ssl_object, ssl.SSLObject):
        return None
    subject = peer_subject(ssl_object)
    return None if subject is None else User(subject[0], groups=subject[1])


def _with_authenticated(user: User) -> User:
    if "system:authenticated" in user.groups:
        return user
    return User(user.name, user.uid, (*user.groups, "system:authenticated"), user.extra)


@dataclass
class KubeletAuth:
    node: str
    x509: bool = True
    anonymous: bool = False
    review_token: TokenReviewer | None = None  # None: authentication.webhook.enabled is false
    token_ttl: float = 120.0
    review_access: AccessReviewer | None = None  # None: authorization mode AlwaysAllow
    authorized_ttl: float = 300.0
    unauthorized_ttl: float = 30.0
    clock: Callable[[], float] = time.monotonic
    _tokens: TTLCache[str, User | None] = field(init=False)
    _decisions: TTLCache[str, bool] = field(init=False)

    def __post_init__(self) -> None:
        self._tokens = TTLCache(self.clock)
        self._decisions = TTLCache(self.clock)

    async def authenticate(self, request: web.Request) -> User | None:
        if self.x509:
            user = certificate_user(request)
            if user is not None:
                return _with_authenticated(user)
        header = request.headers.get("Authorization", "")
        if header[:7].lower() == "bearer " and self.review_token is not None:
            return await self._token_user(header[7:].strip())
        if self.anonymous:
            return User(ANONYMOUS, groups=("system:unauthenticated",))
        return None

    async def _token_user(self, token: str) -> User | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        known, user = self._tokens.get(key)
        if known:
            return user
        assert self.review_token is not None
        try:
            reviewed = await self.review_token(token)
        except ApiError as err:
            log.warning("token review failed status=%d reason=%s", err.status, err.reason)
            return None  # not remembered: the next request asks again
        user = (
            None
            if reviewed is None
            else _with_authenticated(User(reviewed.name, reviewed.uid, reviewed.groups, reviewed.extra))
        )
        self._tokens.put(key, user, self.token_ttl)
        return user

    async def authorize(self, attrs: Attributes) -> bool:
        """Allowed or not; raises ApiError when the API server could not answer."""
        if self.review_access is None:
            return True
        spec = attrs.review_spec()
        key = json.dumps(spec, sort_keys=True)
        known, allowed = self._decisions.get(key)
        if known:
            return bool(allowed)
        allowed, _denied, _reason = await self.review_access(spec)
        self._decisions.put(key, allowed, self.authorized_ttl if allowed else self.unauthorized_ttl)
        return allowed


__all__ = ["Attributes", "KubeletAuth", "TTLCache", "User", "certificate_user", "request_attributes"]
