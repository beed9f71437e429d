"""The API server's CEL wrapper: JSON in, Python out, one error type, compiled once."""

import pytest

from controlplane.apiserver import cel


def test_rule_over_self_and_old_self() -> None:
    rule = "self.replicas <= self.maxReplicas && (oldSelf == null || self.name == oldSelf.name)"
    assert (
        cel.evaluate(rule, {"self": {"replicas": 2, "maxReplicas": 3, "name": "a"}, "oldSelf": None}) is True
    )
    assert (
        cel.evaluate(rule, {"self": {"replicas": 4, "maxReplicas": 3, "name": "a"}, "oldSelf": None}) is False
    )
    old = {"replicas": 1, "maxReplicas": 3, "name": "b"}
    assert (
        cel.evaluate(rule, {"self": {"replicas": 1, "maxReplicas": 3, "name": "a"}, "oldSelf": old}) is False
    )


def test_results_come_back_as_plain_python() -> None:
    value = cel.evaluate('{"a": [1, 2.5, true, null, "s"]}', {})
    assert value == {"a": [1, 2.5, True, None, "s"]}
    assert type(value["a"][0]) is int and type(value["a"][2]) is bool


def test_compile_is_cached_and_syntax_errors_are_cel_errors() -> None:
    assert cel.compile_expression("1 + 1") is cel.compile_expression("1 + 1")
    with pytest.raises(cel.CelError, match="compilation failed"):
        cel.compile_expression("self.x +")


def test_evaluation_errors_name_the_cause() -> None:
    with pytest.raises(cel.CelError, match="no such key"):
        cel.evaluate("self.missing == 1", {"self": {"x": 1}})
    assert cel.evaluate("has(self.missing)", {"self": {"x": 1}}) is False
