"""Authentication: client certificates (CN = user, O = groups) and a static bearer token file.

The TLS layer verifies client certificates against the cluster CA (optional at the handshake, so token
users can connect); this module only reads the verified subject. Tokens are compared, never logged.
"""

from __future__ import annotations

import csv
import hmac
import ssl
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = field(default_factory=tuple)
    # user.Info's Extra (impersonation's Impersonate-Extra-*, a SubjectAccessReview's spec.extra).
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict, compare=False)


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
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    cn = ""
    orgs: list[str] = []
    for rdn in cert.get("subject", ()):
        for attr, value in rdn:
            if attr == "commonName":
                cn = value
            elif attr == "organizationName":
                orgs.append(value)
    if not cn:
        return None
    return UserInfo(cn, groups=(*orgs, "system:authenticated"))


class Authenticator:
    """Turns a request into a user, or None (the caller answers 401)."""

    def __init__(self, tokens: dict[str, UserInfo] | None = None) -> None:
        self._tokens = tokens or {}

    def authenticate(self, request: web.Request) -> UserInfo | None:
        header = request.headers.get("Authorization", "")
        if header[:7].lower() == "bearer ":
            token = header[7:].strip()
            for known, user in self._tokens.items():
                if hmac.compare_digest(known.encode(), token.encode()):
                    return UserInfo(user.name, user.uid, (*user.groups, "system:authenticated"))
            # A wrong token is a failed login even if a certificate came along, as upstream does.
            return None
        return _from_certificate(request)
