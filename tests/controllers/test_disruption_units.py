"""The disruption controller's arithmetic (controlplane/controllers/disruption/logic.py) and the eviction
handler's pure decisions (kinds/eviction.py), upstream's numbers: minAvailable and maxUnavailable as
counts and percentages of the controllers' scale (rounded up), healthy pods, the 2-minute expiry of
disruptedPods, the conditions, the decrement and its refusals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.kinds import eviction
from controlplane.controllers.disruption import logic

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, ready: bool = True, owner: str | None = "rs-uid", deleting: bool = False) -> dict:
    meta: dict = {"name": name, "namespace": "ns", "labels": {"app": "web"}}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": owner, "controller": True}
        ]
    if deleting:
        meta["deletionTimestamp"] = stamp(NOW)
    return {
        "metadata": meta,
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def scales(**by_uid: int):  # type: ignore[no-untyped-def]
    return lambda ref, _ns: logic.Scale(ref["uid"], by_uid[ref["uid"]]) if ref["uid"] in by_uid else None


@pytest.mark.parametrize(
    ("spec", "pods", "scale", "expected", "desired"),
    [
        ({"minAvailable": 2}, 3, 5, 3, 2),  # an integer minAvailable counts the pods there are
        ({"minAvailable": "50%"}, 3, 5, 5, 3),  # 2.5 rounded up, of the controller's scale
        ({"minAvailable": "100%"}, 2, 2, 2, 2),
        ({"maxUnavailable": 1}, 3, 4, 4, 3),
        ({"maxUnavailable": "30%"}, 3, 4, 4, 2),  # 1.2 rounded up = 2 unavailable
        ({"maxUnavailable": 10}, 3, 3, 3, 0),  # never below 0
        ({}, 3, 3, 0, 0),  # neither set
    ],
)
def test_expected_and_desired(spec: dict, pods: int, scale: int, expected: int, desired: int) -> None:
    found = logic.expected_count(spec, [pod(f"p{i}") for i in range(pods)], scales(**{"rs-uid": scale}))
    assert (found.expected, found.desired) == (expected, desired)


def test_scale_sums_distinct_controllers_and_reports_unmanaged() -> None:
    pods = [pod("a", owner="u1"), pod("b", owner="u1"), pod("c", owner="u2"), pod("d", owner=None)]
    found = logic.expected_count({"maxUnavailable": 0}, pods, scales(u1=3, u2=2))
    assert (found.expected, found.desired, found.unmanaged) == (5, 5, ["d"])
    with pytest.raises(logic.ExpectedCountError, match='found no controllers for pod "c"'):
        logic.expected_count({"minAvailable": "10%"}, pods, scales(u1=3))


def test_healthy_and_allowed() -> None:
    pods = [pod("a"), pod("b"), pod("c", ready=False), pod("d", deleting=True)]
    assert logic.current_healthy(pods, {}, NOW) == 2
    assert logic.current_healthy(pods, {"a": stamp(NOW - timedelta(seconds=30))}, NOW) == 1
    assert logic.disruptions_allowed(2, 1, 3) == 1
    assert logic.disruptions_allowed(1, 2, 3) == 0
    assert logic.disruptions_allowed(3, 0, 0) == 0  # no pod expected yet: safe


def test_disrupted_pods_expire_after_two_minutes() -> None:
    recent, old = NOW - timedelta(seconds=30), NOW - timedelta(minutes=3)
    pods = [pod("a"), pod("b"), pod("c", deleting=True)]
    recorded = {"a": stamp(recent), "b": stamp(old), "c": stamp(recent), "gone": stamp(recent)}
    kept, recheck, overdue = logic.disrupted_pods(pods, recorded, NOW)
    assert kept == {"a": stamp(recent)}
    assert recheck == recent + timedelta(minutes=2)
    assert [p["metadata"]["name"] for p in overdue] == ["b"]
    # b counts as healthy again, a does not until its entry expires
    assert logic.current_healthy(pods, kept, NOW) == 1
    assert logic.current_healthy(pods, kept, NOW + timedelta(minutes=2)) == 2


def test_new_status_and_conditions() -> None:
    pdb = {"metadata": {"name": "web", "generation": 2}, "status": {}}
    found = logic.Expected(expected=3, desired=2)
    status = logic.new_status(pdb, 3, found, {}, stamp(NOW))
    assert status is not None
    assert {
        k: status[k]
        for k in (
            "currentHealthy",
            "desiredHealthy",
            "expectedPods",
            "disruptionsAllowed",
            "observedGeneration",
        )
    } == {
        "currentHealthy": 3,
        "desiredHealthy": 2,
        "expectedPods": 3,
        "disruptionsAllowed": 1,
        "observedGeneration": 2,
    }
    assert status["conditions"] == [
        {
            "type": "DisruptionAllowed",
            "status": "True",
            "reason": "SufficientPods",
            "message": "",
            "observedGeneration": 2,
            "lastTransitionTime": stamp(NOW),
        }
    ]
    assert logic.new_status({**pdb, "status": status}, 3, found, {}, stamp(NOW)) is None  # up to date
    later = logic.new_status({**pdb, "status": status}, 2, found, {}, stamp(NOW + timedelta(seconds=5)))
    assert later is not None and later["disruptionsAllowed"] == 0
    assert later["conditions"][0]["reason"] == "InsufficientPods"
    assert later["conditions"][0]["lastTransitionTime"] == stamp(NOW + timedelta(seconds=5))
    failed = logic.fail_safe_status({**pdb, "status": status}, "boom", stamp(NOW))
    assert failed["disruptionsAllowed"] == 0
    assert (failed["conditions"][0]["reason"], failed["conditions"][0]["message"]) == ("SyncFailed", "boom")


# --- the eviction handler's decisions -----------------------------------------------------------------


def budget(allowed: int, generation: int = 1, observed: int = 1, **spec: object) -> dict:
    return {
        "metadata": {"name": "web", "generation": generation},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
        "status": {
            "disruptionsAllowed": allowed,
            "currentHealthy": 2,
            "desiredHealthy": 1,
            "observedGeneration": observed,
        },
    }


def test_decrement_records_the_pod_and_refuses_at_zero() -> None:
    pdb = budget(1)
    updated = eviction.decrement(pdb, "a", dry_run=False)
    assert updated is not None and pdb["status"]["disruptionsAllowed"] == 1  # the input is not changed
    assert updated["status"]["disruptionsAllowed"] == 0 and list(updated["status"]["disruptedPods"]) == ["a"]
    assert updated["status"]["conditions"][0]["reason"] == "InsufficientPods"
    assert eviction.decrement(budget(2), "a", dry_run=True) is None
    with pytest.raises(ApiError) as err:
        eviction.decrement(budget(0), "a", dry_run=False)
    assert (err.value.code, err.value.message) == (429, eviction.VIOLATES)
    assert err.value.details == {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget web needs 1 healthy pods and has 2 currently",
            }
        ]
    }
    with pytest.raises(ApiError) as err:
        eviction.decrement(budget(1, generation=2), "a", dry_run=False)
    assert err.value.code == 429 and err.value.details["retryAfterSeconds"] == 10
    with pytest.raises(ApiError) as err:
        eviction.decrement(budget(-1), "a", dry_run=False)
    assert (err.value.code, err.value.message) == (
        403,
        'poddisruptionbudget.policy "web" is forbidden: pdb disruptions allowed is negative',
    )


def test_which_pods_skip_the_budget() -> None:
    assert eviction.can_ignore_pdb({"metadata": {}, "status": {"phase": "Pending"}})
    assert eviction.can_ignore_pdb({"metadata": {}, "status": {"phase": "Succeeded"}})
    assert eviction.can_ignore_pdb({"metadata": {"deletionTimestamp": "x"}, "status": {"phase": "Running"}})
    assert not eviction.can_ignore_pdb({"metadata": {}, "status": {"phase": "Running"}})
    sick = pod("s", ready=False)
    assert eviction.unhealthy_may_go(sick, budget(0, unhealthyPodEvictionPolicy="AlwaysAllow"))
    assert eviction.unhealthy_may_go(sick, budget(0))  # 2 healthy >= 1 desired
    starving = budget(0)
    starving["status"]["currentHealthy"] = 0
    assert not eviction.unhealthy_may_go(sick, starving)
    assert not eviction.unhealthy_may_go(pod("h"), budget(0, unhealthyPodEvictionPolicy="AlwaysAllow"))
    assert eviction.selects({"spec": {"selector": {}}}, pod("x"))  # policy/v1: empty selects all
    assert not eviction.selects({"spec": {}}, pod("x"))


def test_stale_disruption_target() -> None:
    def with_target(
        status: str = "True", reason: str = "EvictionByEvictionAPI", ago: int = 30, **extra: object
    ) -> dict:
        p = pod("x", **extra)  # type: ignore[arg-type]
        p["status"]["conditions"].append(
            {
                "type": "DisruptionTarget",
                "status": status,
                "reason": reason,
                "lastTransitionTime": stamp(NOW - timedelta(seconds=ago)),
            }
        )
        return p

    assert logic.stale_disruption_wait(with_target(), NOW) == timedelta(seconds=90)
    assert logic.stale_disruption_wait(with_target(ago=300), NOW) == timedelta()
    assert logic.stale_disruption_wait(with_target(status="False"), NOW) is None
    assert logic.stale_disruption_wait(with_target(reason="TerminationByKubelet"), NOW) is None
    assert logic.stale_disruption_wait(with_target(deleting=True), NOW) is None
    assert logic.stale_disruption_wait(pod("plain"), NOW) is None


def test_too_many_unconfirmed_evictions_and_dry_run_options() -> None:
    crowded = budget(5)
    crowded["status"]["disruptedPods"] = {f"p{i}": stamp(NOW) for i in range(eviction.MAX_DISRUPTED_PODS + 1)}
    with pytest.raises(ApiError) as err:
        eviction.decrement(crowded, "a", dry_run=False)
    assert (err.value.code, err.value.message) == (
        403,
        'poddisruptionbudget.policy "web" is forbidden: DisruptedPods map too big - too many evictions not '
        "confirmed by PDB controller",
    )

    class Query(dict):
        def getall(self, key: str, default: list) -> list:
            return [self[key]] if key in self else default

    assert eviction.delete_options({}, Query(dryRun="All")).dry_run
    assert eviction.delete_options({"deleteOptions": {"dryRun": ["All"]}}, Query()).dry_run
    opts = eviction.delete_options({"deleteOptions": {"gracePeriodSeconds": 3}}, Query(dryRun="All"))
    assert opts.dry_run and opts.grace_period == 3
    with pytest.raises(ApiError) as err:
        eviction.delete_options(
            {"deleteOptions": {"dryRun": ["All"], "propagationPolicy": "Sideways"}}, Query()
        )
    assert err.value.code == 422
