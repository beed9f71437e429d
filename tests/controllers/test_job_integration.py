"""The Job controller against the real API server (the test plays the kubelet): completions and
parallelism, the conditions and events of 1.32, Indexed Jobs, the backoff limit, pods deleted by hand
counted once, suspension, the active deadline, and the TTL-after-finished controller."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.controllers.conftest import eventually, mark_ready, running
from tests.controllers.jobkubelet import ended, job_kubelet

TRACKING = "batch.kubernetes.io/job-tracking"


@pytest.fixture(scope="module")
def batch(api: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api)


def job(name: str, **spec: object) -> dict:
    body: dict = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
            }
        },
    }
    body["spec"].update(spec)
    return body


def conditions(j: client.V1Job) -> dict[str, tuple[str, str | None]]:
    return {c.type: (c.status, c.reason) for c in ((j.status and j.status.conditions) or [])}


def pods_of(v1: client.CoreV1Api, ns: str, name: str) -> list[client.V1Pod]:
    return v1.list_namespaced_pod(ns, label_selector=f"batch.kubernetes.io/job-name={name}").items


def reasons(v1: client.CoreV1Api, ns: str, name: str) -> list[tuple[str, str]]:
    return [
        (e.reason, e.message) for e in v1.list_namespaced_event(ns).items if e.involved_object.name == name
    ]


async def test_completions_and_parallelism(apiserver, v1, batch, namespace):
    async with (
        running(apiserver, "job"),
        job_kubelet(apiserver, namespace, lambda _p: "Succeeded") as kubelet,
    ):
        batch.create_namespaced_job(namespace, job("work", completions=5, parallelism=2))
        done = await eventually(
            lambda: (
                (j := batch.read_namespaced_job_status("work", namespace))
                and "Complete" in conditions(j)
                and j
            ),
            timeout=40,
            what="Complete",
        )
        assert conditions(done) == {
            "SuccessCriteriaMet": ("True", "CompletionsReached"),
            "Complete": ("True", "CompletionsReached"),
        }
        complete = next(c for c in done.status.conditions if c.type == "Complete")
        assert complete.message == "Reached expected number of succeeded pods"
        assert (done.status.succeeded, done.status.failed, done.status.active) == (5, None, None)
        assert done.status.completion_time is not None and done.status.start_time is not None
        assert not (
            done.status.uncounted_terminated_pods.succeeded or done.status.uncounted_terminated_pods.failed
        )
        assert kubelet.most_running <= 2
        pods = pods_of(v1, namespace, "work")
        assert len(pods) == 5 and all(p.status.phase == "Succeeded" for p in pods)
        assert all(TRACKING not in (p.metadata.finalizers or []) for p in pods)
        # Each pod was made with the tracking finalizer.
        assert all(TRACKING in (seen["metadata"].get("finalizers") or []) for seen in kubelet.seen.values())
        said = await eventually(
            lambda: (r := reasons(v1, namespace, "work")) and ("Completed", "Job completed") in r and r
        )
        assert sum(1 for reason, _ in said if reason == "SuccessfulCreate") == 5


async def test_backoff_limit_exceeded(apiserver, v1, batch, namespace):
    async with running(apiserver, "job"), job_kubelet(apiserver, namespace, lambda _p: "Failed"):
        batch.create_namespaced_job(namespace, job("fail", backoffLimit=1))
        failed = await eventually(
            lambda: (
                (j := batch.read_namespaced_job_status("fail", namespace)) and "Failed" in conditions(j) and j
            ),
            timeout=45,
            what="Failed",
        )
        assert conditions(failed) == {
            "FailureTarget": ("True", "BackoffLimitExceeded"),
            "Failed": ("True", "BackoffLimitExceeded"),
        }
        assert (
            failed.status.failed == 2
            and not failed.status.succeeded
            and failed.status.completion_time is None
        )
        pods = pods_of(v1, namespace, "fail")
        assert len(pods) == 2
        # The second pod came after the first failure's backoff (10 s).
        first, second = sorted(pods, key=lambda p: p.metadata.creation_timestamp)
        finished = first.status.container_statuses[0].state.terminated.finished_at
        assert (second.metadata.creation_timestamp - finished).total_seconds() >= 9
        await eventually(
            lambda: (
                ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
                in reasons(v1, namespace, "fail")
            )
        )


async def test_indexed_pods_get_their_index(apiserver, v1, batch, namespace):
    async with running(apiserver, "job"), job_kubelet(apiserver, namespace, lambda _p: "Succeeded"):
        batch.create_namespaced_job(
            namespace, job("idx", completions=3, parallelism=3, completionMode="Indexed")
        )
        done = await eventually(
            lambda: (
                (j := batch.read_namespaced_job_status("idx", namespace))
                and "Complete" in conditions(j)
                and j
            ),
            timeout=40,
            what="Complete",
        )
        assert done.status.completed_indexes == "0-2" and done.status.succeeded == 3
        pods = pods_of(v1, namespace, "idx")
        by_index = {p.metadata.annotations["batch.kubernetes.io/job-completion-index"]: p for p in pods}
        assert sorted(by_index) == ["0", "1", "2"]
        for index, pod in by_index.items():
            assert pod.metadata.labels["batch.kubernetes.io/job-completion-index"] == index
            assert pod.metadata.name.startswith(f"idx-{index}-") and pod.spec.hostname == f"idx-{index}"
            env = {e.name: e.value_from.field_ref.field_path for e in pod.spec.containers[0].env}
            assert env == {
                "JOB_COMPLETION_INDEX": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            }


async def test_a_pod_deleted_by_hand_is_counted_once_and_replaced(apiserver, v1, batch, namespace):
    async with running(apiserver, "job"), job_kubelet(apiserver, namespace, lambda _p: None):
        batch.create_namespaced_job(namespace, job("keep", parallelism=1, completions=1))
        first = (
            await eventually(
                lambda: [p for p in pods_of(v1, namespace, "keep") if p.status.phase == "Running"]
            )
        )[0]
        v1.delete_namespaced_pod(first.metadata.name, namespace)
        await eventually(
            lambda: [
                p
                for p in pods_of(v1, namespace, "keep")
                if p.metadata.uid != first.metadata.uid and p.status.phase == "Running"
            ],
            timeout=30,
            what="a replacement (after the failure's 10 s backoff)",
        )
        await eventually(
            lambda: not [p for p in pods_of(v1, namespace, "keep") if p.metadata.uid == first.metadata.uid],
            what="the deleted pod gone",
        )
        status = (
            await eventually(
                lambda: (
                    (j := batch.read_namespaced_job_status("keep", namespace))
                    and j.status.failed == 1
                    and j.status.active == 1
                    and j
                )
            )
        ).status
        assert not (status.uncounted_terminated_pods.failed or status.uncounted_terminated_pods.succeeded)
        # Later syncs (another pod event) never count it again.
        batch.patch_namespaced_job("keep", namespace, {"metadata": {"labels": {"poke": "1"}}})
        again = await eventually(
            lambda: (
                (j := batch.read_namespaced_job("keep", namespace))
                and j.metadata.labels.get("poke") == "1"
                and j
            )
        )
        assert again.status.failed == 1


async def test_suspend_and_resume(apiserver, v1, batch, namespace):
    async with running(apiserver, "job"), job_kubelet(apiserver, namespace, lambda _p: None):
        batch.create_namespaced_job(namespace, job("later", parallelism=2, completions=4, suspend=True))
        suspended = await eventually(
            lambda: (
                (j := batch.read_namespaced_job_status("later", namespace))
                and "Suspended" in conditions(j)
                and j
            )
        )
        assert conditions(suspended)["Suspended"] == ("True", "JobSuspended") and not pods_of(
            v1, namespace, "later"
        )
        batch.patch_namespaced_job("later", namespace, {"spec": {"suspend": False}})
        await eventually(
            lambda: len([p for p in pods_of(v1, namespace, "later") if p.status.phase == "Running"]) == 2
        )
        resumed = batch.read_namespaced_job_status("later", namespace)
        assert (
            conditions(resumed)["Suspended"] == ("False", "JobResumed")
            and resumed.status.start_time is not None
        )
        batch.patch_namespaced_job("later", namespace, {"spec": {"suspend": True}})
        await eventually(lambda: not pods_of(v1, namespace, "later"), what="pods removed on suspension")
        status = batch.read_namespaced_job_status("later", namespace).status
        assert not status.failed  # pods stopped by suspension are no failures
        await eventually(
            lambda: (
                ("Suspended", "Job suspended") in reasons(v1, namespace, "later")
                and ("Resumed", "Job resumed") in reasons(v1, namespace, "later")
            )
        )


async def test_active_deadline(apiserver, v1, batch, namespace):
    async with running(apiserver, "job"), job_kubelet(apiserver, namespace, lambda _p: None):
        batch.create_namespaced_job(namespace, job("slow", activeDeadlineSeconds=2))
        failed = await eventually(
            lambda: (
                (j := batch.read_namespaced_job_status("slow", namespace)) and "Failed" in conditions(j) and j
            ),
            timeout=30,
            what="Failed",
        )
        assert conditions(failed)["Failed"] == ("True", "DeadlineExceeded")
        await eventually(lambda: not pods_of(v1, namespace, "slow"), what="its pod removed")


async def test_ttl_after_finished_deletes_the_job(apiserver, v1, batch, namespace):
    async with (
        running(apiserver, "job", "ttl-after-finished", "garbage-collector"),
        job_kubelet(apiserver, namespace, lambda _p: "Succeeded"),
    ):
        batch.create_namespaced_job(namespace, job("short", ttlSecondsAfterFinished=2))
        done = await eventually(
            lambda: (
                (j := batch.read_namespaced_job_status("short", namespace))
                and "Complete" in conditions(j)
                and j
            ),
            timeout=30,
        )
        assert done.metadata.uid
        await eventually(
            lambda: not [j for j in batch.list_namespaced_job(namespace).items if j.metadata.name == "short"],
            timeout=30,
            what="the Job deleted",
        )
        await eventually(lambda: not pods_of(v1, namespace, "short"), timeout=30, what="its pods deleted")


async def test_pod_failure_policy(apiserver, v1, batch, namespace):
    codes = iter([7, 7, 42])  # two ignored failures, then one that fails the Job
    seen: dict[str, int] = {}

    def outcome(pod: dict) -> str:
        uid = pod["metadata"]["uid"]
        if uid not in seen:
            seen[uid] = next(codes, 1)
        return f"Failed:{seen[uid]}"

    policy = {
        "rules": [
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}},
        ]
    }
    async with running(apiserver, "job"), job_kubelet(apiserver, namespace, outcome):
        made = batch.create_namespaced_job(namespace, job("policy", backoffLimit=0, podFailurePolicy=policy))
        assert made.spec.pod_replacement_policy == "Failed"
        failed = await eventually(
            lambda: (
                (j := batch.read_namespaced_job_status("policy", namespace))
                and "Failed" in conditions(j)
                and j
            ),
            timeout=30,
            what="Failed",
        )
        assert conditions(failed) == {
            "FailureTarget": ("True", "PodFailurePolicy"),
            "Failed": ("True", "PodFailurePolicy"),
        }
        pods = sorted(pods_of(v1, namespace, "policy"), key=lambda p: p.metadata.creation_timestamp)
        assert len(pods) == 3  # the ignored failures were replaced at once, without backoff, and not counted
        gaps = [
            (b.metadata.creation_timestamp - a.metadata.creation_timestamp).total_seconds()
            for a, b in zip(pods, pods[1:], strict=False)
        ]
        assert max(gaps) < 5, gaps
        last = next(p.metadata.name for p in pods if seen.get(p.metadata.uid) == 42)
        message = next(c.message for c in failed.status.conditions if c.type == "Failed")
        assert (
            message
            == f"Container c for pod {namespace}/{last} failed with exit code 42 matching FailJob rule at index 0"
        )
        assert failed.status.failed == 1


async def test_success_policy(apiserver, v1, batch, namespace):
    def outcome(pod: dict) -> str | None:
        index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        return "Succeeded" if index == "1" else None  # the rest run until the Job no longer needs them

    policy = {"rules": [{"succeededIndexes": "0,2-3", "succeededCount": 2}, {"succeededIndexes": "1"}]}
    async with running(apiserver, "job"), job_kubelet(apiserver, namespace, outcome):
        batch.create_namespaced_job(
            namespace,
            job("leader", completions=4, parallelism=4, completionMode="Indexed", successPolicy=policy),
        )
        done = await eventually(
            lambda: (
                (j := batch.read_namespaced_job_status("leader", namespace))
                and "Complete" in conditions(j)
                and j
            ),
            timeout=30,
            what="Complete",
        )
        assert conditions(done) == {
            "SuccessCriteriaMet": ("True", "SuccessPolicy"),
            "Complete": ("True", "SuccessPolicy"),
        }
        assert {c.message for c in done.status.conditions} == {"Matched rules at index 1"}
        assert done.status.completed_indexes == "1" and done.status.succeeded == 1
        await eventually(
            lambda: all(p.status.phase == "Succeeded" for p in pods_of(v1, namespace, "leader")),
            what="the other indexes' pods removed",
        )


async def test_backoff_limit_per_index(apiserver, v1, batch, namespace):
    def outcome(pod: dict) -> str:
        index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        return "Failed" if index == "1" else "Succeeded"

    async with running(apiserver, "job"), job_kubelet(apiserver, namespace, outcome):
        batch.create_namespaced_job(
            namespace,
            job("each", completions=3, parallelism=3, completionMode="Indexed", backoffLimitPerIndex=1),
        )
        failed = await eventually(
            lambda: (
                (j := batch.read_namespaced_job_status("each", namespace)) and "Failed" in conditions(j) and j
            ),
            timeout=40,
            what="Failed",
        )
        assert conditions(failed)["Failed"] == ("True", "FailedIndexes")
        assert failed.status.failed_indexes == "1" and failed.status.completed_indexes == "0,2"
        assert (failed.status.failed, failed.status.succeeded) == (2, 2)
        ones = sorted(
            (
                p
                for p in pods_of(v1, namespace, "each")
                if p.metadata.annotations["batch.kubernetes.io/job-completion-index"] == "1"
            ),
            key=lambda p: int(p.metadata.annotations["batch.kubernetes.io/job-index-failure-count"]),
        )
        assert [p.metadata.annotations["batch.kubernetes.io/job-index-failure-count"] for p in ones] == [
            "0",
            "1",
        ]
        # The index's second pod waited out its own backoff (10 s).
        finished = ones[0].status.container_statuses[0].state.terminated.finished_at
        assert (ones[1].metadata.creation_timestamp - finished).total_seconds() >= 9


async def test_with_a_pod_failure_policy_a_terminating_pod_is_not_replaced(apiserver, v1, batch, namespace):
    """podReplacementPolicy defaults to Failed with a podFailurePolicy: an index whose pod is still
    terminating gets no second pod until that one has failed (status.terminating counts it)."""
    policy = {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}}]}
    async with running(apiserver, "job"):
        made = batch.create_namespaced_job(
            namespace,
            job("slow", completionMode="Indexed", completions=1, parallelism=1, podFailurePolicy=policy),
        )
        assert made.spec.pod_replacement_policy == "Failed"
        first = (await eventually(lambda: pods_of(v1, namespace, "slow"), what="the pod of index 0"))[0]
        mark_ready(v1, first)
        v1.delete_namespaced_pod(first.metadata.name, namespace)  # bound: stays, terminating
        await eventually(
            lambda: (j := batch.read_namespaced_job_status("slow", namespace)).status.terminating == 1 and j,
            what="the Job to count the terminating pod",
        )
        batch.patch_namespaced_job("slow", namespace, {"metadata": {"labels": {"poke": "1"}}})
        await eventually(
            lambda: (
                (j := batch.read_namespaced_job_status("slow", namespace)).metadata.labels.get("poke")
                and j.status.terminating == 1
            ),
            what="another sync",
        )
        assert [p.metadata.uid for p in pods_of(v1, namespace, "slow")] == [first.metadata.uid]
        assert batch.read_namespaced_job_status("slow", namespace).status.active in (None, 0)
        v1.patch_namespaced_pod_status(first.metadata.name, namespace, {"status": ended("Failed", 7)})
        v1.delete_namespaced_pod(first.metadata.name, namespace, grace_period_seconds=0)
        second = await eventually(
            lambda: [p for p in pods_of(v1, namespace, "slow") if p.metadata.uid != first.metadata.uid],
            what="the replacement once the first pod has failed",
        )
        assert second[0].metadata.annotations["batch.kubernetes.io/job-completion-index"] == "0"
