"""authorization.k8s.io/v1 SubjectAccessReview, SelfSubjectAccessReview and LocalSubjectAccessReview:
"may this user do this?" answered by the server's own authorizer chain (`kubectl auth can-i` posts a
SelfSubjectAccessReview). Create-only and never stored; 201 with the review and its status (allowed,
denied, reason), as upstream. Validation is upstream's (exactly one of resourceAttributes and
nonResourceAttributes; a SubjectAccessReview names a user or a group; a LocalSubjectAccessReview's
resourceAttributes.namespace is the request's namespace).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from controlplane.apiserver import errors
from controlplane.apiserver.authz import Attributes
from controlplane.apiserver.errors import FieldError, invalid
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.userinfo import UserInfo

if TYPE_CHECKING:
    from aiohttp import web

    from controlplane.apiserver.kinds.ports import RequestInfo, RestHandler

Obj = dict[str, Any]
GROUP = "authorization.k8s.io"


def _go_non_resource(value: Obj | None) -> str:
    if value is None:
        return "null"
    return (
        f'authorization.NonResourceAttributes{{Path:"{value.get("path", "")}", '
        f'Verb:"{value.get("verb", "")}"}}'
    )


def _both_or_neither(spec: Obj) -> list[FieldError]:
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if resource is not None and non_resource is not None:
        return [
            FieldError(
                "FieldValueInvalid",
                "spec.nonResourceAttributes",
                f"Invalid value: {_go_non_resource(non_resource)}: cannot be specified in combination "
                "with resourceAttributes",
            )
        ]
    if resource is None and non_resource is None:
        return [
            FieldError(
                "FieldValueInvalid",
                "spec.resourceAttributes",
                "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified",
            )
        ]
    return []


def _empty_meta(meta: Any, allowed: tuple[str, ...] = ()) -> bool:
    """ObjectMeta equal to its zero value (managedFields and `allowed` aside)."""
    if not isinstance(meta, dict):
        return True
    return all(v in (None, "", [], {}) for k, v in meta.items() if k not in ("managedFields", *allowed))


def attributes(user: UserInfo, spec: Obj) -> Attributes:
    """AuthorizationAttributesFrom: the request a review describes (version "" means every version)."""
    resource = spec.get("resourceAttributes")
    if resource is not None:
        return Attributes(
            user,
            resource.get("verb") or "",
            resource.get("group") or "",
            resource.get("version") or "*",
            resource.get("resource") or "",
            resource.get("subresource") or "",
            resource.get("namespace") or "",
            resource.get("name") or "",
        )
    non_resource = spec.get("nonResourceAttributes") or {}
    return Attributes(
        user, non_resource.get("verb") or "", path=non_resource.get("path") or "", resource_request=False
    )


class AccessReview(Kind):
    """The three reviews differ in whose access they judge and what they validate."""

    group = GROUP
    namespaced = False
    verbs = ("create",)
    stored = False
    self_review: ClassVar[bool] = False

    def problems(self, review: Obj, info: RequestInfo) -> list[FieldError]:
        spec = review.get("spec") or {}
        out = _both_or_neither(spec)
        if not self.self_review and not spec.get("user") and not spec.get("groups"):
            out.append(
                invalid(
                    "spec.user", spec.get("user") or "", "at least one of user or group must be specified"
                )
            )
        if not _empty_meta(review.get("metadata")):
            out.append(FieldError("FieldValueInvalid", "metadata", 'Invalid value: "": must be empty'))
        return out

    def subject(self, rest: RestHandler, request: web.Request, spec: Obj) -> UserInfo:
        if self.self_review:
            return rest.user(request)
        extra = tuple(
            (k, tuple(v)) for k, v in sorted((spec.get("extra") or {}).items()) if isinstance(v, list)
        )
        return UserInfo(spec.get("user") or "", spec.get("uid") or "", tuple(spec.get("groups") or ()), extra)

    async def create_virtual(
        self, rest: RestHandler, request: web.Request, info: RequestInfo
    ) -> web.StreamResponse:
        review, _ = await rest.decode_body(request, info, self.kind, self.api_version, self.schema)
        problems = self.problems(review, info)
        if problems:
            raise errors.invalid_object(self.kind, self.group, "", problems)
        spec = review.setdefault("spec", {})
        decision = rest.authorizer.authorize(attributes(self.subject(rest, request, spec), spec))
        status: Obj = {"allowed": decision.allowed}
        if decision.opinion and not decision.allowed:
            status["denied"] = True
        if decision.reason:
            status["reason"] = decision.reason
        review["status"] = status
        review.setdefault("metadata", {})["creationTimestamp"] = None
        return rest.json(review, 201)


class SubjectAccessReview(AccessReview):
    kind = "SubjectAccessReview"
    plural = "subjectaccessreviews"
    schema = "V1SubjectAccessReview"


class SelfSubjectAccessReview(AccessReview):
    kind = "SelfSubjectAccessReview"
    plural = "selfsubjectaccessreviews"
    schema = "V1SelfSubjectAccessReview"
    self_review = True


class LocalSubjectAccessReview(AccessReview):
    kind = "LocalSubjectAccessReview"
    plural = "localsubjectaccessreviews"
    namespaced = True
    schema = "V1LocalSubjectAccessReview"

    def problems(self, review: Obj, info: RequestInfo) -> list[FieldError]:
        meta = review.setdefault("metadata", {})
        if meta.get("namespace") and meta["namespace"] != info.namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["namespace"] = info.namespace
        spec = review.get("spec") or {}
        out = _both_or_neither(spec)
        if not spec.get("user") and not spec.get("groups"):
            out.append(
                invalid(
                    "spec.user", spec.get("user") or "", "at least one of user or group must be specified"
                )
            )
        if not _empty_meta(meta, ("namespace",)):
            out.append(
                FieldError(
                    "FieldValueInvalid", "metadata", 'Invalid value: "": must be empty except for namespace'
                )
            )
        resource = spec.get("resourceAttributes")
        if resource is not None and (resource.get("namespace") or "") != info.namespace:
            out.append(
                invalid(
                    "spec.resourceAttributes.namespace",
                    resource.get("namespace") or "",
                    "must match metadata.namespace",
                )
            )
        if spec.get("nonResourceAttributes") is not None:
            out.append(
                FieldError(
                    "FieldValueInvalid",
                    "spec.nonResourceAttributes",
                    f"Invalid value: {_go_non_resource(spec['nonResourceAttributes'])}: disallowed on this "
                    "kind of request",
                )
            )
        return out


SAR, SSAR, LSAR = SubjectAccessReview(), SelfSubjectAccessReview(), LocalSubjectAccessReview()
# In upstream's discovery order.
KINDS = (LSAR, SSAR, SAR)

__all__ = ["KINDS", "LSAR", "SAR", "SSAR", "attributes"]
