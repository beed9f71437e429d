"""JWT authenticators of --authentication-config (authnconfig.py): a token from an external issuer (an
OIDC provider, a company's SSO) is verified with the issuer's published keys, checked against its
audiences and claim validation rules, and mapped to a user (username, groups, uid, extra) as the
configuration says, then checked by the user validation rules.

The keys are fetched off the request path: at start and every few minutes from the issuer's discovery
document (`<url>/.well-known/openid-configuration`, or discoveryURL) and its jwks_uri, over TLS with the
configured certificateAuthority, and again (at most every 10 s) when a token names a key not yet seen.
While an issuer cannot be reached its tokens get 401; nothing else waits for it."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import Any

import aiohttp
import jwt

from controlplane.apiserver import cel
from controlplane.apiserver.authnconfig import JwtConfig, Mapping
from kubeclient.eventwait import wait_event

log = logging.getLogger("controlplane.apiserver.jwtauthn")

Obj = dict[str, Any]
ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"]
REFRESH = 300.0  # seconds between key refreshes
RETRY = 10.0  # after a failure, and the least time between refreshes asked for by an unknown kid


class JwtRejected(Exception):
    """A token of this issuer that does not authenticate; the message says why (never the token)."""


class JwtAuthenticator:
    def __init__(self, config: JwtConfig) -> None:
        self.config = config
        self.keys: dict[str, jwt.PyJWK] = {}
        self.error = "the issuer's keys have not been fetched yet"
        self._wake = asyncio.Event()
        self._last_fetch = 0.0
        self._task: asyncio.Task[None] | None = None

    @property
    def issuer(self) -> str:
        return self.config.url

    # --- keys ----------------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"jwt-keys {self.issuer}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.fetch()
                wait = REFRESH
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError, jwt.PyJWKError) as err:
                self.error = f"fetching the keys of {self.issuer}: {type(err).__name__}: {err}"
                log.warning("event=jwt_keys_failed issuer=%s error=%r", self.issuer, str(err))
                wait = RETRY
            self._wake.clear()
            try:
                await wait_event(self._wake, wait)
            except TimeoutError:
                pass

    async def fetch(self) -> None:
        self._last_fetch = time.monotonic()
        context = ssl.create_default_context(cadata=self.config.ca_pem or None)
        discovery = self.config.discovery_url or self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(discovery, ssl=context) as resp:
                resp.raise_for_status()
                doc = await resp.json(content_type=None)
            if doc.get("issuer") != self.issuer:
                raise ValueError(
                    f"oidc: issuer did not match the issuer returned by provider, expected "
                    f"{self.issuer!r} got {doc.get('issuer')!r}"
                )
            async with session.get(str(doc.get("jwks_uri") or ""), ssl=context) as resp:
                resp.raise_for_status()
                jwks = await resp.json(content_type=None)
        keys = {}
        for i, jwk in enumerate(jwks.get("keys") or []):
            key = jwt.PyJWK(jwk)
            keys[str(jwk.get("kid") or f"#{i}")] = key
        self.keys = keys
        self.error = ""
        log.info("event=jwt_keys_fetched issuer=%s keys=%d", self.issuer, len(keys))

    def _want_refresh(self) -> None:
        if time.monotonic() - self._last_fetch >= RETRY:
            self._wake.set()

    # --- tokens --------------------------------------------------------------------------------------

    def authenticate(
        self, token: str, header: Obj
    ) -> tuple[str, str, tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...], tuple[str, ...]]:
        """(username, uid, groups, extra, audiences) of a valid token; JwtRejected otherwise."""
        if not self.keys:
            raise JwtRejected(self.error)
        kid = header.get("kid")
        if kid is not None and kid not in self.keys:
            self._want_refresh()
        candidates = [self.keys[kid]] if kid in self.keys else list(self.keys.values())
        claims: Obj | None = None
        for key in candidates:
            try:
                claims = jwt.decode(
                    token,
                    key.key,
                    algorithms=ALGORITHMS,
                    audience=list(self.config.audiences),
                    issuer=self.issuer,
                    options={"require": ["exp"]},
                )
                break
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError as err:
                raise JwtRejected(f"oidc: verify token: {err}") from None
        if claims is None:
            raise JwtRejected("oidc: verify token: failed to verify signature: no key of the issuer matches")
        for rule in self.config.claim_rules:
            if rule.expression:
                if _evaluate(rule.expression, {"claims": claims}) is not True:
                    raise JwtRejected(
                        rule.message or f"claim validation expression {rule.expression!r} failed"
                    )
            elif claims.get(rule.claim) != rule.required_value:
                raise JwtRejected(
                    f"oidc: required claim {rule.claim} value does not match. Got = {claims.get(rule.claim)!r}, want = {rule.required_value!r}"
                )
        username = self._username(claims)
        groups = tuple(self._values(self.config.groups, claims, "groups")) if self.config.groups else ()
        uid = ""
        if self.config.uid is not None:
            value = (
                _evaluate(self.config.uid.expression, {"claims": claims})
                if self.config.uid.expression
                else claims.get(self.config.uid.claim)
            )
            if not isinstance(value, str):
                raise JwtRejected("oidc: uid claim is not a string")
            uid = value
        extra: list[tuple[str, tuple[str, ...]]] = []
        for key, expression in self.config.extra:
            value = _evaluate(expression, {"claims": claims})
            values = [value] if isinstance(value, str) else list(value or [])
            if any(not isinstance(v, str) for v in values):
                raise JwtRejected(
                    f"oidc: extra mapping {key!r}: the expression must give a string or a list of strings"
                )
            if values:
                extra.append((key, tuple(values)))
        user = {
            "username": username,
            "uid": uid,
            "groups": list(groups),
            "extra": {k: list(v) for k, v in extra},
        }
        for rule in self.config.user_rules:
            if _evaluate(rule.expression, {"user": user}) is not True:
                raise JwtRejected(rule.message or f"user validation expression {rule.expression!r} failed")
        aud = claims.get("aud")
        token_auds = (aud,) if isinstance(aud, str) else tuple(aud or ())
        return (
            username,
            uid,
            groups,
            tuple(sorted(extra)),
            tuple(a for a in token_auds if a in self.config.audiences),
        )

    def _username(self, claims: Obj) -> str:
        mapping = self.config.username
        if mapping.expression:
            value = _evaluate(mapping.expression, {"claims": claims})
            if not isinstance(value, str) or not value:
                raise JwtRejected("oidc: username expression must give a non-empty string")
            return value
        value = claims.get(mapping.claim)
        if not isinstance(value, str) or not value:
            raise JwtRejected(f"oidc: parse username claims {mapping.claim!r}: claim not present")
        if mapping.claim == "email" and "email_verified" in claims and claims["email_verified"] is not True:
            raise JwtRejected("oidc: email not verified")
        return (mapping.prefix or "") + value

    def _values(self, mapping: Mapping | None, claims: Obj, what: str) -> list[str]:
        assert mapping is not None
        if mapping.expression:
            value = _evaluate(mapping.expression, {"claims": claims})
            prefix = ""
        else:
            value = claims.get(mapping.claim)
            prefix = mapping.prefix or ""
        values = [value] if isinstance(value, str) else list(value or [])
        if any(not isinstance(v, str) for v in values):
            raise JwtRejected(f"oidc: {what}: a string or a list of strings is needed")
        return [prefix + v for v in values]


def _evaluate(expression: str, bindings: Obj) -> Any:
    try:
        return cel.compile_expression(expression).evaluate(bindings)
    except cel.CelError as err:
        raise JwtRejected(f"expression {expression!r} failed: {err}") from None
