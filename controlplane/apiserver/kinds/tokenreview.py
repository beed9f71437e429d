"""authentication.k8s.io/v1 TokenReview: "who is this bearer token?", asked by the kubelet API and
other delegating servers (upstream's pkg/registry/authentication/tokenreview). Create-only and never
stored; the answer is the server's own bearer-token authentication (the static tokens and the
service-account tokens) for the audiences asked (default: the API server's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from controlplane.apiserver import errors
from controlplane.apiserver.kinds.base import Kind

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import RequestInfo, RestHandler


class TokenReview(Kind):
    group = "authentication.k8s.io"
    kind = "TokenReview"
    plural = "tokenreviews"
    namespaced = False
    verbs = ("create",)
    stored = False
    schema = "V1TokenReview"

    async def create_virtual(
        self, rest: RestHandler, request: web.Request, info: RequestInfo
    ) -> web.StreamResponse:
        body, _ = await rest.decode_body(request, info, self.kind, self.api_version, self.schema)
        spec = body.get("spec") or {}
        token = spec.get("token") or ""
        if not token:
            raise errors.bad_request("token is required for TokenReview in authentication")
        status: dict[str, Any] = {"user": {}}
        authenticator = rest.authenticator
        if authenticator is not None:
            result = await authenticator.authenticate_token_async(token, tuple(spec.get("audiences") or ()))
            status["authenticated"] = result.user is not None
            if result.user is not None:
                user = result.user
                status["user"] = {
                    "username": user.name,
                    "uid": user.uid,
                    "groups": list(user.groups),
                    "extra": user.extra_dict(),
                }
                status["audiences"] = list(result.audiences)
            elif result.error:
                status["error"] = result.error
        meta = {**(body.get("metadata") or {}), "creationTimestamp": None}
        return rest.json(
            {
                "kind": self.kind,
                "apiVersion": self.api_version,
                "metadata": meta,
                "spec": spec,
                "status": status,
            },
            201,
        )


KIND = TokenReview()
