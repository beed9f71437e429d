"""Jobs through kubectl and the API only: a Job of 5 completions, 2 at a time, finishes Complete
(`kubectl wait --for=condition=complete`) with 5 succeeded pods; a failing Job stops at its backoffLimit
with BackoffLimitExceeded; an Indexed Job's pods see their own index; bad input is refused with 422;
`kubectl get jobs` shows the upstream columns. Nothing here knows whose controller runs the Job.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

pytestmark = pytest.mark.integration


def kubectl(
    kubeconfig: Path,
    namespace: str,
    *args: str,
    stdin: str | None = None,
    check: bool = True,
    timeout: float = 180,
) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}")
    return done


def job(name: str, image: str, script: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            **spec,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "main", "image": image, "command": ["sh", "-c", script]}],
                }
            },
        },
    }


def pods_of(kube: client.CoreV1Api, ns: str, name: str) -> list[client.V1Pod]:
    return kube.list_namespaced_pod(ns, label_selector=f"batch.kubernetes.io/job-name={name}").items


def test_completions_with_parallelism_complete(kubeconfig, kube, api_client, namespace, image):
    batch = client.BatchV1Api(api_client)
    kubectl(
        kubeconfig,
        namespace,
        "create",
        "-f",
        "-",
        stdin=json.dumps(job("five", image, "sleep 1", completions=5, parallelism=2)),
    )
    kubectl(
        kubeconfig, namespace, "wait", "--for=condition=complete", "job/five", "--timeout=150s", timeout=170
    )
    status = batch.read_namespaced_job_status("five", namespace).status
    assert status.succeeded == 5 and not status.failed and not status.active
    assert status.completion_time is not None
    pods = pods_of(kube, namespace, "five")
    assert len(pods) == 5 and all(p.status.phase == "Succeeded" for p in pods)
    # Never more than parallelism ran at once: no two pods' run intervals overlap more than 2 deep.
    spans = sorted(
        (
            p.status.container_statuses[0].state.terminated.started_at,
            p.status.container_statuses[0].state.terminated.finished_at,
        )
        for p in pods
    )
    for start, _ in spans:
        assert sum(1 for s, f in spans if s <= start < f) <= 2
    table = kubectl(kubeconfig, namespace, "get", "jobs").stdout.splitlines()
    assert table[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert table[1].split()[:3] == ["five", "Complete", "5/5"]


def test_a_failing_job_stops_at_its_backoff_limit(kubeconfig, kube, api_client, namespace, image):
    batch = client.BatchV1Api(api_client)
    kubectl(
        kubeconfig,
        namespace,
        "create",
        "-f",
        "-",
        stdin=json.dumps(job("fails", image, "exit 3", backoffLimit=1)),
    )
    kubectl(
        kubeconfig, namespace, "wait", "--for=condition=failed", "job/fails", "--timeout=120s", timeout=140
    )
    status = batch.read_namespaced_job_status("fails", namespace).status
    failed = next(c for c in status.conditions if c.type == "Failed")
    assert (failed.status, failed.reason, failed.message) == (
        "True",
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    )
    assert status.failed == 2 and not status.succeeded
    pods = pods_of(kube, namespace, "fails")
    assert len(pods) == 2 and all(p.status.phase == "Failed" for p in pods)
    table = kubectl(kubeconfig, namespace, "get", "job", "fails").stdout.splitlines()
    assert table[1].split()[:3] == ["fails", "Failed", "0/1"]


def test_indexed_pods_see_their_index(kubeconfig, kube, api_client, namespace, image):
    kubectl(
        kubeconfig,
        namespace,
        "create",
        "-f",
        "-",
        stdin=json.dumps(
            job(
                "idx",
                image,
                'echo "index=$JOB_COMPLETION_INDEX host=$(hostname)"',
                completions=3,
                parallelism=3,
                completionMode="Indexed",
            )
        ),
    )
    kubectl(
        kubeconfig, namespace, "wait", "--for=condition=complete", "job/idx", "--timeout=120s", timeout=140
    )
    status = client.BatchV1Api(api_client).read_namespaced_job_status("idx", namespace).status
    assert status.completed_indexes == "0-2" and status.succeeded == 3
    seen = {}
    for pod in pods_of(kube, namespace, "idx"):
        index = pod.metadata.annotations["batch.kubernetes.io/job-completion-index"]
        seen[index] = kube.read_namespaced_pod_log(pod.metadata.name, namespace).strip()
    assert seen == {str(i): f"index={i} host=idx-{i}" for i in range(3)}


def test_bad_jobs_are_refused(kubeconfig, namespace, image):
    bad = job("always", image, "true")
    bad["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    done = kubectl(kubeconfig, namespace, "create", "-f", "-", stdin=json.dumps(bad), check=False)
    assert done.returncode != 0
    assert (
        'The Job "always" is invalid: spec.template.spec.restartPolicy: Required value: valid values: '
        '"OnFailure", "Never"'
    ) in done.stderr
    indexed = job("noidx", image, "true", completionMode="Indexed", parallelism=2)
    done = kubectl(kubeconfig, namespace, "create", "-f", "-", stdin=json.dumps(indexed), check=False)
    assert done.returncode != 0
    assert "spec.completions: Required value: when completion mode is Indexed" in done.stderr
    kubectl(
        kubeconfig,
        namespace,
        "create",
        "-f",
        "-",
        stdin=json.dumps(job("fixed", image, "sleep 60", completions=2)),
    )
    done = kubectl(
        kubeconfig, namespace, "patch", "job", "fixed", "-p", '{"spec":{"completions":3}}', check=False
    )
    assert done.returncode != 0
    assert 'The Job "fixed" is invalid: spec.completions: Invalid value: 3: field is immutable' in done.stderr


def test_a_job_made_from_a_cronjob_runs(kubeconfig, kube, api_client, namespace, image):
    cronjob = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "0 3 * * *",
            "timeZone": "Etc/UTC",
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "terminationGracePeriodSeconds": 1,
                            "containers": [
                                {"name": "main", "image": image, "command": ["sh", "-c", "echo made by hand"]}
                            ],
                        }
                    }
                }
            },
        },
    }
    kubectl(kubeconfig, namespace, "create", "-f", "-", stdin=json.dumps(cronjob))
    kubectl(kubeconfig, namespace, "create", "job", "now", "--from=cronjob/nightly")
    kubectl(
        kubeconfig, namespace, "wait", "--for=condition=complete", "job/now", "--timeout=120s", timeout=140
    )
    made = client.BatchV1Api(api_client).read_namespaced_job("now", namespace)
    assert made.metadata.annotations["cronjob.kubernetes.io/instantiate"] == "manual"
    assert made.metadata.owner_references[0].kind == "CronJob"
    pod = pods_of(kube, namespace, "now")[0]
    assert kube.read_namespaced_pod_log(pod.metadata.name, namespace).strip() == "made by hand"
    table = kubectl(kubeconfig, namespace, "get", "cronjob", "nightly").stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "SCHEDULE",
        "TIMEZONE",
        "SUSPEND",
        "ACTIVE",
        "LAST",
        "SCHEDULE",
        "AGE",
    ]
    assert table[1].split()[1:10] == ["0", "3", "*", "*", "*", "Etc/UTC", "False", "0", "<none>"]
    bad = dict(cronjob, metadata={"name": "bad"}, spec={**cronjob["spec"], "schedule": "0 25 * * *"})
    done = kubectl(kubeconfig, namespace, "create", "-f", "-", stdin=json.dumps(bad), check=False)
    assert done.returncode != 0
    assert (
        'The CronJob "bad" is invalid: spec.schedule: Invalid value: "0 25 * * *": end of range (25) above maximum (23): 25'
        in done.stderr
    )
    zone = dict(cronjob, metadata={"name": "zone"}, spec={**cronjob["spec"], "timeZone": "Mars/Olympus"})
    done = kubectl(kubeconfig, namespace, "create", "-f", "-", stdin=json.dumps(zone), check=False)
    assert (
        done.returncode != 0
        and 'spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus' in done.stderr
    )
