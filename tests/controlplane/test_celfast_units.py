"""The CEL fast path agrees with cel-python (the reference) wherever it answers, and leaves the rest to it."""

from __future__ import annotations

import pytest

from controlplane.apiserver import cel
from controlplane.apiserver.apiextensions import celfast

SELF = {
    "replicas": 3,
    "max": 5,
    "name": "x-web",
    "items": [1, 2],
    "m": {"a": 1},
    "r": 1.5,
    "on": True,
    "s": "",
}
OLD = {"replicas": 2, "name": "x-web", "items": [1]}
EXPRESSIONS = [
    "self.replicas <= self.max",
    "self.replicas > self.max || self.name.startsWith('x-')",
    "self == oldSelf",
    "self.name == oldSelf.name && self.replicas >= oldSelf.replicas",
    "has(self.m) && !has(self.nothing)",
    "has(self.m.a)",
    "size(self.items) <= 2 && self.items.size() == 2",
    "self.replicas + 2 * 3 == 9",
    "self.replicas / 2 == 1 && -7 / 2 == -3 && -7 % 2 == -1",
    "'a' in self.m && 2 in self.items && !(3 in self.items)",
    "self.on ? self.replicas : self.max",
    "self.name.endsWith('web') && self.name.contains('-w')",
    "self.r * 2.0 == 3.0",
    "self.s == '' || self.s.size() > 1",
    "self.items[0] == 1 && self.m['a'] == 1",
    "(self.replicas - 10) < 0",
]


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_fast_path_matches_cel_python(expression: str) -> None:
    assert celfast.compile_fast(expression) is not None
    bindings = {"self": SELF, "oldSelf": OLD}
    assert celfast.evaluate(expression, bindings) == cel.evaluate(expression, bindings)


@pytest.mark.parametrize(
    "expression",
    [
        "self.missing > 1",
        "self.replicas < self.r",
        "self.replicas / 0 == 1",
        "self.name + 1 == 'a'",
        "9223372036854775807 + 1 > 0",
    ],
)
def test_what_cel_decides_falls_back(expression: str) -> None:
    with pytest.raises(celfast.Fallback):
        celfast.evaluate(expression, {"self": SELF})


@pytest.mark.parametrize(
    "expression",
    ["self.all(x, x > 0)", "self.name.matches('^x')", "1u < 2u", "'a\\n' == self.s", "int(self.r) == 1"],
)
def test_outside_the_subset_does_not_compile(expression: str) -> None:
    assert celfast.compile_fast(expression) is None
