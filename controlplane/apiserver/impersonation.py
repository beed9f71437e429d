"""Impersonation (upstream's endpoints/filters/impersonation.go): `Impersonate-User`, `Impersonate-Group`,
`Impersonate-Uid` and `Impersonate-Extra-<key>` headers make the request act as another user, once the
real user is authorized to `impersonate` each: users (or serviceaccounts, for a
`system:serviceaccount:<ns>:<name>` user), groups, uids and userextras/<key> (authentication.k8s.io).

`kubectl --as alice --as-group devs` sends these. The impersonated user gets system:authenticated
unless groups say otherwise (system:unauthenticated for system:anonymous), and a service account its
two groups when no group was asked for, as upstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from controlplane.apiserver import errors
from controlplane.apiserver.authn import UserInfo
from controlplane.apiserver.authz import Attributes, forbidden

if TYPE_CHECKING:
    from multidict import CIMultiDictProxy

    from controlplane.apiserver.authz import AuthorizerChain

USER, GROUP, UID = "Impersonate-User", "Impersonate-Group", "Impersonate-Uid"
EXTRA_PREFIX = "impersonate-extra-"
ANONYMOUS, AUTHENTICATED, UNAUTHENTICATED = (
    "system:anonymous",
    "system:authenticated",
    "system:unauthenticated",
)
SA_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True)
class Request:
    """One thing to impersonate (upstream builds an ObjectReference per header value)."""

    kind: str  # User, ServiceAccount, Group, UserExtra, UID
    name: str
    namespace: str = ""
    extra_key: str = ""

    def attributes(self, user: UserInfo) -> Attributes:
        if self.kind == "ServiceAccount":
            return Attributes(user, "impersonate", "", "", "serviceaccounts", "", self.namespace, self.name)
        if self.kind == "UserExtra":
            return Attributes(
                user,
                "impersonate",
                "authentication.k8s.io",
                "v1",
                "userextras",
                self.extra_key,
                "",
                self.name,
            )
        if self.kind == "UID":
            return Attributes(user, "impersonate", "authentication.k8s.io", "v1", "uids", "", "", self.name)
        return Attributes(
            user, "impersonate", "", "", "users" if self.kind == "User" else "groups", "", "", self.name
        )


def _split_service_account(name: str) -> tuple[str, str] | None:
    """serviceaccount.SplitUsername."""
    if not name.startswith(SA_PREFIX):
        return None
    namespace, sep, account = name[len(SA_PREFIX) :].partition(":")
    if not sep or not namespace or not account or ":" in account:
        return None
    return namespace, account


def requests_of(headers: CIMultiDictProxy[str]) -> list[Request]:
    """buildImpersonationRequests; an error if groups, extras or a uid come without a user."""
    out: list[Request] = []
    user = headers.get(USER, "")
    if user:
        account = _split_service_account(user)
        out.append(Request("ServiceAccount", account[1], account[0]) if account else Request("User", user))
    groups = headers.getall(GROUP, [])
    out += [Request("Group", g) for g in groups]
    extras = []
    for header in headers:
        if header.lower().startswith(EXTRA_PREFIX) and header not in extras:
            extras.append(header)
    for header in extras:
        key = unquote(header[len(EXTRA_PREFIX) :].lower())
        out += [Request("UserExtra", value, extra_key=key) for value in headers.getall(header)]
    uid = headers.get(UID, "")
    if uid:
        out.append(Request("UID", uid))
    if (groups or extras or uid) and not user:
        described = " ".join(f"{{{r.kind} {r.namespace} {r.name}}}" for r in out)
        raise errors.internal(f"requested [{described}] without impersonating a user")
    return out


def impersonate(headers: CIMultiDictProxy[str], user: UserInfo, authorizer: AuthorizerChain) -> UserInfo:
    """The user the request acts as: `user` itself without impersonation headers, else the impersonated
    user once every part of it is authorized (a 403 naming the first that is not)."""
    wanted = requests_of(headers)
    if not wanted:
        return user
    name, uid = "", ""
    groups: list[str] = []
    extra: dict[str, list[str]] = {}
    groups_given = bool(headers.getall(GROUP, []))
    for item in wanted:
        attrs = item.attributes(user)
        decision = authorizer.authorize(attrs)
        if not decision.allowed:
            raise forbidden(attrs, decision.reason)
        if item.kind == "ServiceAccount":
            name = f"{SA_PREFIX}{item.namespace}:{item.name}"
            if not groups_given:
                groups += ["system:serviceaccounts", f"system:serviceaccounts:{item.namespace}"]
        elif item.kind == "User":
            name = item.name
        elif item.kind == "Group":
            groups.append(item.name)
        elif item.kind == "UserExtra":
            extra.setdefault(item.extra_key, []).append(item.name)
        else:
            uid = item.name
    if name != ANONYMOUS:
        if AUTHENTICATED not in groups and UNAUTHENTICATED not in groups:
            groups.append(AUTHENTICATED)
    elif UNAUTHENTICATED not in groups:
        groups.append(UNAUTHENTICATED)
    return UserInfo(name, uid, tuple(groups), tuple((k, tuple(v)) for k, v in sorted(extra.items())))


__all__ = ["impersonate", "requests_of"]
