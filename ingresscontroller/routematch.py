"""HTTPRoute rules read into what nginx can serve, and their order, without I/O.

Each match of a rule becomes a `RouteMatch` (path, method, header and query parameter conditions; of
several conditions on one name only the first counts, as the API says) and the rule's filters an
`Action` (RequestHeaderModifier, ResponseHeaderModifier, RequestRedirect, URLRewrite, RequestMirror).
Other filter types and backendRef filters are not served (`unsupported` names them).

A RegularExpression path (implementation-specific in the API) is a PCRE the whole request path
(`$uri`: decoded, normalized) must match, tested as a condition at the `/` location; it ranks after
Exact and every longer PathPrefix and before the PathPrefix `/` (a regex is more specific than the
catch-all), then by method, headers and query parameters as the others.

Precedence, as the HTTPRoute API orders it across every rule of every route on a host: an Exact path
first, then the longest PathPrefix (a RegularExpression path as said above), then a method match, then the most header matches, then the most
query parameter matches; ties go to the oldest route, then the first by namespace/name, then the first
rule and match in the route's order. `candidates` hands each nginx location (an exact path, or a prefix
served by path elements) every match that can apply to it in that order, so a request a longer
prefix's header match refuses still reaches a shorter prefix's rule.
"""

from __future__ import annotations

import re
from typing import Any

from ingresscontroller.model import (
    Action,
    Condition,
    HeaderEdit,
    PathChange,
    Redirect,
    RouteEntry,
    RouteMatch,
    normalize,
)

Obj = dict[str, Any]

SUPPORTED_FILTERS = (
    "RequestHeaderModifier",
    "ResponseHeaderModifier",
    "RequestRedirect",
    "URLRewrite",
    "RequestMirror",
)
PATH_REGEX = "RegularExpression"
# Header names nginx can read as `$http_<name>` (a name with other token characters is refused).
_HEADER_NAME = re.compile(r"^[A-Za-z0-9-]+$")


def _values(rule: Obj) -> list[str]:
    """Every user string the rule puts into nginx's configuration."""
    found = []
    for match in rule.get("matches") or []:
        found.append((match.get("path") or {}).get("value") or "")
        found += [
            c.get("value") or "" for c in [*(match.get("headers") or []), *(match.get("queryParams") or [])]
        ]
        found += [c.get("name") or "" for c in match.get("queryParams") or []]
    for item in rule.get("filters") or []:
        for spec in item.values():
            if isinstance(spec, dict):
                for key in ("set", "add"):
                    found += [h.get("value") or "" for h in spec.get(key) or []]
    return found


def _bad_regex(rule: Obj) -> str:
    for match in rule.get("matches") or []:
        path = match.get("path") or {}
        for condition in [*(match.get("headers") or []), *(match.get("queryParams") or []), path]:
            if condition.get("type") == "RegularExpression":
                try:
                    re.compile(condition.get("value") or "")
                except re.error as err:
                    return f"invalid regular expression {condition.get('value')!r}: {err}"
    return ""


def unsupported(rule: Obj) -> str:
    """Why this rule cannot be served as written ("" when it can). What nginx would refuse is refused
    here, for this route alone: a regular expression that does not compile, a control character."""
    for item in rule.get("filters") or []:
        if item.get("type") not in SUPPORTED_FILTERS:
            return f"filter type {item.get('type')} is not supported"
    if any(ord(c) < 0x20 or c == "\x7f" for value in _values(rule) for c in value):
        return "a header or query parameter value holds a control character"
    if why := _bad_regex(rule):
        return why
    if any(ref.get("filters") for ref in rule.get("backendRefs") or []):
        return "backendRef filters are not supported"
    for match in rule.get("matches") or []:
        if (match.get("path") or {}).get("type", "PathPrefix") not in ("Exact", "PathPrefix", PATH_REGEX):
            return f"path match type {(match.get('path') or {}).get('type')} is not supported"
        for header in match.get("headers") or []:
            if not _HEADER_NAME.match(header.get("name") or ""):
                return f"header name {header.get('name')!r} is not supported"
    return ""


def _conditions(items: list[Obj], fold: bool) -> tuple[Condition, ...]:
    """The first condition of each name (header names compared without case)."""
    seen: set[str] = set()
    kept = []
    for item in items:
        name = item.get("name") or ""
        key = name.lower() if fold else name
        if key in seen:
            continue
        seen.add(key)
        kept.append(Condition(name, item.get("type") == "RegularExpression", item.get("value") or ""))
    return tuple(kept)


def matches(rule: Obj) -> list[RouteMatch]:
    """The rule's matches (none: every request, as a PathPrefix `/`)."""
    found = []
    for match in rule.get("matches") or [{}]:
        path = match.get("path") or {}
        regex = (path.get("value") or "") if path.get("type") == PATH_REGEX else ""
        exact, where = normalize(
            "/" if regex else path.get("value") or "/", "Exact" if path.get("type") == "Exact" else "Prefix"
        )
        found.append(
            RouteMatch(
                exact,
                where,
                match.get("method") or "",
                _conditions(match.get("headers") or [], fold=True),
                _conditions(match.get("queryParams") or [], fold=False),
                regex,
            )
        )
    return found


def _header_edit(spec: Obj | None) -> HeaderEdit:
    spec = spec or {}
    return HeaderEdit(
        set=tuple((h["name"], h.get("value") or "") for h in spec.get("set") or []),
        add=tuple((h["name"], h.get("value") or "") for h in spec.get("add") or []),
        remove=tuple(spec.get("remove") or []),
    )


def _path_change(spec: Obj | None, match: RouteMatch) -> PathChange | None:
    if not spec:
        return None
    if spec.get("type") == "ReplaceFullPath":
        return PathChange(True, spec.get("replaceFullPath") or "/")
    return PathChange(False, spec.get("replacePrefixMatch") or "/", match.path)


def action(rule: Obj, match: RouteMatch, upstream: str, mirrors: tuple[str, ...] = ()) -> Action:
    """What the rule does for a request `match` took; `upstream` "" when the rule has no usable backend,
    `mirrors` the upstreams its RequestMirror filters copy the request to."""
    found: dict[str, Obj] = {}
    for item in rule.get("filters") or []:
        found.setdefault(item.get("type") or "", item)
    redirect = None
    if "RequestRedirect" in found:
        spec = found["RequestRedirect"].get("requestRedirect") or {}
        redirect = Redirect(
            scheme=spec.get("scheme") or "",
            hostname=spec.get("hostname") or "",
            port=int(spec.get("port") or 0),
            path=_path_change(spec.get("path"), match),
            status=int(spec.get("statusCode") or 302),
        )
    rewrite = (found.get("URLRewrite") or {}).get("urlRewrite") or {}
    return Action(
        upstream=upstream,
        fixed=0 if upstream or redirect else 500,
        request_headers=_header_edit((found.get("RequestHeaderModifier") or {}).get("requestHeaderModifier")),
        response_headers=_header_edit(
            (found.get("ResponseHeaderModifier") or {}).get("responseHeaderModifier")
        ),
        redirect=redirect,
        host=rewrite.get("hostname") or "",
        path=_path_change(rewrite.get("path"), match),
        mirrors=mirrors if redirect is None else (),
    )


def precedence(entry: RouteEntry) -> tuple[Any, ...]:
    """Sorts highest precedence first."""
    match = entry.match
    return (
        not match.exact,
        -len(match.path),
        not match.path_regex,
        not match.method,
        -len(match.headers),
        -len(match.query),
        entry.order,
    )


def _covers(match: RouteMatch, exact: bool, path: str) -> bool:
    """Whether `match`'s path takes every request nginx's location (exact, path) takes."""
    if match.exact:
        return exact and match.path == path
    return match.path == "/" or path == match.path or path.startswith(match.path + "/")


def candidates(entries: list[RouteEntry]) -> dict[tuple[bool, str], list[RouteEntry]]:
    """Each nginx location the entries need (a prefix `/p` also needs `= /p`, which `location /p/` does
    not take) with the entries that apply there, highest precedence first."""
    where: set[tuple[bool, str]] = set()
    for entry in entries:
        where.add((entry.match.exact, entry.match.path))
        if not entry.match.exact and entry.match.path != "/":
            where.add((True, entry.match.path))
    ordered = sorted(entries, key=precedence)
    return {
        location: [e for e in ordered if _covers(e.match, *location)]
        for location in sorted(where, key=lambda loc: (loc[1], loc[0]))
    }
