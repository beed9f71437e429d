"""The nginx text of a server's HTTPRoute matches, pure.

nginx picks a location by path alone, so each location the routes need (see `routematch.candidates`)
decides among its candidate matches with the rewrite module: the candidates are tested from the lowest
precedence up, each one whose conditions all hold (method, headers, query parameters; every `if` only
`set`s a variable, the use of `if` nginx documents as safe) overwrites `$gw_pick`, so the highest one
that holds is left; the request then goes by an internal rewrite to that match's target location
(`/.pykubelet-gateway/<n>`, internal, so no client reaches it), which applies the rule's filters and
proxies with the client's URI as sent (`$request_uri`), or the rewritten one, to the rule's upstream.
No candidate holding answers 404, as a request no route matches. A location whose first candidate
holds unconditionally (most routes: a path and a backend) does that match's work itself, with no chain
and no internal location: less for nginx to parse on every reload.

Redirects follow the API: the scheme and hostname given or the request's; the port given, else the
scheme's well-known port when a scheme is given, else the port the request came to (the listener's,
when the controller serves the listener's port), left out of the URL when it is the scheme's default.
ReplacePrefixMatch swaps the matched path elements for the replacement (`/prefix/one` replaced by `/one`
takes `/prefix/one/two` to `/one/two`, by `/` to `/two`).
"""

from __future__ import annotations

import re

from ingresscontroller import routematch
from ingresscontroller.model import Action, PathChange, RouteEntry, RouteMatch, Server
from ingresscontroller.nginxtext import PROXY_HEADERS, expand, literal, quote

TARGET_PREFIX = "/.pykubelet-gateway/"
MIRROR_PREFIX = "/.pykubelet-mirror/"
_FAIL = "{ set $gw_ok 0; }"


def _variable(header: str) -> str:
    return "$http_" + header.lower().replace("-", "_")


def _query(name: str, value: str) -> str:
    return quote("(?:^|&)" + re.escape(name) + "=" + value)


def _tests(match: RouteMatch) -> list[str]:
    """`if`s that clear `$gw_ok` when the request does not meet `match`'s conditions."""
    lines = []
    if match.path_regex:
        lines.append(f"if ($uri !~ {quote('^(?:' + match.path_regex + ')$')}) {_FAIL}")
    if match.method:
        lines.append(f"if ($request_method != {literal(match.method)}) {_FAIL}")
    for header in match.headers:
        variable = _variable(header.name)
        if header.regex:
            lines.append(f'if ({variable} = "") {_FAIL}')
            lines.append(f"if ({variable} !~ {quote(header.value)}) {_FAIL}")
        else:
            lines.append(f"if ({variable} != {literal(header.value)}) {_FAIL}")
    for param in match.query:
        if param.regex:
            lines += [
                'set $gw_query "";',
                f"if ($args !~ {_query(param.name, '')}) {_FAIL}",
                f"if ($args ~ {_query(param.name, '([^&]*)')}) {{ set $gw_query $1; }}",
                f"if ($gw_query !~ {quote(param.value)}) {_FAIL}",
            ]
        else:
            lines.append(f"if ($args !~ {_query(param.name, re.escape(param.value) + '(?:&|$)')}) {_FAIL}")
    return lines


def _head(exact: bool, path: str) -> str:
    if exact:
        return f"    location = {quote(path)} {{"
    return f"    location {quote(path if path.endswith('/') else path + '/')} {{"


def _dispatch(exact: bool, path: str, entries: list[RouteEntry], ids: dict[RouteEntry, int]) -> list[str]:
    chain: list[RouteEntry] = []
    for entry in entries:  # those below the first unconditional match can never be picked
        chain.append(entry)
        if not _tests(entry.match):
            break
    body = ['set $gw_pick "";']
    for entry in reversed(chain):
        tests = _tests(entry.match)
        if tests:
            body += ["set $gw_ok 1;", *tests, f"if ($gw_ok) {{ set $gw_pick {ids[entry]}; }}"]
        else:
            body.append(f"set $gw_pick {ids[entry]};")
    if _tests(chain[-1].match):
        body.append('if ($gw_pick = "") { return 404; }')
    body.append(f"rewrite ^ {TARGET_PREFIX}$gw_pick last;")
    return [_head(exact, path), *("        " + line for line in body), "    }"]


def _new_path(change: PathChange | None) -> list[str]:
    """Set `$gw_path` to the path to send or redirect to (the client's, as sent, without a change)."""
    if change is None:
        return ['set $gw_path "";', 'if ($request_uri ~ "^([^?]*)") { set $gw_path $1; }']
    if change.full:
        return [f"set $gw_path {literal(change.value)};"]
    prefix = "" if change.prefix == "/" else re.escape(change.prefix)
    replacement = change.value.rstrip("/")
    lines = [
        'set $gw_rest "";',
        f"if ($request_uri ~ {quote('^' + prefix + '(/[^?]*)')}) {{ set $gw_rest $1; }}",
        f'set $gw_path "{expand(replacement)}$gw_rest";',
    ]
    if not replacement:
        lines.append('if ($gw_path = "") { set $gw_path "/"; }')
    return lines


def _redirect(action: Action) -> list[str]:
    redirect = action.redirect
    assert redirect is not None
    scheme = literal(redirect.scheme) if redirect.scheme else "$scheme"
    if redirect.port:
        port = f'":{redirect.port}"'
    elif redirect.scheme:
        port = f'":{443 if redirect.scheme == "https" else 80}"'
    else:
        port = '":$server_port"'
    host = expand(redirect.hostname) if redirect.hostname else "$host"
    return [
        *_new_path(redirect.path),
        f"set $gw_scheme {scheme};",
        f"set $gw_port {port};",
        'set $gw_scheme_port "$gw_scheme$gw_port";',
        'if ($gw_scheme_port = "http:80") { set $gw_port ""; }',
        'if ($gw_scheme_port = "https:443") { set $gw_port ""; }',
        f'return {redirect.status} "$gw_scheme://{host}$gw_port$gw_path$is_args$args";',
    ]


def _request_headers(action: Action) -> list[str]:
    edit = action.request_headers
    if not (edit.set or edit.add or edit.remove or action.host):
        return []  # the server's proxy_set_header list applies
    lines: list[str] = []
    headers = {name.lower(): (name, value) for name, value in PROXY_HEADERS}
    if action.host:
        headers["host"] = ("Host", literal(action.host))
    for name, value in edit.set:
        headers[name.lower()] = (name, literal(value))
    for index, (name, value) in enumerate(edit.add):
        variable = f"$gw_add_{index}"
        lines += [
            f"set {variable} {literal(value)};",
            f'if ({_variable(name)}) {{ set {variable} "{_variable(name)},{expand(value)}"; }}',
        ]
        headers[name.lower()] = (name, variable)
    for name in edit.remove:
        headers[name.lower()] = (name, '""')
    return [*lines, *(f"proxy_set_header {quote(name)} {value};" for name, value in headers.values())]


def _response_headers(action: Action) -> list[str]:
    edit = action.response_headers
    lines = [f"proxy_hide_header {quote(name)};" for name in [*edit.remove, *(n for n, _ in edit.set)]]
    return lines + [
        f"add_header {quote(name)} {literal(value)} always;" for name, value in [*edit.set, *edit.add]
    ]


def _mirror(number: int, index: int) -> str:
    return f"{MIRROR_PREFIX}{number}/{index}"


def _mirror_locations(number: int, action: Action) -> list[str]:
    """The internal locations a match's mirrored copies go through (nginx's `mirror`: a subrequest per
    copy with the client's URI and body, its answer dropped)."""
    mirrors: list[str] = []
    for index, upstream in enumerate(action.mirrors):
        mirrors += [
            f"    location = {quote(_mirror(number, index))} {{",
            "        internal;",
            *("        " + line for line in _request_headers(action)),  # the copy as the backend gets it
            f"        proxy_pass http://{upstream}$request_uri;",
            "    }",
        ]
    return mirrors


def _target(number: int, action: Action) -> list[str]:
    """The internal location a match leads to."""
    if action.redirect is not None:
        body = _redirect(action)
    elif action.fixed:
        body = [f"return {action.fixed};"]
    else:
        if action.path is None:
            uri = "$request_uri"
            body = []
        else:
            uri = "$gw_path$is_args$args"
            body = _new_path(action.path)
        body += [
            *_request_headers(action),
            *_response_headers(action),
            f"proxy_pass http://{action.upstream}{uri};",
        ]
    copies = [f"mirror {quote(_mirror(number, index))};" for index in range(len(action.mirrors))]
    return [
        f"    location = {quote(TARGET_PREFIX + str(number))} {{",
        "        internal;",
        *("        " + line for line in [*copies, *body]),
        "    }",
    ]


def render_routes(server: Server) -> list[str]:
    """The server's locations for its HTTPRoute matches (paths an Ingress took on this host stay the
    Ingress's) and their targets. A location whose first candidate holds unconditionally (the common
    route: a path and a backend) does its target's work itself: no rewrite chain, no internal location,
    so nginx parses and compiles less for every such route."""
    ids: dict[RouteEntry, int] = {}
    for entry in server.routes:
        ids.setdefault(entry, len(ids))
    lines: list[str] = []
    dispatched: set[RouteEntry] = set()
    inlined: set[RouteEntry] = set()
    for (exact, path), entries in routematch.candidates(server.routes).items():
        if (exact, path) in server.locations or not entries:
            continue
        if not _tests(entries[0].match):
            target = _target(ids[entries[0]], entries[0].action)
            lines += [_head(exact, path), *target[2:]]  # its body (not `internal`) under this head
            inlined.add(entries[0])
            continue
        lines += _dispatch(exact, path, entries, ids)
        dispatched.update(entries)
    for entry, number in ids.items():
        if entry in dispatched:
            lines += _target(number, entry.action)
        if entry in dispatched or entry in inlined:
            lines += _mirror_locations(number, entry.action)
    return lines


def route_paths(server: Server) -> set[tuple[bool, str]]:
    """The locations `render_routes` writes for the server's matches."""
    return set(routematch.candidates(server.routes)) - set(server.locations)
