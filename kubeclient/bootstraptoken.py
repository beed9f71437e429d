"""Bootstrap tokens as Secrets (upstream's k8s.io/cluster-bootstrap: token/api, token/util, secret and
token/jws), in one place for the three readers that must agree on them: the API server's token
authenticator, the controller manager's bootstrapsigner and tokencleaner, and `pykubelet token`.

A token is `<id>.<secret>` (`[a-z0-9]{6}.[a-z0-9]{16}`), stored as the Secret
`kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token` with the data keys below. Each
reader takes only what upstream's reader would: a Secret that breaks a rule is treated as absent (the
reason is returned for the log, never the token secret).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import re
import secrets
import string
import warnings
from dataclasses import dataclass, field
from typing import Any

import jwt

Obj = dict[str, Any]

NAMESPACE = "kube-system"
SECRET_TYPE = "bootstrap.kubernetes.io/token"
SECRET_PREFIX = "bootstrap-token-"
TOKEN_ID = "token-id"
TOKEN_SECRET = "token-secret"
EXPIRATION = "expiration"
DESCRIPTION = "description"
EXTRA_GROUPS = "auth-extra-groups"
USAGE_PREFIX = "usage-bootstrap-"
USAGE_AUTHENTICATION = "usage-bootstrap-authentication"
USAGE_SIGNING = "usage-bootstrap-signing"
USAGES = ("authentication", "signing")

USER_PREFIX = "system:bootstrap:"
GROUP = "system:bootstrappers"
# kubeadm's default extra group for the tokens it makes (kubeadm's NodeBootstrapTokenAuthGroup).
KUBEADM_DEFAULT_GROUP = "system:bootstrappers:kubeadm:default-node-token"

# The cluster-info ConfigMap kubeadm's discovery reads (kube-public), and the JWS keys in it.
CLUSTER_INFO_NAMESPACE = "kube-public"
CLUSTER_INFO = "cluster-info"
KUBECONFIG_KEY = "kubeconfig"
JWS_PREFIX = "jws-kubeconfig-"

TOKEN_RE = re.compile(r"\A([a-z0-9]{6})\.([a-z0-9]{16})\Z")
ID_RE = re.compile(r"\A[a-z0-9]{6}\Z")
SECRET_RE = re.compile(r"\A[a-z0-9]{16}\Z")
GROUP_RE = re.compile(r"\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\Z")
_ALPHABET = string.ascii_lowercase + string.digits


def generate() -> str:
    """A fresh `<id>.<secret>` from the token alphabet (kubeadm's GenerateBootstrapToken)."""
    pick = secrets.choice
    return "".join(pick(_ALPHABET) for _ in range(6)) + "." + "".join(pick(_ALPHABET) for _ in range(16))


def secret_name(token_id: str) -> str:
    return SECRET_PREFIX + token_id


def validate_group(group: str) -> str:
    """ "" when `group` may be an extra group, else upstream's message (ValidateBootstrapGroupName)."""
    if GROUP_RE.match(group):
        return ""
    return f"bootstrap group {group!r} is invalid (must match {GROUP_RE.pattern[2:-2]})"


def validate_usages(usages: list[str]) -> str:
    bad = sorted(u for u in usages if u not in USAGES)
    return (
        f"invalid bootstrap token usage string: {','.join(bad)}, valid options: {','.join(USAGES)}"
        if bad
        else ""
    )


def data_value(secret: Obj, key: str) -> str:
    raw = (secret.get("data") or {}).get(key)
    if not raw:
        return ""
    try:
        return base64.b64decode(raw).decode()
    except (ValueError, UnicodeDecodeError):
        return ""


def parse_time(text: str) -> dt.datetime | None:
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


@dataclass(frozen=True)
class BootstrapToken:
    """What a valid token Secret says."""

    token_id: str
    token_secret: str
    expiration: dt.datetime | None
    usages: frozenset[str]
    groups: tuple[str, ...] = ()
    description: str = ""
    uid: str = field(default="", compare=False)

    def expired(self, now: dt.datetime | None = None) -> bool:
        return self.expiration is not None and (now or dt.datetime.now(dt.UTC)) >= self.expiration


def parse_secret(secret: Obj) -> tuple[BootstrapToken | None, str]:
    """(token, "") for a well-formed bootstrap token Secret, (None, why not) otherwise. Expiry is left to
    the caller (the cleaner wants expired tokens, the authenticator refuses them)."""
    meta = secret.get("metadata") or {}
    name = str(meta.get("name", ""))
    if secret.get("type") != SECRET_TYPE:
        return None, f"secret {name} is not of type {SECRET_TYPE}"
    token_id = data_value(secret, TOKEN_ID)
    if not ID_RE.match(token_id):
        return None, f"secret {name} has an invalid token-id"
    if name != secret_name(token_id):
        return None, f"secret {name} is not named {secret_name(token_id)}"
    token_secret = data_value(secret, TOKEN_SECRET)
    if not SECRET_RE.match(token_secret):
        return None, f"secret {name} has an invalid token-secret"
    expiration: dt.datetime | None = None
    raw_expiration = data_value(secret, EXPIRATION)
    if raw_expiration:
        expiration = parse_time(raw_expiration)
        if expiration is None:
            return None, f"secret {name} has an invalid expiration time (must be RFC3339)"
    usages = frozenset(u for u in USAGES if data_value(secret, USAGE_PREFIX + u) == "true")
    groups = tuple(g.strip() for g in data_value(secret, EXTRA_GROUPS).split(",") if g.strip())
    for group in groups:
        if validate_group(group):
            return None, f"secret {name}: {validate_group(group)}"
    token = BootstrapToken(
        token_id,
        token_secret,
        expiration,
        usages,
        groups,
        data_value(secret, DESCRIPTION),
        uid=str(meta.get("uid", "")),
    )
    return token, ""


def token_secret(
    token: str,
    ttl: float | None,
    usages: tuple[str, ...] = USAGES,
    groups: tuple[str, ...] = (KUBEADM_DEFAULT_GROUP,),
    description: str = "",
    now: dt.datetime | None = None,
) -> Obj:
    """The Secret for `token` (kubeadm's BootstrapTokenToSecret); ttl None or 0: never expires."""
    match = TOKEN_RE.match(token)
    if match is None:
        raise ValueError(f"the bootstrap token {token[:6]!r}... does not match {TOKEN_RE.pattern[2:-2]}")
    token_id, secret = match.groups()
    data = {TOKEN_ID: token_id, TOKEN_SECRET: secret}
    if description:
        data[DESCRIPTION] = description
    if ttl:
        expires = (now or dt.datetime.now(dt.UTC)) + dt.timedelta(seconds=ttl)
        data[EXPIRATION] = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
    for usage in usages:
        data[USAGE_PREFIX + usage] = "true"
    if groups:
        data[EXTRA_GROUPS] = ",".join(groups)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret_name(token_id), "namespace": NAMESPACE},
        "type": SECRET_TYPE,
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def detached_signature(content: str, token_id: str, token_secret: str) -> str:
    """The JWS over `content` with its payload cut out (`header..signature`), HS256 keyed with the
    token secret and `kid` the token id: what upstream's bootstrapsigner writes and kubeadm's discovery
    checks (cluster-bootstrap's ComputeDetachedSignature)."""
    with warnings.catch_warnings():
        # A token secret is 16 characters by design (upstream signs with it all the same).
        warnings.simplefilter("ignore")
        full = jwt.api_jws.encode(
            content.encode(), token_secret, algorithm="HS256", headers={"kid": token_id, "typ": None}
        )
    header, _payload, signature = full.split(".")
    return f"{header}..{signature}"


def verify_detached_signature(content: str, signature: str, token_id: str, token_secret: str) -> bool:
    header, sep, sig = signature.partition("..")
    if not sep:
        return False
    payload = base64.urlsafe_b64encode(content.encode()).rstrip(b"=").decode()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            decoded = jwt.api_jws.decode_complete(
                f"{header}.{payload}.{sig}", token_secret, algorithms=["HS256"]
            )
    except jwt.PyJWTError:
        return False
    return decoded["header"].get("kid") == token_id


def ca_cert_hash(ca_pem: bytes) -> str:
    """kubeadm's --discovery-token-ca-cert-hash: `sha256:` + hex SHA-256 of the CA's SubjectPublicKeyInfo."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_pem_x509_certificate(ca_pem)
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256:" + hashlib.sha256(spki).hexdigest()
