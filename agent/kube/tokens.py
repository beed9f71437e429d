"""The node's calls about credentials, on the agent's own identity: TokenRequest for the service-account
tokens its pods project (bound to the pod, as the Node authorizer requires), and TokenReview and
SubjectAccessReview for the kubelet API's delegated authentication and authorization.

Tokens travel in request and response bodies only; nothing here logs them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from kubeclient.client import KubeClient


@dataclass(frozen=True)
class IssuedToken:
    token: str = field(repr=False)
    expires_at: float  # status.expirationTimestamp, epoch seconds
    expiration_seconds: int  # spec.expirationSeconds as the server granted it


@dataclass(frozen=True)
class ReviewedUser:
    """A TokenReview's answer: the user (None: not authenticated)."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


def _epoch(timestamp: str) -> float:
    return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


class CredentialClient:
    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def request_token(
        self,
        namespace: str,
        account: str,
        audiences: list[str],
        expiration_seconds: int,
        pod_name: str,
        pod_uid: str,
    ) -> IssuedToken:
        """POST serviceaccounts/<account>/token bound to the pod, as upstream's kubelet asks for it."""
        spec: dict[str, Any] = {
            "expirationSeconds": expiration_seconds,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid},
        }
        if audiences:
            spec["audiences"] = audiences
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        out = await self.client.create(
            f"/api/v1/namespaces/{quote(namespace)}/serviceaccounts/{quote(account)}/token", body
        )
        status = out.get("status") or {}
        granted = int((out.get("spec") or {}).get("expirationSeconds") or expiration_seconds)
        return IssuedToken(str(status.get("token") or ""), _epoch(status["expirationTimestamp"]), granted)

    async def review_token(self, token: str, audiences: list[str] | None = None) -> ReviewedUser | None:
        spec: dict[str, Any] = {"token": token}
        if audiences:
            spec["audiences"] = audiences
        out = await self.client.create(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec},
        )
        status = out.get("status") or {}
        if not status.get("authenticated"):
            return None
        user = status.get("user") or {}
        extra = tuple(sorted((k, tuple(v or ())) for k, v in (user.get("extra") or {}).items()))
        return ReviewedUser(
            str(user.get("username", "")), str(user.get("uid", "")), tuple(user.get("groups") or ()), extra
        )

    async def review_access(self, spec: dict[str, Any]) -> tuple[bool, bool, str]:
        """(allowed, denied, reason) of a SubjectAccessReview with this spec."""
        out = await self.client.create(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        status = out.get("status") or {}
        return bool(status.get("allowed")), bool(status.get("denied")), str(status.get("reason") or "")
