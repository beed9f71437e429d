"""Bound service-account tokens: the JWTs TokenRequest issues and bearer-token authentication accepts
(upstream's pkg/serviceaccount/claims.go and jwt.go, 1.32).

A token carries upstream's claims: iss, sub `system:serviceaccount:<ns>:<name>`, aud, exp, iat, nbf,
jti, and the private `kubernetes.io` claim naming the namespace, the account (name and uid), the object
it is bound to (a pod, with the pod's node, or a secret, or a node) and, for the admission plugin's
default lifetime, `warnafter`. Validation checks the signature (RS256 and the other asymmetric
algorithms only: `none` and HMAC are never accepted), the issuer, the audience against the ones asked
for, exp and nbf with go-jose's one-minute leeway, and that the account and the bound object still
exist with the UIDs in the token, so a deleted pod's token stops working as soon as the pod is gone.

Why a token was refused goes to the caller as a `TokenRejected` reason (logged by the authenticator,
never with the token); a token that is not a JWT of our issuer is `NotOurs`, for the next
authenticator to try.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jwt

from controlplane import legacytoken
from controlplane.apiserver.sakeys import ALGORITHM, SigningKey, VerificationKey

Obj = dict[str, Any]
# (resource, namespace, name) -> the stored object or None; resource is one of serviceaccounts, pods,
# secrets, nodes.
Lookup = Callable[[str, str, str], Obj | None]

DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# The admission plugin's projected token asks for this lifetime; such pod-bound tokens are issued for a
# year and flagged stale after it (upstream's WarnOnlyBoundTokenExpirationSeconds, ExpirationExtensionSeconds).
WARN_ONLY_EXPIRATION = 60 * 60 + 7
EXPIRATION_EXTENSION = 24 * 365 * 60 * 60
LEEWAY = 60  # go-jose's DefaultLeeway, which upstream's validator uses for exp, nbf and deletions
ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"]

PREFIX = "system:serviceaccount:"
EXTRA_POD_NAME = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID = "authentication.kubernetes.io/pod-uid"
EXTRA_NODE_NAME = "authentication.kubernetes.io/node-name"
EXTRA_NODE_UID = "authentication.kubernetes.io/node-uid"
EXTRA_CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"


def username(namespace: str, name: str) -> str:
    return f"{PREFIX}{namespace}:{name}"


def groups(namespace: str) -> tuple[str, ...]:
    return ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")


class NotOurs(Exception):
    """Not a JWT of an issuer this server knows: another authenticator may take it."""


class TokenRejected(Exception):
    """A token of ours that does not authenticate; the message says why (it never holds the token)."""


@dataclass(frozen=True)
class Identity:
    """Who a valid token speaks for (upstream's ServiceAccountInfo) and the audiences it was valid for."""

    namespace: str
    name: str
    uid: str
    audiences: tuple[str, ...]
    pod_name: str = ""
    pod_uid: str = ""
    node_name: str = ""
    node_uid: str = ""
    credential_id: str = ""
    # Asks again whether the bound objects hold ("" when they do): the authenticator's cache calls it on
    # every hit, so a cached token dies with its pod.
    recheck: Callable[[], str] | None = field(default=None, compare=False, repr=False)

    @property
    def username(self) -> str:
        return username(self.namespace, self.name)

    def extra(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        if self.pod_name and self.pod_uid:
            out[EXTRA_POD_NAME] = [self.pod_name]
            out[EXTRA_POD_UID] = [self.pod_uid]
        if self.credential_id:
            out[EXTRA_CREDENTIAL_ID] = [self.credential_id]
        if self.node_name:
            out[EXTRA_NODE_NAME] = [self.node_name]
            if self.node_uid:
                out[EXTRA_NODE_UID] = [self.node_uid]
        return out


def _ref(obj: Obj | None) -> Obj | None:
    if obj is None:
        return None
    meta = obj.get("metadata") or {}
    out = {"name": meta.get("name", "")}
    if meta.get("uid"):
        out["uid"] = meta["uid"]
    return out


@dataclass
class TokenIssuer:
    """Signs tokens for TokenRequest (`serviceaccounts/<name>/token`)."""

    key: SigningKey
    issuer: str = DEFAULT_ISSUER
    audiences: tuple[str, ...] = (DEFAULT_ISSUER,)  # the API server's (--api-audiences): a request's default
    max_expiration: int = 0  # --service-account-max-token-expiration in seconds (0: no limit)
    extend_expiration: bool = True  # --service-account-extend-token-expiration
    clock: Callable[[], float] = field(default=time.time)

    def claims(
        self,
        account: Obj,
        audiences: Sequence[str],
        expiration: int,
        *,
        pod: Obj | None = None,
        secret: Obj | None = None,
        node: Obj | None = None,
        warn_after: int = 0,
    ) -> Obj:
        """Upstream's Claims(): public claims plus the `kubernetes.io` private claim."""
        now = int(self.clock())
        meta = account.get("metadata") or {}
        private: Obj = {"namespace": meta.get("namespace", ""), "serviceaccount": _ref(account)}
        if pod is not None:
            private["pod"] = _ref(pod)
        elif secret is not None:
            private["secret"] = _ref(secret)
        if node is not None:
            private["node"] = _ref(node)
        if warn_after:
            private["warnafter"] = now + warn_after
        return {
            "aud": list(audiences),
            "exp": now + expiration,
            "iat": now,
            "iss": self.issuer,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": private,
            "nbf": now,
            "sub": username(meta.get("namespace", ""), meta.get("name", "")),
        }

    def sign(self, claims: Obj) -> str:
        # Upstream's header holds alg and kid only (no typ).
        return jwt.encode(
            claims, self.key.private, algorithm=ALGORITHM, headers={"kid": self.key.kid, "typ": None}
        )


def peek_jwt(token: str) -> tuple[Obj, Obj]:
    """Header and payload of a compact JWS, unverified (to route the token and pick the key)."""
    parts = token.split(".")
    if len(parts) != 3:
        raise NotOurs("not a JWT")
    try:
        decoded = [json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4))) for p in parts[:2]]
    except (ValueError, TypeError):
        raise NotOurs("not a JWT") from None
    header, payload = decoded
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise NotOurs("not a JWT")
    return header, payload


@dataclass
class TokenValidator:
    """Upstream's jwtTokenAuthenticator with the bound-token validator, for the issuers it knows."""

    keys: Sequence[SigningKey | VerificationKey]
    issuers: Sequence[str]
    api_audiences: Sequence[str]
    lookup: Lookup
    clock: Callable[[], float] = field(default=time.time)
    # A Secret whole (its data), for legacy tokens, which must still be the one their Secret holds.
    secrets: Callable[[str, str], Obj | None] | None = None
    # Told (namespace, Secret name) when a legacy token is used and its Secret's
    # kubernetes.io/legacy-token-last-used label is not today's: the server writes the label.
    legacy_used: Callable[[str, str], None] | None = None

    def authenticate(self, token: str, audiences: Iterable[str] | None = None) -> Identity:
        """The identity of a valid token for `audiences` (default: the API server's own)."""
        header, payload = peek_jwt(token)
        legacy = payload.get("iss") == legacytoken.ISSUER and self.secrets is not None
        if payload.get("iss") not in self.issuers and not legacy:
            raise NotOurs("issuer not ours")
        if header.get("alg") not in ALGORITHMS:
            raise NotOurs(f"signing algorithm {header.get('alg')!r} is not accepted")
        claims = self._verified(token, header)
        wanted = tuple(audiences) if audiences else tuple(self.api_audiences)
        if legacy:
            return self._validate_legacy(token, claims, wanted)
        return self._validate(claims, wanted)

    def _validate_legacy(self, token: str, claims: Obj, wanted: tuple[str, ...]) -> Identity:
        """Upstream's legacy validator: the Secret named in the token still holds it (and is not marked
        invalid), and the service account still has the UID the token names."""
        assert self.secrets is not None
        matched = tuple(a for a in self.api_audiences if a in wanted)  # no aud: the server's own, implied
        if not matched and self.api_audiences:
            raise TokenRejected(
                f"token audiences {list(self.api_audiences)} is invalid for the target audiences {list(wanted)}"
            )
        namespace = str(claims.get(legacytoken.NAMESPACE_CLAIM) or "")
        secret_name = str(claims.get(legacytoken.SECRET_NAME_CLAIM) or "")
        name = str(claims.get(legacytoken.ACCOUNT_NAME_CLAIM) or "")
        uid = str(claims.get(legacytoken.ACCOUNT_UID_CLAIM) or "")
        if not (namespace and secret_name and name and uid):
            raise TokenRejected("service account token claims are incomplete")
        private = {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}}

        def failure() -> str:
            assert self.secrets is not None
            secret = self.secrets(namespace, secret_name)
            meta = (secret or {}).get("metadata") or {}
            stored = ((secret or {}).get("data") or {}).get("token") or ""
            try:
                held = base64.b64decode(stored).decode()
            except (ValueError, UnicodeDecodeError):
                held = ""
            if secret is None or meta.get("deletionTimestamp") or held != token:
                return "service account token has been invalidated"
            if legacytoken.INVALID_SINCE_LABEL in (meta.get("labels") or {}):
                return (
                    f"the token in secret {namespace}/{secret_name} for service account {namespace}/{name} has "
                    "been marked invalid. Use tokens from the TokenRequest API or manually created secret-based "
                    f"tokens, or remove the '{legacytoken.INVALID_SINCE_LABEL}' label from the secret to "
                    "re-enable it"
                )
            return self.bound_failure(private)

        why = failure()
        if why:
            raise TokenRejected(why)
        if self.legacy_used is not None:
            secret = self.secrets(namespace, secret_name) or {}
            labels = (secret.get("metadata") or {}).get("labels") or {}
            if labels.get(legacytoken.LAST_USED_LABEL) != today(self.clock()):
                self.legacy_used(namespace, secret_name)
        # Each request asks again (the cache's recheck): a deleted Secret takes its token at once.
        return Identity(namespace, name, uid, matched or tuple(self.api_audiences), recheck=failure)

    def _verified(self, token: str, header: Obj) -> Obj:
        # The key named by kid first, then the others (upstream tries every key it has).
        keys = sorted(self.keys, key=lambda k: k.kid != header.get("kid"))
        for key in keys:
            try:
                return jwt.decode(
                    token,
                    key.public,
                    algorithms=ALGORITHMS,
                    options={
                        "verify_aud": False,
                        "verify_exp": False,
                        "verify_nbf": False,
                        "verify_iat": False,
                        "verify_iss": False,
                    },
                )
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError as err:
                raise TokenRejected(f"malformed token: {type(err).__name__}") from None
        raise TokenRejected("square/go-jose: error in cryptographic primitive")

    def _validate(self, claims: Obj, wanted: tuple[str, ...]) -> Identity:
        now = self.clock()
        aud = claims.get("aud")
        token_auds = tuple([aud] if isinstance(aud, str) else aud or ()) or tuple(self.api_audiences)
        matched = tuple(a for a in token_auds if a in wanted)
        if not matched and self.api_audiences:
            raise TokenRejected(
                f"token audiences {list(token_auds)} is invalid for the target audiences {list(wanted)}"
            )
        exp, nbf = claims.get("exp"), claims.get("nbf")
        if not isinstance(exp, int | float):
            raise TokenRejected("service account token has no expiry")
        if now > exp + LEEWAY:
            raise TokenRejected("service account token has expired")
        if isinstance(nbf, int | float) and now < nbf - LEEWAY:
            raise TokenRejected("service account token is not valid yet")
        private = claims.get("kubernetes.io")
        if not isinstance(private, dict):
            raise TokenRejected("service account token has no kubernetes.io claim")
        namespace = str(private.get("namespace") or "")
        account_ref = private.get("serviceaccount") or {}
        failure = self.bound_failure(private)
        if failure:
            raise TokenRejected(failure)
        pod_ref, node_ref = private.get("pod") or {}, private.get("node") or {}
        jti = claims.get("jti")
        return Identity(
            namespace=namespace,
            name=str(account_ref.get("name", "")),
            uid=str(account_ref.get("uid", "")),
            audiences=matched or token_auds,
            pod_name=str(pod_ref.get("name", "")),
            pod_uid=str(pod_ref.get("uid", "")),
            node_name=str(node_ref.get("name", "")),
            node_uid=str(node_ref.get("uid", "")),
            credential_id=f"JTI={jti}" if jti else "",
            recheck=lambda: self.bound_failure(private),
        )

    def bound_failure(self, private: Obj) -> str:
        """Why the objects the token is bound to no longer hold (its service account, Secret, pod or
        node gone, replaced by a new UID, or deleted past the leeway); "" while they do. Lookups in the
        watch cache: cheap enough to ask on every request, also when the signature check was cached, so a
        deleted pod's token stops working at once."""
        now = self.clock()
        namespace = str(private.get("namespace") or "")
        account_ref = private.get("serviceaccount") or {}
        if self._current("serviceaccounts", namespace, account_ref, now) is None:
            return f"service account {namespace}/{account_ref.get('name')} is not valid"
        for resource, claim in (("secrets", "secret"), ("pods", "pod")):
            ref = private.get(claim)
            if ref is not None and self._current(resource, namespace, ref, now) is None:
                return "service account token has been invalidated"
        pod_ref, node_ref = private.get("pod") or {}, private.get("node") or {}
        if node_ref and not pod_ref and self._current("nodes", "", node_ref, now) is None:
            return "service account token has been invalidated"
        return ""

    def _current(self, resource: str, namespace: str, ref: Any, now: float) -> Obj | None:
        """The object the claim names if it exists with the claimed UID and was not deleted (before the
        leeway); None otherwise."""
        if not isinstance(ref, dict) or not ref.get("name"):
            return None
        obj = self.lookup(resource, namespace, str(ref["name"]))
        if obj is None:
            return None
        meta = obj.get("metadata") or {}
        if ref.get("uid") and meta.get("uid") != ref["uid"]:
            return None
        deleted = meta.get("deletionTimestamp")
        if deleted and _epoch(deleted) < now - LEEWAY:
            return None
        return obj


def today(now: float) -> str:
    """The UTC date as upstream writes it in the legacy-token-last-used label."""
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%d")


def _epoch(timestamp: str) -> float:
    return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


__all__ = [
    "DEFAULT_ISSUER",
    "EXPIRATION_EXTENSION",
    "WARN_ONLY_EXPIRATION",
    "Identity",
    "Lookup",
    "NotOurs",
    "TokenIssuer",
    "TokenRejected",
    "TokenValidator",
    "groups",
    "peek_jwt",
    "today",
    "username",
]
