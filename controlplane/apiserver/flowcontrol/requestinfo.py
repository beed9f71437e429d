"""What priority and fairness needs to know of a request before any handler parses it (upstream's
RequestInfoFactory, k8s.io/apiserver/pkg/endpoints/request/requestinfo.go): resource or not, the verb,
API group, resource, subresource, namespace, and whether it is long-running. Pure, and cheap: a path
split and a few comparisons, since it runs for every request."""

from __future__ import annotations

from dataclasses import dataclass

_METHOD_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}
# Subresources that stream (upstream's BasicLongRunningRequestCheck: verbs watch and proxy, and these).
LONG_RUNNING_SUBRESOURCES = frozenset({"attach", "exec", "proxy", "log", "portforward"})
# What follows /namespaces/{name}/ that belongs to the namespace itself, not a resource in it.
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


@dataclass(slots=True)
class RequestInfo:
    resource_request: bool
    verb: str
    path: str
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def long_running(self) -> bool:
        return self.verb in ("watch", "proxy") or self.subresource in LONG_RUNNING_SUBRESOURCES

    @property
    def mutating(self) -> bool:
        return self.verb not in ("get", "list", "watch", "proxy")


def parse(method: str, path: str, watch_param: str | None) -> RequestInfo:
    """`watch_param` is the `watch` query parameter (None when absent)."""
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return RequestInfo(False, method.lower(), path)
    verb = ""
    if rest[0] == "watch":
        verb, rest = "watch", rest[1:]
    elif rest[0] == "proxy":
        verb, rest = "proxy", rest[1:]
    namespace = ""
    if len(rest) >= 2 and rest[0] == "namespaces":
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if not verb:
        if method in ("GET", "HEAD"):
            verb = "get" if name else "list"
            # As the REST handler reads it (a watch of one object by name too, which it streams).
            if watch_param is not None and watch_param.lower() in ("true", "1"):
                verb = "watch"
        elif method == "DELETE":
            verb = "delete" if name else "deletecollection"
        else:
            verb = _METHOD_VERBS.get(method, method.lower())
    return RequestInfo(True, verb, path, group, resource, subresource, namespace, name)
