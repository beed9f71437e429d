"""Authentication: client certificates (CN = user, O = groups), a static bearer token file and bound
service-account tokens (JWTs this server signed, satokens.py).

The TLS layer verifies client certificates against the cluster CA (optional at the handshake, so token
users can connect); this module only reads the verified subject. Tokens are compared, never logged: a
refused token is logged with the reason alone, and the client gets a bare 401, as upstream answers.
"""

from __future__ import annotations

import csv
import hmac
import logging
import ssl
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from controlplane.apiserver.bootstraptoken import (
    BootstrapTokenAuthenticator,
    BootstrapTokenRejected,
    NotBootstrapToken,
)
from controlplane.apiserver.jwtauthn import JwtAuthenticator, JwtRejected
from controlplane.apiserver.satokens import NotOurs, TokenRejected, TokenValidator, groups, peek_jwt
from controlplane.apiserver.tokencache import SUCCESS_TTL, TokenCache
from controlplane.apiserver.userinfo import UserInfo
from kubeclient.serving import peer_subject

if TYPE_CHECKING:
    from controlplane.apiserver.requestheader import RequestHeaderAuthenticator
    from controlplane.apiserver.tokenwebhook import TokenWebhook

log = logging.getLogger("controlplane.apiserver.authn")


@dataclass(frozen=True)
class TokenResult:
    """What a bearer token authenticates as (None: it does not), the audiences it was good for, and
    why not (for the server log and TokenReview; never the token itself)."""

    user: UserInfo | None
    audiences: tuple[str, ...] = ()
    error: str = ""
    # A bound service-account token's check of its objects, asked again on each cache hit ("" = valid).
    recheck: Callable[[], str] | None = None
    # No authenticator of ours took the token (the webhook authenticator may still).
    unclaimed: bool = False


ANONYMOUS = UserInfo("system:anonymous", groups=("system:unauthenticated",))

# Where the authenticated user travels with the request (typed key; plain string on older aiohttp).
USER_KEY: Any = web.RequestKey("user", UserInfo) if hasattr(web, "RequestKey") else "user"


def load_token_file(path: Path) -> dict[str, UserInfo]:
    """Upstream's --token-auth-file format: token,user,uid[,"group1,group2"] per line."""
    tokens: dict[str, UserInfo] = {}
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row or row[0].startswith("#") or len(row) < 2:
                continue
            groups = tuple(g for g in row[3].split(",") if g) if len(row) > 3 else ()
            tokens[row[0].strip()] = UserInfo(row[1].strip(), row[2].strip() if len(row) > 2 else "", groups)
    return tokens


# One TLS connection carries one verified certificate (renegotiation is off on the server context), so the
# user is read once per connection; weak keys drop the entry with the connection.
_CERT_USERS: weakref.WeakKeyDictionary[ssl.SSLObject, UserInfo | None] = weakref.WeakKeyDictionary()


def _from_certificate(request: web.Request) -> UserInfo | None:
    transport = request.transport
    if transport is None:
        return None
    ssl_object = transport.get_extra_info("ssl_object")
    if not isinstance(ssl_object, ssl.SSLObject):
        return None
    try:
        return _CERT_USERS[ssl_object]
    except KeyError:
        user = _CERT_USERS[ssl_object] = _read_certificate(ssl_object)
        return user


def _read_certificate(ssl_object: ssl.SSLObject) -> UserInfo | None:
    subject = peer_subject(ssl_object)
    if subject is None:
        return None
    cn, orgs = subject
    return UserInfo(cn, groups=(*orgs, "system:authenticated"))


class Authenticator:
    """Turns a request into a user, or None (the caller answers 401)."""

    def __init__(
        self,
        tokens: dict[str, UserInfo] | None = None,
        service_accounts: TokenValidator | None = None,
        api_audiences: tuple[str, ...] = (),
        success_cache_ttl: float = SUCCESS_TTL,
    ) -> None:
        self._tokens = tokens or {}
        self.service_accounts = service_accounts
        # --enable-bootstrap-token-auth (bootstraptoken.py); None: off, as upstream's default.
        self.bootstrap_tokens: BootstrapTokenAuthenticator | None = None
        self.api_audiences = api_audiences
        self._cache: TokenCache[TokenResult] = TokenCache(success_cache_ttl)
        # --authentication-config's JWT authenticators (jwtauthn.py), tried after the service accounts.
        self.jwt: list[JwtAuthenticator] = []
        # --authentication-token-webhook-config-file (tokenwebhook.py): asked last, for unclaimed tokens.
        self.webhook: TokenWebhook | None = None
        # Front-proxy authentication (requestheader.py): set by the server once its PKI is there.
        self.requestheader: RequestHeaderAuthenticator | None = None

    def authenticate(self, request: web.Request) -> UserInfo | None:
        if self.requestheader is not None:  # a front proxy speaking for a user it authenticated
            proxied = self.requestheader.authenticate(request)
            if proxied is not None:
                return proxied
        header = request.headers.get("Authorization", "")
        if header[:7].lower() == "bearer ":
            result = self.authenticate_token(header[7:].strip())
            if result.user is None:
                log.info(
                    "event=authentication_failed method=%s path=%s reason=%r",
                    request.method,
                    request.path,
                    result.error,
                )
            # A wrong token is a failed login even if a certificate came along, as upstream does.
            return result.user
        if self.requestheader is not None and self.requestheader.owns_certificate(request):
            return None  # a front proxy's certificate is no user of its own
        return _from_certificate(request)

    async def authenticate_request(self, request: web.Request) -> UserInfo | None:
        """authenticate(), with the webhook token authenticator after every other (it may await)."""
        if self.webhook is None or not request.headers.get("Authorization", "")[:7].lower() == "bearer ":
            return self.authenticate(request)
        if self.requestheader is not None:
            proxied = self.requestheader.authenticate(request)
            if proxied is not None:
                return proxied
        result = await self.authenticate_token_async(request.headers["Authorization"][7:].strip())
        if result.user is None:
            log.info(
                "event=authentication_failed method=%s path=%s reason=%r",
                request.method,
                request.path,
                result.error,
            )
        return result.user

    async def authenticate_token_async(self, token: str, audiences: tuple[str, ...] = ()) -> TokenResult:
        """authenticate_token(), then the webhook for a token nothing else claimed."""
        result = self.authenticate_token(token, audiences)
        if result.user is None and result.unclaimed and self.webhook is not None:
            return await self.webhook.review(token, audiences or self.api_audiences)
        return result

    def replace_jwt(self, authenticators: list[JwtAuthenticator]) -> None:
        """New JWT authenticators (a reloaded --authentication-config): no success of the old ones is kept."""
        self.jwt = authenticators
        self._cache = TokenCache(self._cache.ttl)

    def authenticate_token(self, token: str, audiences: tuple[str, ...] = ()) -> TokenResult:
        """A bearer token against the static tokens, then the service-account tokens (upstream's token
        union). `audiences`: the ones the caller asks for (TokenReview); default the API server's."""
        wanted = audiences or self.api_audiences
        cached = self._cache.get(token, wanted)
        if cached is not None:
            failure = cached.recheck() if cached.recheck is not None else ""
            if not failure:
                return cached
            # Its pod (or Secret, node, account) went since the signature was checked: rejected at once.
            return TokenResult(None, error=f"[invalid bearer token, {failure}]")
        result = self._authenticate_token(token, wanted)
        if result.user is not None:
            self._cache.put(token, wanted, result)
        return result

    def _authenticate_token(self, token: str, wanted: tuple[str, ...]) -> TokenResult:
        for known, user in self._tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                # Audience-agnostic, as upstream wraps it: good for the API server's own audiences only.
                matched = (
                    tuple(a for a in wanted if a in self.api_audiences) if self.api_audiences else wanted
                )
                if self.api_audiences and not matched:
                    return TokenResult(None, error="token audiences are invalid for the target audiences")
                return TokenResult(
                    UserInfo(user.name, user.uid, (*user.groups, "system:authenticated")), matched
                )
        if self.bootstrap_tokens is not None:
            try:
                boot = self.bootstrap_tokens.authenticate(token)
            except NotBootstrapToken:
                pass
            except BootstrapTokenRejected as err:
                return TokenResult(None, error=f"[invalid bearer token, {err}]")
            else:
                matched = (
                    tuple(a for a in wanted if a in self.api_audiences) if self.api_audiences else wanted
                )
                if self.api_audiences and not matched:
                    return TokenResult(None, error="token audiences are invalid for the target audiences")
                return TokenResult(
                    UserInfo(boot.username, "", (*boot.groups, "system:authenticated")), matched
                )
        if self.service_accounts is None:
            return self._external(token, wanted)
        try:
            who = self.service_accounts.authenticate(token, wanted)
        except NotOurs:
            return self._external(token, wanted)
        except TokenRejected as err:
            return TokenResult(None, error=f"[invalid bearer token, {err}]")
        extra = tuple((k, tuple(v)) for k, v in sorted(who.extra().items()))
        user = UserInfo(who.username, who.uid, (*groups(who.namespace), "system:authenticated"), extra)
        return TokenResult(user, who.audiences, recheck=who.recheck)

    def _external(self, token: str, wanted: tuple[str, ...]) -> TokenResult:
        """--authentication-config's JWT authenticators, the one whose issuer the token names; valid for
        the API server's own audiences, as upstream wraps them."""
        if not self.jwt:
            return TokenResult(None, error="invalid bearer token", unclaimed=True)
        try:
            header, payload = peek_jwt(token)
        except NotOurs:
            return TokenResult(None, error="invalid bearer token", unclaimed=True)
        for authenticator in self.jwt:
            if payload.get("iss") != authenticator.issuer:
                continue
            try:
                name, uid, groups, extra, _ = authenticator.authenticate(token, header)
            except JwtRejected as err:
                return TokenResult(None, error=f"[invalid bearer token, {err}]")
            matched = tuple(a for a in wanted if a in self.api_audiences) if self.api_audiences else wanted
            if self.api_audiences and not matched:
                return TokenResult(None, error="token audiences are invalid for the target audiences")
            return TokenResult(UserInfo(name, uid, (*groups, "system:authenticated"), extra), matched)
        return TokenResult(None, error="invalid bearer token", unclaimed=True)
