"""batch/v1 Job served as upstream serves it: defaults, the generated selector and labels, validation
(422 with upstream's texts), what an update may not change, the status subresource and kubectl's
columns (including `kubectl create job`, which posts protobuf)."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controlplane.conftest import Kubectl, message


def job(name: str, restart: str = "Never", **spec: object) -> dict:
    body: dict = {
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "busybox:1.36"}]}
            }
        },
    }
    body["spec"].update(spec)
    return body


def test_defaults_and_the_generated_selector(batch: client.BatchV1Api, namespace: str) -> None:
    made = batch.create_namespaced_job(namespace, job("pi"))
    uid = made.metadata.uid
    spec = made.spec
    assert (
        spec.completions,
        spec.parallelism,
        spec.backoff_limit,
        spec.completion_mode,
        spec.suspend,
        spec.manual_selector,
        spec.pod_replacement_policy,
    ) == (1, 1, 6, "NonIndexed", False, False, "TerminatingOrFailed")
    assert spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    expected = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "pi",
        "controller-uid": uid,
        "job-name": "pi",
    }
    assert spec.template.metadata.labels == expected
    assert made.metadata.labels == expected and made.metadata.generation == 1
    # parallelism alone leaves completions unset (a work queue).
    queue = batch.create_namespaced_job(namespace, job("queue", parallelism=3))
    assert (queue.spec.completions, queue.spec.parallelism) == (None, 3)


def test_validation(batch: client.BatchV1Api, namespace: str) -> None:
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, job("a", restart="Always"))
    assert message(err) == (
        'Job.batch "a" is invalid: spec.template.spec.restartPolicy: Required value: '
        'valid values: "OnFailure", "Never"'
    )
    unset = job("a2")
    del unset["spec"]["template"]["spec"]["restartPolicy"]  # defaulted to Always, which a Job may not have
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, unset)
    assert 'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"' in message(
        err
    )
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, job("a3", restart="Sometimes"))
    assert 'spec.template.spec.restartPolicy: Unsupported value: "Sometimes"' in message(err)
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, job("b", completions=-1, backoffLimit=-2))
    assert message(err) == (
        'Job.batch "b" is invalid: [spec.completions: Invalid value: -1: must be greater than or '
        "equal to 0, spec.backoffLimit: Invalid value: -2: must be greater than or equal to 0]"
    )
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, job("c", completionMode="Indexed", parallelism=2))
    assert (
        message(err)
        == 'Job.batch "c" is invalid: spec.completions: Required value: when completion mode is Indexed'
    )
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, job("d", completionMode="Sometimes"))
    assert (
        'spec.completionMode: Unsupported value: "Sometimes": supported values: "NonIndexed", "Indexed"'
        in message(err)
    )
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, job("e", selector={"matchLabels": {"app": "e"}}))
    # The generated UID is added to the user's selector, which is then not the generated one.
    assert (
        'spec.selector: Invalid value: {"matchLabels":{"app":"e","batch.kubernetes.io/controller-uid":'
        in message(err)
    )
    assert "`selector` not auto-generated" in message(err)
    # A manual selector must match the template's labels.
    manual = job("f", manualSelector=True, selector={"matchLabels": {"app": "f"}})
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, manual)
    assert message(err) == (
        'Job.batch "f" is invalid: spec.template.metadata.labels: Invalid value: null: '
        "`selector` does not match template `labels`"
    )
    manual["spec"]["template"]["metadata"] = {"labels": {"app": "f"}}
    assert batch.create_namespaced_job(namespace, manual).spec.selector.match_labels == {"app": "f"}


def test_what_an_update_may_not_change(batch: client.BatchV1Api, namespace: str) -> None:
    batch.create_namespaced_job(namespace, job("pi", completions=2))
    with pytest.raises(ApiException) as err:
        batch.patch_namespaced_job("pi", namespace, {"spec": {"completions": 3}})
    assert message(err) == 'Job.batch "pi" is invalid: spec.completions: Invalid value: 3: field is immutable'
    with pytest.raises(ApiException) as err:
        batch.patch_namespaced_job(
            "pi",
            namespace,
            {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}}}},
        )
    assert 'Job.batch "pi" is invalid: spec.template: Invalid value: ' in message(err)
    assert message(err).endswith(": field is immutable")
    # suspend, parallelism and the TTL may change.
    changed = batch.patch_namespaced_job(
        "pi", namespace, {"spec": {"suspend": True, "parallelism": 4, "ttlSecondsAfterFinished": 30}}
    )
    assert (changed.spec.suspend, changed.spec.parallelism, changed.metadata.generation) == (True, 4, 2)
    # A suspended Job that never started may change its scheduling directives.
    made = batch.create_namespaced_job(namespace, job("later", suspend=True))
    moved = batch.patch_namespaced_job(
        "later", namespace, {"spec": {"template": {"spec": {"nodeSelector": {"disk": "ssd"}}}}}
    )
    assert (
        moved.spec.template.spec.node_selector == {"disk": "ssd"} and made.metadata.uid == moved.metadata.uid
    )


def test_status_subresource(batch: client.BatchV1Api, namespace: str) -> None:
    made = batch.create_namespaced_job(namespace, {**job("pi"), "status": {"succeeded": 5}})
    assert made.status is None or not made.status.succeeded
    batch.patch_namespaced_job_status(
        "pi", namespace, {"status": {"active": 1, "startTime": "2024-01-01T00:00:00Z"}}
    )
    assert batch.read_namespaced_job("pi", namespace).status.active == 1
    batch.patch_namespaced_job("pi", namespace, {"status": {"active": 7}})
    assert batch.read_namespaced_job("pi", namespace).status.active == 1


def test_kubectl_create_get_and_columns(kubectl: Kubectl, batch: client.BatchV1Api, namespace: str) -> None:
    kubectl.run("create", "job", "hello", "--image=busybox:1.36", "-n", namespace, "--", "echo", "hi")
    made = batch.read_namespaced_job("hello", namespace)
    assert made.spec.template.spec.restart_policy == "Never"
    assert made.spec.template.spec.containers[0].command == ["echo", "hi"]
    batch.patch_namespaced_job_status(
        "hello",
        namespace,
        {
            "status": {
                "startTime": "2024-01-01T00:00:00Z",
                "completionTime": "2024-01-01T00:00:42Z",
                "succeeded": 1,
                "conditions": [{"type": "Complete", "status": "True"}],
            }
        },
    )
    out = kubectl.run("get", "jobs", "-n", namespace).stdout.splitlines()
    assert out[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert out[1].split()[:4] == ["hello", "Complete", "1/1", "42s"]
    wide = kubectl.run("get", "job", "hello", "-o", "wide", "-n", namespace).stdout.splitlines()
    assert wide[0].split()[5:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    assert wide[1].split()[5:] == [
        "hello",
        "busybox:1.36",
        f"batch.kubernetes.io/controller-uid={made.metadata.uid}",
    ]


def test_pod_failure_policy_validation(batch: client.BatchV1Api, namespace: str) -> None:
    good = {
        "rules": [
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1, 42]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        ]
    }
    made = batch.create_namespaced_job(namespace, job("ok", podFailurePolicy=good))
    assert made.spec.pod_replacement_policy == "Failed"
    assert made.spec.pod_failure_policy.rules[1].on_pod_conditions[0].status == "True"
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, job("restarts", restart="OnFailure", podFailurePolicy=good))
    assert message(err) == (
        'Job.batch "restarts" is invalid: spec.template.spec.restartPolicy: Invalid value: '
        '"OnFailure": only "Never" is supported when podFailurePolicy is specified'
    )
    bad = {
        "rules": [
            {"action": "Explode", "onExitCodes": {"operator": "In", "values": [0, 3, 2, 3]}},
            {"action": "Count"},
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": "nope", "operator": "NotIn", "values": []},
            },
        ]
    }
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, job("bad", podFailurePolicy=bad))
    assert message(err) == (
        'Job.batch "bad" is invalid: [spec.podFailurePolicy.rules[0].action: Unsupported value: "Explode": supported '
        'values: "Count", "FailIndex", "FailJob", "Ignore", spec.podFailurePolicy.rules[0].onExitCodes.values[0]: '
        "Invalid value: 0: must not be 0 for the In operator, spec.podFailurePolicy.rules[0].onExitCodes.values[3]: "
        "Duplicate value: 3, spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: [0,3,2,3]: must be "
        "ordered, spec.podFailurePolicy.rules[1]: Invalid value: specifying one of OnExitCodes and OnPodConditions is "
        'required, spec.podFailurePolicy.rules[2].onExitCodes.containerName: Invalid value: "nope": must be one of the '
        "container or initContainer names in the pod template, spec.podFailurePolicy.rules[2].onExitCodes.values: "
        "Invalid value: []: at least one value is required]"
    )


def test_success_policy_validation(batch: client.BatchV1Api, namespace: str) -> None:
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, job("plain", successPolicy={"rules": [{"succeededCount": 1}]}))
    assert message(err) == (
        'Job.batch "plain" is invalid: spec.successPolicy: Invalid value: '
        '{"rules":[{"succeededCount":1}]}: requires indexed completion mode'
    )
    indexed = {"completionMode": "Indexed", "completions": 3, "parallelism": 3}
    bad = {"rules": [{}, {"succeededIndexes": "2,1"}, {"succeededIndexes": "0-1", "succeededCount": 3}]}
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, job("bad", successPolicy=bad, **indexed))
    assert message(err) == (
        'Job.batch "bad" is invalid: [spec.successPolicy.rules[0]: Required value: at least one of succeededCount or '
        'succeededIndexes must be specified, spec.successPolicy.rules[1].succeededIndexes: Invalid value: "2,1": error '
        "parsing succeededIndexes: non-increasing order, previous: 2, current: 1, "
        "spec.successPolicy.rules[2].succeededCount: Invalid value: 3: must be less than or equal to 2 (the number of "
        "indexes in the specified succeededIndexes field)]"
    )
    made = batch.create_namespaced_job(
        namespace, job("ok", successPolicy={"rules": [{"succeededIndexes": "0-2"}]}, **indexed)
    )
    assert made.spec.success_policy.rules[0].succeeded_indexes == "0-2"


def test_backoff_limit_per_index_validation(batch: client.BatchV1Api, namespace: str) -> None:
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, job("plain", backoffLimitPerIndex=1, maxFailedIndexes=1))
    assert message(err) == (
        'Job.batch "plain" is invalid: [spec.backoffLimitPerIndex: Invalid value: 1: requires '
        "indexed completion mode, spec.maxFailedIndexes: Invalid value: 1: requires indexed "
        "completion mode]"
    )
    indexed = {"completionMode": "Indexed", "completions": 2, "parallelism": 2}
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, job("lone", maxFailedIndexes=3, **indexed))
    assert message(err) == (
        'Job.batch "lone" is invalid: [spec.backoffLimitPerIndex: Required value: when '
        "maxFailedIndexes is specified, spec.maxFailedIndexes: Invalid value: 3: must be less than "
        "or equal to completions]"
    )
    made = batch.create_namespaced_job(namespace, job("ok", backoffLimitPerIndex=2, **indexed))
    assert made.spec.backoff_limit == 2147483647  # the Job-wide limit steps aside
