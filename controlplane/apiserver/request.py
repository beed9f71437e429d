"""Parsing a request path into what it addresses (upstream's RequestInfo), and the query parameters
every verb shares; bodies are decoded by decoding.py (formats) and typed.py (types)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from controlplane.apiserver import decoding, errors
from controlplane.apiserver.decoding import MAX_BODY
from controlplane.apiserver.kinds import BUILT_IN
from controlplane.apiserver.kinds import namespace as namespaces
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.kindtable import KindTable
from controlplane.apiserver.params import bool_param, int_param

RESERVED_SUBRESOURCES = {
    "log",
    "exec",
    "attach",
    "portforward",
    "proxy",
    "eviction",
    "ephemeralcontainers",
    "token",
}


@dataclass
class RequestInfo:
    resource: Kind
    namespace: str
    name: str
    subresource: str
    watch_path: bool  # legacy /watch/ prefix
    subpath: str = ""  # what follows .../{name}/proxy/ (the proxied path, its trailing slash kept)


def parse_path(group: str, version: str, tail: str, table: KindTable | None = None) -> RequestInfo:
    """What `tail` addresses among the kinds of `table` (the server's; by default the built-in kinds)."""
    parts = [p for p in tail.split("/") if p]
    watch = False
    if parts and parts[0] == "watch":
        watch = True
        parts = parts[1:]
    namespace = ""
    if len(parts) >= 3 and parts[0] == "namespaces" and parts[2] not in _namespace_subresources():
        namespace = parts[1]
        parts = parts[2:]
    subpath = ""
    if len(parts) >= 3 and parts[2] == "proxy":
        # .../{name}/proxy/{path}: the rest goes to the proxied server as it came (trailing slash kept).
        consumed = (1 if watch else 0) + (2 if namespace else 0) + 3
        segments = tail.lstrip("/").split("/")
        subpath = "/".join(segments[consumed:])
        parts = parts[:3]
    if not parts or len(parts) > 3:
        raise not_found()
    res = (table or _built_in()).by_path(group, version, parts[0])
    if res is None or (namespace and not res.namespaced):
        raise not_found()
    name = parts[1] if len(parts) > 1 else ""
    sub = parts[2] if len(parts) > 2 else ""
    if sub and res.subresource(sub) is None:
        raise not_found()
    return RequestInfo(res, namespace, name, sub, watch, subpath)


@cache
def _namespace_subresources() -> frozenset[str]:
    """/namespaces/{name}/status is the namespace's subresource, /namespaces/{ns}/pods a collection in it."""
    return frozenset(s.name for s in namespaces.KIND.subresources)


@cache
def _built_in() -> KindTable:
    return KindTable(BUILT_IN)


def not_found() -> errors.ApiError:
    return errors.ApiError(404, "NotFound", "the server could not find the requested resource", {})


def decode(body: bytes, content_type: str) -> Any:
    return decoding.decode(body, content_type)


__all__ = ["MAX_BODY", "RequestInfo", "bool_param", "decode", "int_param", "parse_path"]
