"""A request under an aggregated group/version as authorization sees it (upstream's RequestInfoFactory,
k8s.io/apiserver/pkg/endpoints/request/requestinfo.go), without knowing the kinds it names: the
aggregated server's resources are its own business, the verb and the path are enough."""

from __future__ import annotations

from collections.abc import Mapping

from controlplane.apiserver.authn import UserInfo
from controlplane.apiserver.authz import Attributes, exact_field

_NAMESPACE_SUBRESOURCES = {"status", "finalize"}


def attributes(
    user: UserInfo, method: str, group: str, version: str, tail: str, query: Mapping[str, str], path: str
) -> Attributes:
    parts = [p for p in tail.split("/") if p]
    watch = bool(parts) and parts[0] == "watch"
    if watch:
        parts = parts[1:]
    namespace = ""
    if parts and parts[0] == "namespaces":
        if len(parts) > 1:
            namespace = parts[1]
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0] if parts else ""
    name = parts[1] if len(parts) > 1 else ""
    subresource = parts[2] if len(parts) > 2 else ""
    watch = watch or str(query.get("watch", "")).lower() in ("1", "true")
    selector = ""
    if name:
        verb = {
            "GET": "get",
            "HEAD": "get",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete",
            "POST": "create",
        }
        verb_name = "watch" if watch and method == "GET" else verb.get(method, method.lower())
    else:
        verb_name = {"GET": "list", "HEAD": "list", "POST": "create", "DELETE": "deletecollection"}.get(
            method, method.lower()
        )
        if method == "GET" and watch:
            verb_name = "watch"
        if verb_name in ("list", "watch"):
            selector = query.get("fieldSelector", "")
            name = exact_field(selector, "metadata.name") or "" if selector else ""
    return Attributes(
        user, verb_name, group, version, resource, subresource, namespace, name, path, field_selector=selector
    )
