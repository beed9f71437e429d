"""Legacy service-account tokens (the `kubernetes.io/service-account-token` Secrets): the claims
upstream's token controller signs into them and the API server reads back. Shared by the controller
that issues them (controllers/serviceaccounttoken.py) and the authenticator that accepts them
(apiserver/satokens.py), which otherwise know nothing of each other.

Such a token has no expiry and no audience; it stays valid while its Secret holds it and its service
account has the UID it names."""

from __future__ import annotations

from typing import Any

ISSUER = "kubernetes/serviceaccount"
SECRET_TYPE = "kubernetes.io/service-account-token"
NAME_ANNOTATION = "kubernetes.io/service-account.name"
UID_ANNOTATION = "kubernetes.io/service-account.uid"
# Upstream's legacy-token tracking (1.32): the day a token was last used, and the mark of one
# invalidated by the cleaner (its tokens then refused).
LAST_USED_LABEL = "kubernetes.io/legacy-token-last-used"
INVALID_SINCE_LABEL = "kubernetes.io/legacy-token-invalid-since"

NAMESPACE_CLAIM = "kubernetes.io/serviceaccount/namespace"
SECRET_NAME_CLAIM = "kubernetes.io/serviceaccount/secret.name"
ACCOUNT_NAME_CLAIM = "kubernetes.io/serviceaccount/service-account.name"
ACCOUNT_UID_CLAIM = "kubernetes.io/serviceaccount/service-account.uid"


def claims(namespace: str, secret: str, account: str, account_uid: str) -> dict[str, Any]:
    """Upstream's LegacyClaims, in its field order."""
    return {
        "iss": ISSUER,
        NAMESPACE_CLAIM: namespace,
        SECRET_NAME_CLAIM: secret,
        ACCOUNT_NAME_CLAIM: account,
        ACCOUNT_UID_CLAIM: account_uid,
        "sub": f"system:serviceaccount:{namespace}:{account}",
    }


__all__ = [
    "ACCOUNT_NAME_CLAIM",
    "ACCOUNT_UID_CLAIM",
    "INVALID_SINCE_LABEL",
    "ISSUER",
    "LAST_USED_LABEL",
    "NAMESPACE_CLAIM",
    "NAME_ANNOTATION",
    "SECRET_NAME_CLAIM",
    "SECRET_TYPE",
    "UID_ANNOTATION",
    "claims",
]
