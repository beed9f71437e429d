"""The Job controller's pure parts: index intervals, the pod-failure backoff, counting through
uncountedTerminatedPods (never twice), the verdicts, how many pods to run and the pods it makes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from controlplane.controllers.job import failurepolicy as fp
from controlplane.controllers.job import logic, perindex
from controlplane.controllers.job import pods as jp
from controlplane.controllers.ttlafterfinished import expires_at

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def ts(ago: float) -> str:
    return (NOW - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(status: dict | None = None, **spec: object) -> dict:
    body = {
        "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid"},
        "spec": {
            "completions": 3,
            "parallelism": 2,
            "backoffLimit": 2,
            "completionMode": "NonIndexed",
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
            },
        },
        "status": status or {},
    }
    body["spec"].update(spec)
    return body


def pod(
    uid: str,
    phase: str = "Running",
    finalizer: bool = True,
    deleting: bool = False,
    index: int | None = None,
    finished_ago: float | None = None,
    restarts: int = 0,
) -> dict:
    meta: dict = {"name": uid, "namespace": "ns", "uid": uid, "creationTimestamp": ts(100)}
    if finalizer:
        meta["finalizers"] = [jp.TRACKING_FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = ts(-30)
        meta["deletionGracePeriodSeconds"] = 30
    if index is not None:
        meta["annotations"] = {jp.INDEX_ANNOTATION: str(index)}
    status: dict = {
        "phase": phase,
        "containerStatuses": [{"name": "c", "restartCount": restarts, "state": {}}],
    }
    if finished_ago is not None:
        status["containerStatuses"][0]["state"] = {"terminated": {"finishedAt": ts(finished_ago)}}
    return {"metadata": meta, "status": status}


def test_intervals_round_trip() -> None:
    assert logic.format_intervals({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert logic.parse_intervals("0-2,5,7-8", 8) == {0, 1, 2, 5, 7}
    assert logic.format_intervals(set()) == "" and logic.parse_intervals("", 3) == set()


def test_backoff_doubles_from_ten_seconds_to_ten_minutes() -> None:
    assert [logic.backoff_delay(n) for n in range(1, 8)] == [10, 20, 40, 80, 160, 320, 600]
    assert logic.backoff_delay(0) == 0 and logic.backoff_delay(30) == 600


def test_backoff_record_counts_each_failed_pod_once_and_resets_on_success() -> None:
    j = job()
    record = logic.BackoffRecord()
    failed = pod("p1", "Failed", finished_ago=5)
    t = logic.tally(j, [failed], logic.JobSpec.of(j), set())
    record.update(t, NOW)
    record.update(t, NOW)  # a retried sync sees the same failure again
    assert record.failures_after_success == 1 and round(record.remaining(NOW)) == 5
    second = logic.tally(j, [pod("p2", "Failed", finished_ago=1)], logic.JobSpec.of(j), set())
    record.update(second, NOW)
    assert record.failures_after_success == 2 and round(record.remaining(NOW)) == 19
    success = logic.tally(j, [pod("p3", "Succeeded")], logic.JobSpec.of(j), set())
    record.update(success, NOW)
    assert record.failures_after_success == 0 and record.remaining(NOW) == 0


def test_tally_records_new_finished_pods_once() -> None:
    j = job({"succeeded": 1, "uncountedTerminatedPods": {"succeeded": ["old"]}})
    pods = [
        pod("old", "Succeeded"),
        pod("new", "Succeeded"),
        pod("gone", "Failed", finalizer=False),
        pod("run"),
        pod("del", deleting=True),
        pod("removing", "Succeeded"),
    ]
    t = logic.tally(j, pods, logic.JobSpec.of(j), pending_removal={"removing"})
    assert t.uncounted_succeeded == ["old", "new"] and t.uncounted_failed == ["del"]
    assert t.succeeded == 3 and t.failed == 1
    assert [p["metadata"]["uid"] for p in t.active] == ["run"] and t.terminating == 1
    assert {p["metadata"]["uid"] for p in t.release} == {"old", "new", "del"}


def test_deleted_pods_are_no_failures_when_only_failed_pods_are_replaced_or_suspended() -> None:
    strict = job(podReplacementPolicy="Failed")
    assert not logic.tally(
        strict, [pod("d", deleting=True)], logic.JobSpec.of(strict), set()
    ).uncounted_failed
    suspended = job(suspend=True)
    t = logic.tally(suspended, [pod("d", deleting=True)], logic.JobSpec.of(suspended), set())
    assert not t.uncounted_failed and [p["metadata"]["uid"] for p in t.release] == ["d"]


def test_indexed_success_counts_each_index_once() -> None:
    j = job({"completedIndexes": "0"}, completionMode="Indexed")
    pods = [
        pod("a", "Succeeded", index=0),
        pod("b", "Succeeded", index=1),
        pod("c", "Succeeded", index=1),
        pod("d", "Succeeded", index=9),
    ]
    t = logic.tally(j, pods, logic.JobSpec.of(j), set())
    assert t.completed_indexes == {0, 1} and t.uncounted_succeeded == ["b"]
    assert len(t.release) == 4  # duplicates and strays lose the finalizer uncounted


def test_verdicts() -> None:
    j = job({"failed": 2, "uncountedTerminatedPods": {"failed": ["x"]}})
    spec = logic.JobSpec.of(j)
    assert logic.failure(j, spec, logic.tally(j, [], spec, set()), NOW) == logic.BACKOFF_LIMIT_EXCEEDED
    within = job({"failed": 2})
    assert logic.failure(within, spec, logic.tally(within, [], spec, set()), NOW) is None
    late = job({"startTime": ts(11)}, activeDeadlineSeconds=10)
    late_spec = logic.JobSpec.of(late)
    assert (
        logic.failure(late, late_spec, logic.tally(late, [], late_spec, set()), NOW)
        == logic.DEADLINE_EXCEEDED
    )
    assert logic.deadline_left(job({"startTime": ts(4)}, activeDeadlineSeconds=10), late_spec, NOW) == 6
    restarting = job(backoffLimit=2)
    restarting["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    rs = logic.JobSpec.of(restarting)
    assert (
        logic.failure(restarting, rs, logic.tally(restarting, [pod("p", restarts=2)], rs, set()), NOW)
        == logic.BACKOFF_LIMIT_EXCEEDED
    )
    done = job({"succeeded": 3})
    assert logic.succeeded(logic.JobSpec.of(done), logic.tally(done, [], logic.JobSpec.of(done), set()))
    queue = job({"succeeded": 1}, completions=None)
    qs = logic.JobSpec.of(queue)
    assert not logic.succeeded(qs, logic.tally(queue, [pod("still")], qs, set()))
    assert logic.succeeded(qs, logic.tally(queue, [], qs, set()))


def test_wanted_active_and_indexes() -> None:
    j = job({"succeeded": 2})
    spec = logic.JobSpec.of(j)
    assert logic.wanted_active(spec, logic.tally(j, [], spec, set())) == 1
    fresh = job()
    assert (
        logic.wanted_active(logic.JobSpec.of(fresh), logic.tally(fresh, [], logic.JobSpec.of(fresh), set()))
        == 2
    )
    assert logic.wanted_active(logic.JobSpec.of(job(suspend=True)), logic.Tally()) == 0
    indexed = job({"completedIndexes": "0,2"}, completions=5, parallelism=3, completionMode="Indexed")
    ispec = logic.JobSpec.of(indexed)
    t = logic.tally(indexed, [pod("r", index=1)], ispec, set())
    assert logic.wanted_active(ispec, t) == 3
    assert logic.indexes_to_start(indexed, ispec, t, 2) == [3, 4]
    dup = logic.tally(indexed, [pod("a", index=1), pod("b", index=1)], ispec, set())
    assert [p["metadata"]["uid"] for p in logic.excess_active(ispec, dup, 3)] == ["b"]


def test_terminating_pods_hold_their_place_when_only_failed_pods_are_replaced() -> None:
    policy = {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}}]}
    for spec_extra, held in (({"podFailurePolicy": policy}, True), ({}, False)):
        j = job(completions=3, parallelism=3, completionMode="Indexed", **spec_extra)
        spec = logic.JobSpec.of(j)
        t = logic.tally(j, [pod("a", index=0, deleting=True), pod("b", index=1)], spec, set())
        wanted = logic.wanted_active(spec, t)
        assert t.terminating == 1 and wanted == 3
        assert logic.missing_active(j, t, wanted) == (1 if held else 2)
        assert logic.indexes_to_start(j, spec, t, 3) == ([2] if held else [0, 2])


def test_the_pods_a_job_makes() -> None:
    plain = jp.pod_for({**job(), "apiVersion": "batch/v1", "kind": "Job"}, None)
    assert plain["metadata"]["generateName"] == "j-" and plain["metadata"]["finalizers"] == [
        jp.TRACKING_FINALIZER
    ]
    ref = plain["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["uid"], ref["controller"], ref["blockOwnerDeletion"]) == (
        "Job",
        "job-uid",
        True,
        True,
    )
    assert "env" not in plain["spec"]["containers"][0] and "hostname" not in plain["spec"]
    indexed = jp.pod_for(job(completionMode="Indexed"), 2)
    meta, spec = indexed["metadata"], indexed["spec"]
    assert meta["generateName"] == "j-2-" and meta["annotations"][jp.INDEX_ANNOTATION] == "2"
    assert meta["labels"] == {"a": "b", jp.INDEX_LABEL: "2"} and spec["hostname"] == "j-2"
    assert spec["containers"][0]["env"] == [
        {
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {
                "fieldRef": {
                    "apiVersion": "v1",
                    "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']",
                }
            },
        }
    ]


def test_finish_time_of_a_deleted_pod_is_its_deletion_less_the_grace() -> None:
    deleted = pod("d", deleting=True)
    assert jp.finish_time(deleted, NOW) == NOW.replace(microsecond=0)
    assert jp.finish_time(pod("f", "Failed", finished_ago=7), NOW) == NOW - timedelta(seconds=7)


def test_ttl_expiry() -> None:
    finished = job(
        {"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": ts(5)}]},
        ttlSecondsAfterFinished=60,
    )
    assert expires_at(finished) == NOW + timedelta(seconds=55)
    assert expires_at(job(ttlSecondsAfterFinished=60)) is None
    assert expires_at({**finished, "spec": {}}) is None


def test_pod_failure_policy_verdicts() -> None:
    policy = {
        "rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "c", "operator": "In", "values": [42]}},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [42]}},
        ]
    }
    j = job(podFailurePolicy=policy)

    def failed(code: int, conditions: list | None = None) -> dict:
        p = pod("p", "Failed")
        p["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": code}}
        p["status"]["conditions"] = conditions or []
        return p

    assert fp.evaluate(job(), failed(42)) is None
    verdict = fp.evaluate(j, failed(42))
    assert verdict == fp.Verdict(
        "FailJob", "Container c for pod ns/p failed with exit code 42 matching FailJob rule at index 1"
    )
    assert fp.evaluate(j, failed(3)).action == "Count"
    disrupted = fp.evaluate(j, failed(42, [{"type": "DisruptionTarget", "status": "True"}]))
    assert disrupted == fp.Verdict(
        "Ignore", "Pod ns/p has condition DisruptionTarget matching Ignore rule at index 0"
    )
    t = logic.tally(j, [failed(42)], logic.JobSpec.of(j), set())
    assert logic.failure(j, logic.JobSpec.of(j), t, NOW) == ("PodFailurePolicy", verdict.message)
    ignored = logic.tally(
        j, [failed(1, [{"type": "DisruptionTarget", "status": "True"}])], logic.JobSpec.of(j), set()
    )
    assert not ignored.uncounted_failed and not ignored.new_failures and len(ignored.release) == 1


def test_success_policy_rules() -> None:
    policy = {"rules": [{"succeededIndexes": "0,2-3", "succeededCount": 2}, {"succeededCount": 3}]}
    j = job({"completedIndexes": "0,1"}, completions=5, completionMode="Indexed", successPolicy=policy)
    spec = logic.JobSpec.of(j)
    assert logic.success_policy(j, spec, logic.tally(j, [], spec, set())) is None
    two = job({"completedIndexes": "0,3"}, completions=5, completionMode="Indexed", successPolicy=policy)
    assert logic.success_policy(two, spec, logic.tally(two, [], spec, set())) == (
        "SuccessPolicy",
        "Matched rules at index 0",
    )
    three = job({"completedIndexes": "1,4,0"}, completions=5, completionMode="Indexed", successPolicy=policy)
    assert logic.success_policy(three, spec, logic.tally(three, [], spec, set())) == (
        "SuccessPolicy",
        "Matched rules at index 1",
    )


def test_per_index_failures_and_verdicts() -> None:
    j = job({"completedIndexes": "0"}, completions=3, completionMode="Indexed", backoffLimitPerIndex=1)
    spec = logic.JobSpec.of(j)
    first = pod("a", "Failed", index=1, finished_ago=5)
    again = pod("b", "Failed", index=1, finished_ago=1)
    again["metadata"]["annotations"][perindex.FAILURE_COUNT] = "1"
    once = logic.tally(j, [first], spec, set(), NOW)
    assert once.failed_indexes == set() and once.index_failures.counts == {1: 1}
    assert logic.indexes_to_start(j, spec, once, 3, NOW) == [2]  # index 1 backs off its 10 s
    assert [round(w) for w in logic.index_waits(spec, once, NOW)] == [5]
    twice = logic.tally(j, [first, again], spec, set(), NOW)
    assert twice.failed_indexes == {1} and logic.wanted_active(spec, twice) == 1
    assert perindex.verdict({1}, {0, 2}, 3, None) == perindex.FAILED_INDEXES
    assert perindex.verdict({1}, {0}, 3, None) is None
    assert perindex.verdict({1, 2}, set(), 5, 1) == perindex.MAX_FAILED_INDEXES
    made = jp.pod_for({**j, "apiVersion": "batch/v1", "kind": "Job"}, 1, 2)
    assert made["metadata"]["annotations"][perindex.FAILURE_COUNT] == "2"


def test_fail_index_rule_fails_the_index_at_once() -> None:
    policy = {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}]}
    j = job(completions=3, completionMode="Indexed", backoffLimitPerIndex=5, podFailurePolicy=policy)
    spec = logic.JobSpec.of(j)
    failed = pod("f", "Failed", index=2)
    failed["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 3}}
    t = logic.tally(j, [failed], spec, set(), NOW)
    assert t.failed_indexes == {2} and t.uncounted_failed == ["f"]
