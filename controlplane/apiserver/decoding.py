"""Request bodies (JSON, YAML, protobuf) to plain JSON values, refusing what upstream's decoders refuse
with a 400 (never letting it reach the code behind as something that fails there):

- JSON: no NaN/Infinity literals, no numbers beyond float64, valid UTF-8; a lone UTF-16 surrogate
  escape becomes U+FFFD, as Go decodes it;
- YAML as sigs.k8s.io/yaml converts it to JSON: timestamps stay strings, keys become strings, whole
  floats become integers, anchors may not multiply the document (upstream: "excessive aliasing");
- nesting: upstream's decoders stop at 10 000 levels; CPython's recursion would not survive that, so
  bodies nested deeper than MAX_DEPTH (100; no Kubernetes type comes near it) get upstream's answer,
  a 400 saying the depth was exceeded.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

from controlplane.apiserver import errors, protobufhttp

# Upstream's MaxRequestBodyBytes: twice etcd's 1.5 MiB request limit, as a JSON body is larger than the
# object it becomes. A body within it whose object the store refuses as too large gets the store's answer.
MAX_BODY = 3 * 1024 * 1024
MAX_DEPTH = 100


class _Loader(yaml.SafeLoader):
    """YAML as sigs.k8s.io/yaml reads it into JSON: timestamps are strings."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _too_deep(container: Any, fmt: str) -> errors.ApiError:
    char = "{" if isinstance(container, dict) else "["
    if fmt == "yaml":
        return errors.bad_request(f"error converting YAML to JSON: yaml: exceeded max depth of {MAX_DEPTH}")
    return errors.bad_request(
        f"couldn't get version/kind; json parse error: invalid character '{char}' exceeded max depth"
    )


def check_depth(value: Any, fmt: str = "json") -> None:
    """At most MAX_DEPTH nested objects and arrays (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        if depth > MAX_DEPTH:
            raise _too_deep(node, fmt)
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))


def _clean_text(text: str) -> str:
    """Lone surrogates (from \\ud800-style escapes) become U+FFFD, as Go's decoder makes them."""
    if text.isascii():
        return text
    try:
        text.encode()
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return _clean_text(value)
    if isinstance(value, dict):
        return {_clean_text(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _json_constant(name: str) -> Any:
    raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")


def _json_float(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"json: cannot unmarshal number {text} into Go value of type float64")
    return number


def _json(body: bytes, unique: bool = False) -> Any:
    """The body's JSON value; `unique`: raise _Duplicate at an object naming a field twice."""
    try:
        value = json.loads(
            body,
            parse_constant=_json_constant,
            parse_float=_json_float,
            object_pairs_hook=_unique if unique else None,
        )
    except RecursionError:
        raise errors.bad_request(
            "couldn't get version/kind; json parse error: invalid character '[' exceeded max depth"
        ) from None
    except (ValueError, UnicodeDecodeError) as err:
        raise errors.bad_request(f"couldn't get version/kind; json parse error: {err}") from None
    if isinstance(value, dict | list) and body.count(b"{") + body.count(b"[") > MAX_DEPTH:
        check_depth(value)
    if b"\\u" in body:
        value = _clean(value)
    return value


class _Pairs(list):  # type: ignore[type-arg]
    """An object's members as written, duplicates kept (for duplicate_fields)."""


class _Duplicate(Exception):
    pass


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _Duplicate
    return obj


def decode_json(body: bytes) -> tuple[Any, list[str]]:
    """`decode` of a JSON body and its `duplicate_fields`, from one parse when it names each field once
    (nearly every body): not a parse to decode it and another to look for duplicates."""
    if not body.strip():
        raise errors.bad_request("the body of the request was empty")
    try:
        return _json(body, unique=True), []
    except _Duplicate:
        return _json(body), duplicate_fields(body)


def duplicate_fields(body: bytes) -> list[str]:
    """The paths of the fields a JSON body names twice in one object (`spec.replicas`,
    `spec.containers[0].name`), in document order, as upstream's strict decoder reports them."""
    try:
        # Nearly every body names each field once: one parse says so, without building paths.
        json.loads(body, object_pairs_hook=_unique)
        return []
    except _Duplicate:
        pass
    except (ValueError, UnicodeDecodeError, RecursionError):
        return []  # decode() already answered what cannot be parsed
    tree = json.loads(body, object_pairs_hook=_Pairs)
    out: list[str] = []
    stack: list[tuple[Any, str]] = [(tree, "")]
    while stack:
        node, path = stack.pop()
        children: list[tuple[Any, str]] = []
        if isinstance(node, _Pairs):
            seen: set[str] = set()
            for key, value in node:
                child = f"{path}.{key}" if path else key
                if key in seen:
                    out.append(child)
                seen.add(key)
                children.append((value, child))
        elif isinstance(node, list):
            children = [(v, f"{path}[{i}]") for i, v in enumerate(node)]
        stack.extend(reversed(children))
    return out


class _YamlToJson:
    """sigs.k8s.io/yaml's conversion, bounded: an alias may not blow the document up (billion laughs)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget

    def key(self, key: Any) -> str:
        if isinstance(key, str):
            return _clean_text(key)
        if isinstance(key, bool):
            return "true" if key else "false"
        if key is None:
            return "null"
        if isinstance(key, int | float):
            return str(self.value(key))
        raise errors.bad_request(f"error converting YAML to JSON: yaml: invalid map key: {key!r}")

    def value(self, value: Any, depth: int = 1) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise errors.bad_request(
                "error converting YAML to JSON: yaml: document contains excessive aliasing"
            )
        if isinstance(value, dict | list) and depth > MAX_DEPTH:
            raise _too_deep(value, "yaml")
        if isinstance(value, dict):
            return {self.key(k): self.value(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, depth + 1) for v in value]
        if isinstance(value, str):
            return _clean_text(value)
        if value is None or isinstance(value, bool | int):
            return value
        if isinstance(value, float):
            if math.isnan(value) or math.isinf(value):
                raise errors.bad_request(f"error converting YAML to JSON: json: unsupported value: {value}")
            # Go's JSON encoder prints a whole float64 without a fraction: 80.0 reaches the decoder as 80.
            return int(value) if value.is_integer() and abs(value) < 1e21 else value
        raise errors.bad_request(
            f"error converting YAML to JSON: yaml: unsupported value of type {type(value).__name__}"
        )


def _yaml(body: bytes) -> Any:
    try:
        value = yaml.load(body, Loader=_Loader)  # a SafeLoader without timestamps
    except RecursionError:
        raise errors.bad_request(
            f"error converting YAML to JSON: yaml: exceeded max depth of {MAX_DEPTH}"
        ) from None
    except (yaml.YAMLError, UnicodeDecodeError, ValueError, TypeError) as err:
        raise errors.bad_request(f"error converting YAML to JSON: {err}") from None
    try:
        return _YamlToJson(max(10_000, 20 * len(body))).value(value)
    except RecursionError:  # an alias that contains itself
        raise errors.bad_request(
            "error converting YAML to JSON: yaml: document contains excessive aliasing"
        ) from None


def decode(body: bytes, content_type: str) -> Any:
    """The JSON value in a request body."""
    if "protobuf" in content_type:
        return protobufhttp.decode_body(body)
    if not body.strip():
        raise errors.bad_request("the body of the request was empty")
    if "yaml" in content_type:
        return _yaml(body)
    return _json(body)
