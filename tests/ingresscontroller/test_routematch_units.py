"""HTTPRoute matches read and ordered without nginx: the API's precedence (Exact, longest prefix,
method, header count, query count, then route age, name, rule order), the first condition of a name
kept, the matches each nginx location must weigh, and what is refused."""

from __future__ import annotations

from ingresscontroller import routematch
from ingresscontroller.model import Action, RouteEntry, RouteMatch


def _entry(match: RouteMatch, order: tuple[str, str, int, int] = ("t", "ns/r", 0, 0)) -> RouteEntry:
    return RouteEntry(match, order, Action(upstream="u"))


def test_precedence_follows_the_api_order() -> None:
    rule = {
        "matches": [
            {"path": {"type": "PathPrefix", "value": "/a"}, "queryParams": [{"name": "q", "value": "1"}]},
            {"path": {"type": "PathPrefix", "value": "/a"}, "headers": [{"name": "h", "value": "1"}]},
            {"path": {"type": "PathPrefix", "value": "/a"}, "method": "GET"},
            {"path": {"type": "PathPrefix", "value": "/a/b/"}},
            {"path": {"type": "Exact", "value": "/a"}},
        ]
    }
    entries = [_entry(m, ("t", "ns/r", 0, i)) for i, m in enumerate(routematch.matches(rule))]
    ranked = [e.order[3] for e in sorted(entries, key=routematch.precedence)]
    assert ranked == [4, 3, 2, 1, 0]
    assert entries[3].match.path == "/a/b"  # a trailing slash is ignored
    older, younger = (
        _entry(RouteMatch(False, "/"), ("2025", "z/r", 0, 0)),
        _entry(RouteMatch(False, "/"), ("2026", "a/r", 0, 0)),
    )
    assert sorted([younger, older], key=routematch.precedence) == [older, younger]


def test_first_condition_of_a_name_counts() -> None:
    (match,) = routematch.matches(
        {"matches": [{"headers": [{"name": "X-A", "value": "1"}, {"name": "x-a", "value": "2"}]}]}
    )
    assert [(c.name, c.value) for c in match.headers] == [("X-A", "1")]
    assert match.path == "/" and not match.exact  # no path: every request


def test_each_location_weighs_every_match_that_covers_it() -> None:
    root, deep, exact = (
        RouteMatch(False, "/"),
        RouteMatch(False, "/a/b", method="POST"),
        RouteMatch(True, "/a/b"),
    )
    found = routematch.candidates([_entry(root), _entry(deep), _entry(exact)])
    assert set(found) == {(False, "/"), (False, "/a/b"), (True, "/a/b")}
    assert [e.match for e in found[(True, "/a/b")]] == [exact, deep, root]
    assert [e.match for e in found[(False, "/a/b")]] == [deep, root]
    assert [e.match for e in found[(False, "/")]] == [root]
    assert routematch.candidates([_entry(RouteMatch(False, "/ab"))]).keys() == {(False, "/ab"), (True, "/ab")}


def test_unsupported_rules_are_named() -> None:
    assert routematch.unsupported({"filters": [{"type": "ExtensionRef"}]}) == (
        "filter type ExtensionRef is not supported"
    )
    assert routematch.unsupported({"filters": [{"type": "RequestMirror"}, {"type": "RequestMirror"}]}) == ""
    assert "RegularExpression" not in routematch.unsupported(
        {"matches": [{"headers": [{"name": "a", "type": "RegularExpression", "value": "x"}]}]}
    )
    assert (
        routematch.unsupported({"matches": [{"path": {"type": "RegularExpression", "value": "/.*"}}]}) == ""
    )
    assert "invalid regular expression" in routematch.unsupported(
        {"matches": [{"path": {"type": "RegularExpression", "value": "/v[0-9"}}]}
    )
    assert routematch.unsupported({"backendRefs": [{"name": "s", "filters": [{"type": "URLRewrite"}]}]})
    assert (
        routematch.unsupported({"filters": [{"type": "URLRewrite"}, {"type": "RequestHeaderModifier"}]}) == ""
    )


def test_redirect_and_rewrite_actions() -> None:
    rule = {
        "filters": [
            {
                "type": "RequestRedirect",
                "requestRedirect": {
                    "scheme": "https",
                    "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/x"},
                },
            }
        ],
        "matches": [{"path": {"type": "PathPrefix", "value": "/old/"}}],
    }
    (match,) = routematch.matches(rule)
    action = routematch.action(rule, match, "")
    assert action.fixed == 0 and action.redirect is not None and action.redirect.status == 302
    assert action.redirect.path is not None and action.redirect.path.prefix == "/old"
    assert routematch.action({}, match, "").fixed == 500  # no usable backend, no redirect


def test_what_nginx_would_refuse_is_refused_for_the_route_alone() -> None:
    bad_regex = {"matches": [{"headers": [{"name": "a", "type": "RegularExpression", "value": "(unclosed"}]}]}
    assert routematch.unsupported(bad_regex).startswith("invalid regular expression '(unclosed'")
    injected = {
        "filters": [
            {
                "type": "RequestHeaderModifier",
                "requestHeaderModifier": {"set": [{"name": "x", "value": "a\r\nEvil: 1"}]},
            }
        ]
    }
    assert "control character" in routematch.unsupported(injected)


def test_a_regular_expression_path_ranks_after_longer_prefixes_and_before_the_catch_all() -> None:
    (regex,) = routematch.matches(
        {"matches": [{"path": {"type": "RegularExpression", "value": "/v[0-9]+/.*"}}]}
    )
    assert (regex.exact, regex.path, regex.path_regex) == (False, "/", "/v[0-9]+/.*")
    root, prefix = RouteMatch(False, "/"), RouteMatch(False, "/v1")
    found = routematch.candidates([_entry(root), _entry(regex), _entry(prefix)])
    assert [e.match for e in found[(False, "/")]] == [regex, root]
    assert [e.match for e in found[(False, "/v1")]] == [prefix, regex, root]
