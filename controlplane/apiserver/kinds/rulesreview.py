"""authorization.k8s.io/v1 SelfSubjectRulesReview: what the caller may do in a namespace, as the
authorizers can list it (`kubectl auth can-i --list`). Create-only, never stored. RBAC lists its rules;
the Node authorizer cannot, so for a node the answer is marked incomplete with upstream's error."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controlplane.apiserver import errors
from controlplane.apiserver.kinds.accessreview import GROUP
from controlplane.apiserver.kinds.base import Kind

if TYPE_CHECKING:
    from aiohttp import web

    from controlplane.apiserver.kinds.ports import RequestInfo, RestHandler

Obj = dict[str, Any]


def _resource_rule(
    verbs: tuple[str, ...], groups: tuple[str, ...], resources: tuple[str, ...], names: tuple[str, ...]
) -> Obj:
    rule: Obj = {"verbs": list(verbs)}
    for key, values in (("apiGroups", groups), ("resources", resources), ("resourceNames", names)):
        if values:
            rule[key] = list(values)
    return rule


class SelfSubjectRulesReview(Kind):
    group = GROUP
    kind = "SelfSubjectRulesReview"
    plural = "selfsubjectrulesreviews"
    namespaced = False
    verbs = ("create",)
    stored = False
    schema = "V1SelfSubjectRulesReview"

    async def create_virtual(
        self, rest: RestHandler, request: web.Request, info: RequestInfo
    ) -> web.StreamResponse:
        review, _ = await rest.decode_body(request, info, self.kind, self.api_version, self.schema)
        namespace = (review.get("spec") or {}).get("namespace") or ""
        if not namespace:
            raise errors.bad_request("no namespace on request")
        rules = rest.authorizer.rules_for(rest.user(request), namespace)
        status: Obj = {
            "resourceRules": [
                _resource_rule(r.verbs, r.api_groups, r.resources, r.resource_names)
                for r in rules.resource_rules
            ],
            "nonResourceRules": [
                {"verbs": list(r.verbs), "nonResourceURLs": list(r.non_resource_urls)}
                for r in rules.non_resource_rules
            ],
            "incomplete": rules.incomplete,
        }
        if rules.errors:
            status["evaluationError"] = (
                rules.errors[0] if len(rules.errors) == 1 else "[" + ", ".join(rules.errors) + "]"
            )
        return rest.json(
            {
                "kind": self.kind,
                "apiVersion": self.api_version,
                "metadata": {"creationTimestamp": None},
                "spec": {"namespace": namespace},
                "status": status,
            },
            201,
        )


KIND = SelfSubjectRulesReview()
