"""authorization.k8s.io/v1 SubjectAccessReview: "may this user do this?", asked by the kubelet API's
Webhook authorization and other delegating servers (upstream's pkg/registry/authorization/
subjectaccessreview). Create-only and never stored; the answer is this server's authorizer chain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from controlplane.apiserver import errors
from controlplane.apiserver.authn import UserInfo
from controlplane.apiserver.authz import Attributes
from controlplane.apiserver.kinds.base import Kind

if TYPE_CHECKING:
    from controlplane.apiserver.handlers import RestHandler
    from controlplane.apiserver.request import RequestInfo

Obj = dict[str, Any]


def attributes(spec: Obj) -> Attributes:
    """The review's subject and request as the authorizers see a request (a 422 as upstream's validation)."""
    problems = []
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if (resource is None) == (non_resource is None):
        problems.append(errors.invalid("spec.resourceAttributes", resource or None,
                                       "exactly one of nonResourceAttributes or resourceAttributes must be specified"))
    if not spec.get("user") and not spec.get("groups"):
        problems.append(errors.invalid("spec.user", "", "at least one of user or group must be specified"))
    if problems:
        raise errors.invalid_object("SubjectAccessReview", "authorization.k8s.io", "", problems)
    extra = tuple(sorted((k, tuple(v or ())) for k, v in (spec.get("extra") or {}).items()))
    user = UserInfo(spec.get("user") or "", spec.get("uid") or "", tuple(spec.get("groups") or ()), extra)
    if resource is not None:
        return Attributes(user, resource.get("verb", ""), resource.get("group", ""), resource.get("version", ""),
                          resource.get("resource", ""), resource.get("subresource", ""), resource.get("namespace", ""),
                          resource.get("name", ""))
    return Attributes(user, non_resource.get("verb", ""), path=non_resource.get("path", ""), resource_request=False)


class SubjectAccessReview(Kind):
    group = "authorization.k8s.io"
    kind = "SubjectAccessReview"
    plural = "subjectaccessreviews"
    namespaced = False
    verbs = ("create",)
    stored = False
    schema = "V1SubjectAccessReview"

    async def create_virtual(self, rest: RestHandler, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        body, _ = await rest.decode_body(request, info, self.kind, self.api_version, self.schema)
        spec = body.get("spec") or {}
        decision = rest.authorizer.authorize(attributes(spec))
        status: Obj = {"allowed": decision.allowed}
        if decision.reason:
            status["reason"] = decision.reason
        meta = {**(body.get("metadata") or {}), "creationTimestamp": None}
        return rest.json({"kind": self.kind, "apiVersion": self.api_version, "metadata": meta, "spec": spec,
                          "status": status}, 201)


KIND = SubjectAccessReview()
