"""Label and field selectors read, printed and matched as upstream's labels and fields packages do."""

from __future__ import annotations

import pytest

from kubeclient.selectors import SelectorError, from_label_selector, from_set, parse_fields, parse_labels

LABELS = {"app": "web", "tier": "a", "n": "5"}


@pytest.mark.parametrize(
    ("text", "printed", "matches"),
    [
        ("app=web", "app=web", True),
        ("app = web, tier in (b, a),!legacy", "app=web,!legacy,tier in (a,b)", True),
        ("app==web", "app==web", True),
        ("app!=web", "app!=web", False),
        ("missing!=x", "missing!=x", True),
        ("tier notin (a)", "tier notin (a)", False),
        ("app", "app", True),
        ("!app", "!app", False),
        ("n>4,n<6", "n>4,n<6", True),
        ("app in (in)", "app in (in)", False),
        ("", "", True),
    ],
)
def test_string_form(text: str, printed: str, matches: bool) -> None:
    selector = parse_labels(text)
    assert str(selector) == printed
    assert selector.matches(LABELS) is matches


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a b", "unable to parse requirement: found 'b', expected: !=, <, =, ==, >, in, notin"),
        ("=b", "found '=', expected: !, identifier, or 'end of string'"),
        ("a,", "found '', expected: identifier after ','"),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("a in ()", "unable to parse requirement: for 'in', 'notin' operators, values set can't be empty"),
        ("a>b", "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer"),
    ],
)
def test_parse_errors_are_upstreams(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as err:
        parse_labels(text)
    assert str(err.value) == message


def test_invalid_key_and_value_are_named() -> None:
    with pytest.raises(SelectorError, match='invalid label key "-a"'):
        parse_labels("-a=b")
    with pytest.raises(SelectorError, match='invalid label value: "-b": at key: "a"'):
        parse_labels("a=-b")


def test_label_selector_objects() -> None:
    selector = from_label_selector(
        {"matchLabels": {"tier": "a", "app": "web"}, "matchExpressions": [{"key": "n", "operator": "Exists"}]}
    )
    assert str(selector) == "app=web,n,tier=a"
    assert selector.matches(LABELS)
    assert not from_label_selector(None).matches(LABELS)  # nil selects nothing
    assert from_label_selector({}).matches(LABELS)  # empty selects everything
    with pytest.raises(SelectorError, match='"Near" is not a valid label selector operator'):
        from_label_selector({"matchExpressions": [{"key": "a", "operator": "Near"}]})
    assert from_set({"app": "web"}).matches(LABELS)
    assert not from_set({"app": "db"}).matches(LABELS)


def test_field_selectors() -> None:
    reqs = parse_fields(r"spec.nodeName=n1,status.phase!=Failed,metadata.name==a\,b")
    assert [(r.field, r.equal, r.value) for r in reqs] == [
        ("spec.nodeName", True, "n1"),
        ("status.phase", False, "Failed"),
        ("metadata.name", True, "a,b"),
    ]
    assert str(reqs[2]) == r"metadata.name=a\,b"
    with pytest.raises(SelectorError, match="can't understand 'x'"):
        parse_fields("x")
