"""Parsing a request path into what it addresses (upstream's RequestInfo), and decoding bodies."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from controlplane.apiserver import errors, protobuf
from controlplane.apiserver.resources import Resource, by_path

MAX_BODY = 3 * 1024 * 1024
MAX_OBJECT = 1536 * 1024  # 1.5 MiB, etcd's default request limit upstream
RESERVED_SUBRESOURCES = {"log", "exec", "attach", "portforward", "proxy", "eviction", "ephemeralcontainers", "token"}


@dataclass
class RequestInfo:
    resource: Resource
    namespace: str
    name: str
    subresource: str
    watch_path: bool  # legacy /watch/ prefix


def parse_path(group: str, version: str, tail: str) -> RequestInfo:
    parts = [p for p in tail.split("/") if p]
    watch = False
    if parts and parts[0] == "watch":
        watch = True
        parts = parts[1:]
    namespace = ""
    if len(parts) >= 3 and parts[0] == "namespaces" and parts[2] not in ("status", "finalize"):
        namespace = parts[1]
        parts = parts[2:]
    if not parts or len(parts) > 3:
        raise _not_found()
    res = by_path(group, version, parts[0])
    if res is None:
        raise _not_found()
    if namespace and not res.namespaced:
        raise _not_found()
    name = parts[1] if len(parts) > 1 else ""
    sub = parts[2] if len(parts) > 2 else ""
    if sub and sub not in res.subresources:
        raise _not_found()
    return RequestInfo(res, namespace, name, sub, watch)


def _not_found() -> errors.ApiError:
    return errors.ApiError(404, "NotFound", "the server could not find the requested resource", {})


def decode(body: bytes, content_type: str) -> Any:
    if len(body) > MAX_OBJECT:
        raise errors.ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_OBJECT}")
    if "protobuf" in content_type:
        return protobuf.decode(body)
    if not body.strip():
        raise errors.bad_request("the body of the request was empty")
    if "yaml" in content_type:
        try:
            return yaml.safe_load(body)
        except yaml.YAMLError as err:
            raise errors.bad_request(f"error converting YAML to JSON: {err}") from None
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise errors.bad_request(f"couldn't get version/kind; json parse error: {err}") from None


def bool_param(query: Any, name: str) -> bool:
    return str(query.get(name, "")).lower() in ("1", "true")
