"""Authorization hook between authentication and admission.

Allow-all for now; RBAC and the node authorizer plug in here later by implementing `Authorizer` and
being added to the chain. Every request already carries the attributes they will need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from controlplane.apiserver.authn import UserInfo


@dataclass(frozen=True)
class Attributes:
    """What RBAC decides on: who, which verb, which object."""

    user: UserInfo
    verb: str  # get list watch create update patch delete deletecollection, or the HTTP verb
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""
    resource_request: bool = True


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


class Authorizer(Protocol):
    def authorize(self, attrs: Attributes) -> Decision | None:
        """Allow or deny; None means no opinion (the next authorizer decides)."""
        ...


class AllowAll:
    def authorize(self, attrs: Attributes) -> Decision | None:
        return Decision(True, "allow-all")


class AuthorizerChain:
    """First authorizer with an opinion wins; no opinion from anyone is a deny, as upstream."""

    def __init__(self, authorizers: list[Authorizer]) -> None:
        self.authorizers = authorizers

    def authorize(self, attrs: Attributes) -> Decision:
        for authorizer in self.authorizers:
            decision = authorizer.authorize(attrs)
            if decision is not None:
                return decision
        return Decision(False, "no authorizer allowed the request")
