"""batch/v1 CronJob served as upstream serves it: defaults, the schedule judged by robfig/cron's grammar
(422 naming spec.schedule with its text), time zones (422 for an unknown one), the job template's
generated selector, names of at most 52 characters, kubectl's columns and `kubectl create cronjob`."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controlplane.apiserver.kinds.cronschedule import ScheduleError, parse_standard, time_zone_error
from tests.controlplane.conftest import Kubectl, message

pytestmark = pytest.mark.integration  # real servers, etcd or processes


def cronjob(name: str, schedule: str = "*/5 * * * *", **spec: object) -> dict:
    body: dict = {
        "metadata": {"name": name},
        "spec": {
            "schedule": schedule,
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "OnFailure",
                            "containers": [{"name": "c", "image": "busybox:1.36"}],
                        }
                    }
                }
            },
        },
    }
    body["spec"].update(spec)
    return body


@pytest.mark.parametrize(
    ("schedule", "error"),
    [
        ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
        ("61 * * * *", "end of range (61) above maximum (59): 61"),
        ("x * * * *", 'failed to parse int from x: strconv.Atoi: parsing "x": invalid syntax'),
        ("*/0 * * * *", "step of range should be a positive number: */0"),
        ("5-1 * * * *", "beginning of range (5) beyond end of range (1): 5-1"),
        ("0 0 0 * *", "beginning of range (0) below minimum (1): 0"),
        ("@sometimes", "unrecognized descriptor: @sometimes"),
    ],
)
def test_robfig_grammar_errors(schedule: str, error: str) -> None:
    with pytest.raises(ScheduleError) as err:
        parse_standard(schedule)
    assert str(err.value) == error


@pytest.mark.parametrize(
    "schedule",
    ["*/5 * * * *", "0 0 * * sun", "0 12 1 jan,jul ?", "@hourly", "@every 90s", "1-10/3 * * * MON-FRI"],
)
def test_robfig_grammar_accepts(schedule: str) -> None:
    parse_standard(schedule)


def test_time_zones() -> None:
    assert time_zone_error("Europe/Berlin") is None and time_zone_error("Etc/UTC") is None
    assert time_zone_error("Mars/Olympus") == "unknown time zone Mars/Olympus"
    assert time_zone_error("../etc") == "unknown time zone ../etc"
    assert time_zone_error("Local").startswith("timeZone must be an explicit time zone")


def test_defaults(batch: client.BatchV1Api, namespace: str) -> None:
    made = batch.create_namespaced_cron_job(namespace, cronjob("tick"))
    spec = made.spec
    assert (
        spec.concurrency_policy,
        spec.suspend,
        spec.successful_jobs_history_limit,
        spec.failed_jobs_history_limit,
        spec.time_zone,
    ) == ("Allow", False, 3, 1, None)
    assert spec.job_template.spec.template.spec.dns_policy == "ClusterFirst"
    assert spec.job_template.spec.backoff_limit is None  # Job defaults belong to Jobs
    assert made.metadata.generation == 1


def test_validation(batch: client.BatchV1Api, namespace: str) -> None:
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_cron_job(namespace, cronjob("a", "every minute"))
    assert message(err) == (
        'CronJob.batch "a" is invalid: spec.schedule: Invalid value: "every minute": '
        "expected exactly 5 fields, found 2: [every minute]"
    )
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_cron_job(namespace, cronjob("b", timeZone="Mars/Olympus"))
    assert message(err) == (
        'CronJob.batch "b" is invalid: spec.timeZone: Invalid value: "Mars/Olympus": '
        "unknown time zone Mars/Olympus"
    )
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_cron_job(namespace, cronjob("c", "TZ=UTC 0 * * * *"))
    assert "cannot use TZ or CRON_TZ in schedule, use timeZone field instead" in message(err)
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_cron_job(namespace, cronjob("d", concurrencyPolicy="Sometimes"))
    assert (
        'spec.concurrencyPolicy: Unsupported value: "Sometimes": supported values: "Allow", "Forbid", '
        '"Replace"'
    ) in message(err)
    bad_template = cronjob("e")
    bad_template["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    bad_template["spec"]["jobTemplate"]["spec"]["selector"] = {"matchLabels": {"a": "b"}}
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_cron_job(namespace, bad_template)
    assert message(err) == (
        'CronJob.batch "e" is invalid: [spec.jobTemplate.spec.template.spec.restartPolicy: Required value: '
        'valid values: "OnFailure", "Never", spec.jobTemplate.spec.selector: Invalid value: '
        '{"matchLabels":{"a":"b"}}: `selector` will be auto-generated]'
    )
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_cron_job(namespace, cronjob("x" * 53))
    assert f'metadata.name: Invalid value: "{"x" * 53}": must be no more than 52 characters' in message(err)
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_cron_job(namespace, cronjob("f", startingDeadlineSeconds=-1))
    assert "spec.startingDeadlineSeconds: Invalid value: -1: must be greater than or equal to 0" in message(
        err
    )
    made = batch.create_namespaced_cron_job(namespace, cronjob("berlin", timeZone="Europe/Berlin"))
    with pytest.raises(ApiException) as err:
        batch.patch_namespaced_cron_job("berlin", namespace, {"spec": {"schedule": "60 * * * *"}})
    assert message(err).startswith(
        'CronJob.batch "berlin" is invalid: spec.schedule: Invalid value: "60 * * * *"'
    )
    assert made.spec.time_zone == "Europe/Berlin"


def test_kubectl_create_and_columns(kubectl: Kubectl, batch: client.BatchV1Api, namespace: str) -> None:
    kubectl.run(
        "create",
        "cronjob",
        "hello",
        "--image=busybox:1.36",
        "--schedule=*/1 * * * *",
        "-n",
        namespace,
        "--",
        "echo",
        "hi",
    )
    made = batch.read_namespaced_cron_job("hello", namespace)
    assert (
        made.spec.schedule == "*/1 * * * *"
        and made.spec.job_template.spec.template.spec.restart_policy == "OnFailure"
    )
    batch.create_namespaced_cron_job(
        namespace, cronjob("zoned", "0 3 * * *", timeZone="Asia/Tokyo", suspend=True)
    )
    out = kubectl.run("get", "cronjobs", "-n", namespace).stdout.splitlines()
    assert out[0].split() == ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE"]
    rows = {line.split()[0]: line.split() for line in out[1:]}
    assert rows["hello"][1:9] == ["*/1", "*", "*", "*", "*", "<none>", "False", "0"]
    assert rows["hello"][9] == "<none>"
    assert rows["zoned"][1:10] == ["0", "3", "*", "*", "*", "Asia/Tokyo", "True", "0", "<none>"]
    done = kubectl.run(
        "create", "cronjob", "bad", "--image=busybox", "--schedule=* * *", "-n", namespace, check=False
    )
    assert (
        done.returncode != 0
        and 'spec.schedule: Invalid value: "* * *": expected exactly 5 fields' in done.stderr
    )


def test_kubectl_create_job_from_a_cronjob(
    kubectl: Kubectl, batch: client.BatchV1Api, namespace: str
) -> None:
    cj = batch.create_namespaced_cron_job(namespace, cronjob("nightly", "0 2 * * *"))
    kubectl.run("create", "job", "now", "--from=cronjob/nightly", "-n", namespace)
    made = batch.read_namespaced_job("now", namespace)
    assert made.metadata.annotations == {"cronjob.kubernetes.io/instantiate": "manual"}
    ref = made.metadata.owner_references[0]
    assert (ref.kind, ref.name, ref.uid, ref.controller) == ("CronJob", "nightly", cj.metadata.uid, True)
    assert made.spec.template.spec.restart_policy == "OnFailure"
    assert made.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": made.metadata.uid}
