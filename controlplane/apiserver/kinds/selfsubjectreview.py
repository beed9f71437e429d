"""authentication.k8s.io/v1 SelfSubjectReview: "who am I" for the caller (`kubectl auth whoami`);
create-only and never stored."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from controlplane.apiserver.kinds.base import Kind

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import RequestInfo, RestHandler


class SelfSubjectReview(Kind):
    group = "authentication.k8s.io"
    kind = "SelfSubjectReview"
    plural = "selfsubjectreviews"
    namespaced = False
    verbs = ("create",)
    stored = False
    schema = "V1SelfSubjectReview"

    async def create_virtual(
        self, rest: RestHandler, request: web.Request, info: RequestInfo
    ) -> web.StreamResponse:
        await rest.decode_body(request, info, self.kind, self.api_version, self.schema)
        user = rest.user(request)
        user_info: dict[str, Any] = {"username": user.name, "groups": list(user.groups)}
        if user.uid:
            user_info["uid"] = user.uid
        if user.extra:
            user_info["extra"] = user.extra_dict()
        return rest.json(
            {
                "kind": self.kind,
                "apiVersion": self.api_version,
                "metadata": {"creationTimestamp": None},
                "status": {"userInfo": user_info},
            },
            201,
        )


KIND = SelfSubjectReview()
