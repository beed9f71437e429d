"""Unit tests of priority and fairness's pure parts: request parsing, classification against
upstream's default schemas, shuffle sharding, a level's seats and queues, defaulting and validation."""

from __future__ import annotations

import asyncio

import pytest

from controlplane.apiserver.authn import UserInfo
from controlplane.apiserver.flowcontrol import defaults, validation
from controlplane.apiserver.flowcontrol.classify import Classifier, flow_hash
from controlplane.apiserver.flowcontrol.dispatcher import nominal_seats
from controlplane.apiserver.flowcontrol.maintainer import _autoupdate
from controlplane.apiserver.flowcontrol.queueset import Level, Rejected, deal
from controlplane.apiserver.flowcontrol.requestinfo import parse

ALL_SCHEMAS = [*defaults.MANDATORY_SCHEMAS, *defaults.SUGGESTED_SCHEMAS]
ALL_LEVELS = {o["metadata"]["name"] for o in (*defaults.MANDATORY_LEVELS, *defaults.SUGGESTED_LEVELS)}


def classify(user: UserInfo, method: str, path: str, watch: str | None = None) -> tuple[str, str, str]:
    classifier = Classifier(ALL_SCHEMAS, ALL_LEVELS, defaults.MANDATORY_SCHEMAS[1])
    got = classifier.classify(user, parse(method, path, watch))
    return got.schema["metadata"]["name"], got.level_name, got.flow


def test_request_info_as_upstreams_factory() -> None:
    info = parse("GET", "/api/v1/namespaces/ns/pods/p/log", None)
    assert (info.verb, info.api_group, info.resource, info.subresource, info.namespace, info.name) == (
        "get",
        "",
        "pods",
        "log",
        "ns",
        "p",
    )
    assert info.long_running
    assert parse("GET", "/apis/apps/v1/deployments", "true").verb == "watch"
    assert parse("GET", "/api/v1/watch/namespaces/ns/pods", None).verb == "watch"
    assert parse("DELETE", "/api/v1/namespaces/ns/pods", None).verb == "deletecollection"
    ns = parse("GET", "/api/v1/namespaces/ns", None)
    assert (ns.resource, ns.name, ns.namespace) == ("namespaces", "ns", "ns")
    assert parse("PUT", "/api/v1/namespaces/ns/finalize", None).subresource == "finalize"
    assert not parse("GET", "/healthz", None).resource_request
    assert not parse("GET", "/apis/apps", None).resource_request
    assert parse("POST", "/api/v1/namespaces/ns/pods/p/exec", None).long_running


def test_classification_by_upstreams_defaults() -> None:
    admin = UserInfo("admin", groups=("system:masters", "system:authenticated"))
    assert classify(admin, "GET", "/api/v1/pods")[:2] == ("exempt", "exempt")
    alice = UserInfo("alice", groups=("system:authenticated",))
    assert classify(alice, "GET", "/api/v1/pods") == ("global-default", "global-default", "alice")
    assert classify(alice, "GET", "/livez")[:2] == ("probes", "exempt")
    assert classify(alice, "POST", "/livez")[:2] == ("global-default", "global-default")
    node = UserInfo("system:node:n1", groups=("system:nodes", "system:authenticated"))
    assert classify(node, "PUT", "/api/v1/nodes/n1/status")[:2] == ("system-node-high", "node-high")
    lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"
    assert classify(node, "PUT", lease)[:2] == ("system-node-high", "node-high")
    assert classify(node, "GET", "/api/v1/namespaces/a/secrets/s")[:2] == ("system-nodes", "system")
    kcm = UserInfo("system:kube-controller-manager", groups=("system:authenticated",))
    assert classify(kcm, "PUT", "/api/v1/namespaces/x/endpoints/e")[:2] == (
        "endpoint-controller",
        "workload-high",
    )
    assert classify(kcm, "GET", "/api/v1/namespaces/x/pods") == (
        "kube-controller-manager",
        "workload-high",
        "x",
    )
    sa = UserInfo("system:serviceaccount:kube-system:job-controller", groups=("system:serviceaccounts",))
    assert classify(sa, "GET", "/api/v1/namespaces/kube-system/configmaps/c")[:2] == (
        "system-leader-election",
        "leader-election",
    )
    assert classify(sa, "GET", "/api/v1/namespaces/a/configmaps/c")[:2] == (
        "workload-leader-election",
        "leader-election",
    )
    assert classify(sa, "GET", "/api/v1/pods")[:2] == ("kube-system-service-accounts", "workload-high")
    other = UserInfo(
        "system:serviceaccount:apps:web", groups=("system:serviceaccounts", "system:authenticated")
    )
    assert classify(other, "GET", "/api/v1/pods")[:2] == ("service-accounts", "workload-low")


def test_a_schema_whose_level_is_missing_is_skipped() -> None:
    classifier = Classifier(ALL_SCHEMAS, ALL_LEVELS - {"global-default"}, defaults.MANDATORY_SCHEMAS[1])
    got = classifier.classify(
        UserInfo("alice", groups=("system:authenticated",)), parse("GET", "/api/v1/pods", None)
    )
    assert got.schema["metadata"]["name"] == "catch-all"


def test_shuffle_sharding_deals_distinct_cards() -> None:
    for seed in range(200):
        hand = deal(flow_hash("global-default", f"user-{seed}"), 128, 6)
        assert len(set(hand)) == 6 and all(0 <= c < 128 for c in hand)
    assert deal(flow_hash("s", "a"), 128, 6) == deal(flow_hash("s", "a"), 128, 6)
    assert deal(flow_hash("s", "a"), 128, 6) != deal(flow_hash("s", "b"), 128, 6)


def test_nominal_seats_scale_with_shares() -> None:
    shares = sum(
        (o["spec"].get("limited") or o["spec"].get("exempt"))["nominalConcurrencyShares"]
        for o in (*defaults.MANDATORY_LEVELS, *defaults.SUGGESTED_LEVELS)
    )
    assert shares == 245
    assert nominal_seats(600, 20, shares) == 49  # global-default on upstream's 400+200
    assert nominal_seats(600, 100, shares) == 245
    assert nominal_seats(2, 5, shares) == 1


async def test_reject_level_refuses_beyond_its_seats() -> None:
    level = Level("l", "u", seats=2)
    a, _ = await level.acquire(0)
    await level.acquire(0)
    with pytest.raises(Rejected) as err:
        await level.acquire(0)
    assert err.value.reason == "concurrency-limit"
    a.release()
    a.release()  # idempotent
    assert level.executing == 1
    await level.acquire(0)


async def test_queued_requests_are_served_in_turn_and_time_out() -> None:
    level = Level("l", "u", seats=1, queues=2, hand_size=1, queue_length_limit=2, wait_limit=0.2)
    seat, _ = await level.acquire(0)
    order: list[str] = []

    async def wait(name: str, flow: int) -> None:
        s, waited = await level.acquire(flow)
        order.append(name)
        assert waited >= 0
        await asyncio.sleep(0)
        s.release()

    # Two flows whose hands are different queues: a1, a2 on one, b1 on the other: served alternately.
    flow_a = next(h for h in range(100) if deal(h, 2, 1) == [0])
    flow_b = next(h for h in range(100) if deal(h, 2, 1) == [1])
    tasks = [asyncio.create_task(wait(n, f)) for n, f in (("a1", flow_a), ("a2", flow_a), ("b1", flow_b))]
    await asyncio.sleep(0)
    with pytest.raises(Rejected) as err:
        await level.acquire(flow_a)  # its queue holds queue_length_limit already
    assert err.value.reason == "queue-full"
    seat.release()
    await asyncio.gather(*tasks)
    assert order == ["a1", "b1", "a2"]
    held, _ = await level.acquire(0)
    with pytest.raises(Rejected) as err:
        await level.acquire(flow_a)
    assert err.value.reason == "time-out"
    assert level.waiting == 0 and level.executing == 1
    held.release()


async def test_a_cancelled_waiter_leaves_its_queue() -> None:
    level = Level("l", "u", seats=1, queues=1, hand_size=1, queue_length_limit=5)
    seat, _ = await level.acquire(0)
    task = asyncio.create_task(level.acquire(0))
    await asyncio.sleep(0)
    assert level.waiting == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert level.waiting == 0 and level.cancelled == 1
    seat.release()
    assert level.executing == 0


def test_defaults_and_validation() -> None:
    level = {
        "metadata": {"name": "x"},
        "spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Queue", "queuing": {}}}},
    }
    validation.default_priority_level(level)
    assert level["spec"]["limited"]["nominalConcurrencyShares"] == 30
    assert level["spec"]["limited"]["limitResponse"]["queuing"] == {
        "queues": 64,
        "handSize": 8,
        "queueLengthLimit": 50,
    }
    assert validation.validate_priority_level(level) == []
    bad = {
        "metadata": {"name": "exempt"},
        "spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Reject"}}},
    }
    assert [e.detail for e in validation.validate_priority_level(bad)] == [
        "Invalid value: \"Limited\": type must be 'Exempt' if and only if name is 'exempt'"
    ]
    for obj in (*defaults.MANDATORY_LEVELS, *defaults.SUGGESTED_LEVELS):
        assert validation.validate_priority_level(obj) == [], obj["metadata"]["name"]
    for obj in ALL_SCHEMAS:
        assert validation.validate_flow_schema(obj) == [], obj["metadata"]["name"]
    schema = {
        "metadata": {"name": "s"},
        "spec": {
            "matchingPrecedence": 1,
            "priorityLevelConfiguration": {"name": ""},
            "distinguisherMethod": {"type": "ByGroup"},
            "rules": [
                {
                    "subjects": [{"kind": "ServiceAccount", "serviceAccount": {"name": "a"}}],
                    "resourceRules": [{"verbs": ["get", "*"]}],
                }
            ],
        },
    }
    fields = {e.field for e in validation.validate_flow_schema(schema)}
    assert fields == {
        "spec.matchingPrecedence",
        "spec.distinguisherMethod.type",
        "spec.priorityLevelConfiguration.name",
        "spec.rules[0].subjects[0].serviceAccount.namespace",
        "spec.rules[0].resourceRules[0].verbs",
        "spec.rules[0].resourceRules[0].apiGroups",
        "spec.rules[0].resourceRules[0].resources",
        "spec.rules[0].resourceRules[0].namespaces",
    }


def test_autoupdate_annotation() -> None:
    def obj(value: str | None, generation: int) -> dict:
        annotations = {defaults.AUTOUPDATE: value} if value is not None else {}
        return {"metadata": {"annotations": annotations, "generation": generation}}

    assert _autoupdate(obj("true", 5)) == (True, False)
    assert _autoupdate(obj("false", 1)) == (False, False)
    assert _autoupdate(obj(None, 1)) == (True, True)
    assert _autoupdate(obj(None, 2)) == (False, False)


def test_retry_after_grows_while_a_level_keeps_dropping_and_shrinks_after() -> None:
    from controlplane.apiserver.flowcontrol.retryafter import DroppedRequests

    now = [1000.0]
    tracker = DroppedRequests(lambda: now[0])
    assert tracker.record("l") == 1
    seen = []
    for _ in range(12):  # ten drops a second
        for _ in range(10):
            got = tracker.record("l")
        seen.append(got)
        now[0] += 1
    assert seen[0] == 1 and max(seen) > 1 and seen == sorted(seen)
    assert max(seen) <= 32
    now[0] += 100  # quieter: a drop every other second, fewer than retry_after in the window
    values = []
    for _ in range(40):
        values.append(tracker.record("l"))
        now[0] += 2
    assert values[-1] == 1 and values == sorted(values, reverse=True)
    assert tracker.record("other") == 1


def test_a_watch_of_one_object_is_a_watch() -> None:
    assert parse("GET", "/api/v1/namespaces/a/configmaps/c", "True").verb == "watch"
    assert parse("GET", "/api/v1/namespaces/a/configmaps/c", "false").verb == "get"
