"""Pure parts of admission webhooks and policies, without a server: rule matching (operations, groups,
versions, resources with subresources and wildcards, scope), the selectors (namespaces judged by their
own labels, cluster-scoped objects always selected, old or new object labels), the review answer's
checks with upstream's texts, the denial Status, and a policy's evaluation."""

from __future__ import annotations

import base64
import json

import pytest

from controlplane.apiserver.admissionpolicy.evaluate import evaluate
from controlplane.apiserver.admissionpolicy.source import Policy
from controlplane.apiserver.webhooks import review
from controlplane.apiserver.webhooks.context import warning_header
from controlplane.apiserver.webhooks.rules import (
    Attributes,
    Rule,
    namespace_selected,
    object_selected,
    selector,
)


def attrs(
    resource: str = "pods",
    sub: str = "",
    namespace: str = "ns",
    group: str = "",
    op: str = "CREATE",
    obj=None,
    old=None,
) -> Attributes:
    return Attributes(op, group, "v1", resource, sub, namespace, "x", obj, old)


def rule(
    resources: list[str], scope: str = "*", ops: list[str] | None = None, groups: list[str] | None = None
) -> Rule:
    return Rule.parse(
        {
            "operations": ops or ["*"],
            "apiGroups": groups or ["*"],
            "apiVersions": ["*"],
            "resources": resources,
            "scope": scope,
        }
    )


@pytest.mark.parametrize(
    ("resources", "resource", "sub", "matches"),
    [
        (["pods"], "pods", "", True),
        (["pods"], "pods", "status", False),
        (["pods/status"], "pods", "status", True),
        (["pods/*"], "pods", "status", True),
        (["pods/*"], "pods", "", False),
        (["*"], "configmaps", "", True),
        (["*"], "pods", "exec", False),
        (["*/*"], "pods", "exec", True),
        (["*/status"], "deployments", "status", True),
        (["*/status"], "deployments", "scale", False),
    ],
)
def test_resources(resources: list[str], resource: str, sub: str, matches: bool) -> None:
    assert rule(resources).matches(attrs(resource, sub)) is matches


def test_operations_groups_scope() -> None:
    assert not rule(["pods"], ops=["UPDATE"]).matches(attrs())
    assert rule(["pods"], ops=["CREATE", "UPDATE"]).matches(attrs())
    assert not rule(["deployments"], groups=[""]).matches(attrs("deployments", group="apps"))
    assert rule(["nodes"], scope="Cluster").matches(attrs("nodes", namespace=""))
    assert not rule(["pods"], scope="Cluster").matches(attrs())
    assert not rule(["nodes"], scope="Namespaced").matches(attrs("nodes", namespace=""))
    assert rule(["namespaces"], scope="Namespaced").matches(attrs("namespaces", namespace=""))


def test_selectors() -> None:
    team = selector({"matchLabels": {"team": "a"}})
    assert namespace_selected(team, attrs(), {"team": "a"})
    assert not namespace_selected(team, attrs(), {"team": "b"})
    assert namespace_selected(team, attrs("nodes", namespace=""), None)  # cluster-scoped: always
    ns_obj = {"metadata": {"name": "n", "labels": {"team": "a"}}}
    assert namespace_selected(team, attrs("namespaces", namespace="", obj=ns_obj), None)  # its own labels
    assert not namespace_selected(
        team, attrs("namespaces", namespace="", obj={"metadata": {}}), {"team": "a"}
    )
    assert object_selected(team, attrs(obj={"metadata": {}}, old={"metadata": {"labels": {"team": "a"}}}))
    assert not object_selected(team, attrs(obj={"metadata": {}}))
    assert object_selected(selector({}), attrs(obj={"metadata": {}}))


def answer(uid: str = "u", **response) -> dict:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, **response},
    }


def test_verify() -> None:
    patch = base64.b64encode(json.dumps([{"op": "add", "path": "/a", "value": 1}]).encode()).decode()
    got = review.verify("u", True, answer(allowed=True, patchType="JSONPatch", patch=patch, warnings=["w"]))
    assert got.allowed and got.patch == [{"op": "add", "path": "/a", "value": 1}] and got.warnings == ["w"]
    cases = [
        (
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
            True,
            "webhook response was absent",
        ),
        (answer("other", allowed=True), True, 'expected response.uid="u", got "other"'),
        (
            {**answer(allowed=True), "apiVersion": "admission.k8s.io/v1beta1"},
            True,
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got admission.k8s.io/v1beta1, Kind=AdmissionReview",
        ),
        (
            answer(allowed=True, patch=patch),
            True,
            "webhook returned response.patch but not response.patchType",
        ),
        (
            answer(allowed=True, patchType="JSONPatch"),
            True,
            "webhook returned response.patchType but not response.patch",
        ),
        (
            answer(allowed=True, patchType="JSONPatch", patch=patch),
            False,
            "validating webhook may not return response.patch",
        ),
        (
            answer(allowed=True, patchType="Merge", patch=patch),
            True,
            'webhook returned invalid response.patchType of "Merge"',
        ),
    ]
    for doc, mutating, text in cases:
        with pytest.raises(review.InvalidResponse) as err:
            review.verify("u", mutating, doc)
        assert str(err.value) == text


def test_denial_status() -> None:
    assert review.denial_status("w", {"code": 200, "message": "no"}) == {
        "code": 400,
        "message": 'admission webhook "w" denied the request: no',
        "reason": "",
    }
    assert (
        review.denial_status("w", {"reason": "Nope"})["message"]
        == 'admission webhook "w" denied the request: Nope'
    )
    assert (
        review.denial_status("w", None)["message"]
        == 'admission webhook "w" denied the request without explanation'
    )


def test_decode_garbage() -> None:
    with pytest.raises(review.DecodeError):
        review.decode(b"<html>")
    with pytest.raises(review.DecodeError):
        review.decode(b"[1]")


def test_warning_header() -> None:
    assert warning_header('say "hi"') == '299 - "say \\"hi\\""'


def policy(**spec) -> Policy:
    return Policy.parse({"metadata": {"name": "p"}, "spec": {"matchConstraints": {}, **spec}})


def test_policy_evaluation() -> None:
    obj = {"metadata": {"name": "a"}, "data": {"n": "3"}}
    p = policy(
        variables=[{"name": "n", "expression": "int(object.data.n)"}],
        validations=[
            {"expression": "variables.n < 2", "messageExpression": "'n is ' + string(variables.n)"},
            {"expression": "variables.n < 3", "message": "  small  ", "reason": "Forbidden"},
            {"expression": "variables.n < 10"},
            {"expression": "variables.n < 1"},
        ],
    )
    got = evaluate(p, {"object": obj})
    assert [(d.message, d.reason) for d in got] == [
        ("n is 3", "Invalid"),
        ("small", "Forbidden"),
        ("failed expression: variables.n < 1", "Invalid"),
    ]
    conditioned = policy(
        matchConditions=[{"name": "big", "expression": "int(object.data.n) > 5"}],
        validations=[{"expression": "false"}],
    )
    assert evaluate(conditioned, {"object": obj}) == []
    erring = policy(validations=[{"expression": "object.data.missing == 'x'"}])
    assert evaluate(erring, {"object": obj})[0].message.startswith(
        "expression 'object.data.missing == 'x'' resulted in error: "
    )
    ignoring = policy(failurePolicy="Ignore", validations=[{"expression": "object.data.missing == 'x'"}])
    assert evaluate(ignoring, {"object": obj}) == []


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("[1, 2, 3].isSorted() && ![3, 1].isSorted()", True),
        ("[1, 2, 3].sum()", 6),
        ("[4, 2, 9].min() + [4, 2, 9].max()", 11),
        ("[1, 2, 1].indexOf(1) + [1, 2, 1].lastIndexOf(1)", 2),
        ("'abc 123 def 456'.find('[0-9]+')", "123"),
        ("'abc 123 def 456'.findAll('[0-9]+')", ["123", "456"]),
        ("' A-b '.trim().lowerAscii() + 'x'.upperAscii()", "a-bX"),
        ("'a,b,c'.split(',').join('-')", "a-b-c"),
        ("'aaa'.replace('a', 'b')", "bbb"),
    ],
)
def test_kubernetes_cel_library(expression: str, value: object) -> None:
    from controlplane.apiserver import cel

    assert cel.evaluate(expression, {}) == value


def test_kubernetes_cel_library_errors() -> None:
    from controlplane.apiserver import cel

    with pytest.raises(cel.CelError):
        cel.evaluate("[].min()", {})
    with pytest.raises(cel.CelError, match="^find: "):
        cel.evaluate("'x'.find('(')", {})
