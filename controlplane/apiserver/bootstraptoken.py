"""The bootstrap token authenticator (`--enable-bootstrap-token-auth`; upstream's
plugin/pkg/auth/authenticator/token/bootstrap): a bearer `<id>.<secret>` whose Secret
kube-system/bootstrap-token-<id> exists, is not being deleted, has not expired, allows
`usage-bootstrap-authentication` and holds that secret, is the user `system:bootstrap:<id>` in
`system:bootstrappers` and the token's `auth-extra-groups`.

A token that does not have the bootstrap shape is not ours (the next authenticator tries it); one that
has it but fails any check is refused, which the server answers with a 401 as upstream's union does.
The Secret is read from the watch cache, so a deleted or expired token stops working at once (beyond the
10 s token cache every authenticator shares, as kube-apiserver's).
"""

from __future__ import annotations

import datetime as dt
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubeclient import bootstraptoken as bt

Obj = dict[str, Any]
# (namespace, name) -> the stored Secret or None.
SecretLookup = Callable[[str, str], Obj | None]


class NotBootstrapToken(Exception):
    """The token does not have the bootstrap shape: another authenticator's."""


class BootstrapTokenRejected(Exception):
    """A bootstrap-shaped token that does not authenticate; the message says why (never the secret)."""


@dataclass(frozen=True)
class BootstrapIdentity:
    username: str
    groups: tuple[str, ...]


@dataclass
class BootstrapTokenAuthenticator:
    lookup: SecretLookup

    def authenticate(self, token: str, now: dt.datetime | None = None) -> BootstrapIdentity:
        match = bt.TOKEN_RE.match(token)
        if match is None:
            raise NotBootstrapToken
        token_id, token_secret = match.groups()
        name = bt.secret_name(token_id)
        secret = self.lookup(bt.NAMESPACE, name)
        if secret is None:
            raise BootstrapTokenRejected(f"No secret of name {name} to match bootstrap bearer token")
        if (secret.get("metadata") or {}).get("deletionTimestamp"):
            raise BootstrapTokenRejected(f"Bootstrap secret {name} is being deleted")
        parsed, why = bt.parse_secret(secret)
        if parsed is None:
            raise BootstrapTokenRejected(why)
        if not hmac.compare_digest(parsed.token_secret.encode(), token_secret.encode()):
            raise BootstrapTokenRejected(f"Bootstrap secret {name} does not match the bearer token")
        if parsed.expired(now):
            raise BootstrapTokenRejected(f"Bootstrap secret {name} has expired")
        if "authentication" not in parsed.usages:
            raise BootstrapTokenRejected(f"Bootstrap secret {name} not marked {bt.USAGE_AUTHENTICATION}=true")
        groups = (bt.GROUP, *(g for g in parsed.groups if g != bt.GROUP))
        return BootstrapIdentity(bt.USER_PREFIX + token_id, groups)
