"""What the audit policy judges a request by, read from its method, path and query alone.

Upstream's RequestInfoFactory is syntactic too: the policy is evaluated (and the RequestReceived event
written) before the REST handler has looked the resource up, so this must not need the registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controlplane.apiserver.authn import UserInfo
from controlplane.apiserver.authz import exact_field

_METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
_NAMESPACE_SUBRESOURCES = {"status", "finalize"}
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
# upstream's BasicLongRunningRequestCheck as kube-apiserver configures it.
_LONG_RUNNING_VERBS = {"watch", "proxy"}
_LONG_RUNNING_SUBRESOURCES = {"attach", "exec", "proxy", "log", "portforward"}


@dataclass
class Attributes:
    verb: str
    path: str
    resource_request: bool = False
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    user: UserInfo | None = None

    @property
    def long_running(self) -> bool:
        return self.verb in _LONG_RUNNING_VERBS or (
            self.resource_request and self.subresource in _LONG_RUNNING_SUBRESOURCES
        )


def request_attributes(method: str, path: str, query: Any) -> Attributes:
    """upstream's NewRequestInfo: /api/v1/... and /apis/GROUP/VERSION/... are resource requests (the
    `watch` prefix, `namespaces/NS/...`, then resource, name, subresource); anything else is a
    non-resource request whose verb is the lower-cased method."""
    parts = [p for p in path.strip("/").split("/")]
    non_resource = Attributes(method.lower(), path)
    if not parts or parts[0] not in ("api", "apis"):
        return non_resource
    if parts[0] == "api":
        if len(parts) < 3:
            return non_resource
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) < 4:
            return non_resource
        group, version, rest = parts[1], parts[2], parts[3:]
    info = Attributes(_METHOD_VERBS.get(method, ""), path, True, group, version)
    if rest[0] == "watch":
        info.verb, rest = "watch", rest[1:]
        if not rest:
            return info
    if rest[0] == "namespaces":
        if len(rest) > 1:
            info.namespace = rest[1]
            if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
                rest = rest[2:]
    info.resource = rest[0]
    if len(rest) > 1:
        info.name = rest[1]
    if len(rest) > 2:
        info.subresource = rest[2]
    if not info.name and info.verb == "get":
        info.verb = "watch" if query.get("watch", "") in _TRUE else "list"
        selector = query.get("fieldSelector", "")
        if selector:
            info.name = exact_field(selector, "metadata.name") or ""
    if not info.name and info.verb == "delete":
        info.verb = "deletecollection"
    return info
