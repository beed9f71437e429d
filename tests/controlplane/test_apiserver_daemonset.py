"""apps/v1 DaemonSet served as upstream serves it: defaults (RollingUpdate, maxUnavailable 1, maxSurge 0),
the template generation annotation, validation with upstream's 422 texts (a selector not matching the
template, pods that do not always restart, rolling-update bounds, an immutable selector), the status
subresource and kubectl's columns."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controlplane.conftest import Kubectl, message

GENERATION = "deprecated.daemonset.template.generation"


def ds(name: str, labels: dict | None = None, **spec: object) -> dict:
    labels = labels or {"app": name}
    body: dict = {
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    }
    body["spec"].update(spec)
    return body


def test_defaults_and_template_generation(apps: client.AppsV1Api, namespace: str) -> None:
    made = apps.create_namespaced_daemon_set(namespace, ds("agent"))
    strategy = made.spec.update_strategy
    assert strategy.type == "RollingUpdate"
    assert (strategy.rolling_update.max_unavailable, strategy.rolling_update.max_surge) == (1, 0)
    assert made.spec.revision_history_limit == 10 and made.metadata.generation == 1
    assert made.metadata.annotations[GENERATION] == "1"
    assert made.spec.template.spec.restart_policy == "Always"
    bumped = apps.patch_namespaced_daemon_set(
        "agent",
        namespace,
        {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}}}},
    )
    assert bumped.metadata.annotations[GENERATION] == "2" and bumped.metadata.generation == 2
    same = apps.patch_namespaced_daemon_set("agent", namespace, {"spec": {"minReadySeconds": 3}})
    assert same.metadata.annotations[GENERATION] == "2"
    on_delete = apps.create_namespaced_daemon_set(
        namespace, ds("manual", updateStrategy={"type": "OnDelete"})
    )
    assert on_delete.spec.update_strategy.rolling_update is None


def test_validation(apps: client.AppsV1Api, namespace: str) -> None:
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_daemon_set(namespace, ds("a", labels={"app": "other"}))
    assert message(err) == (
        'DaemonSet.apps "a" is invalid: spec.template.metadata.labels: Invalid value: '
        '{"app":"other"}: `selector` does not match template `labels`'
    )
    bad_restart = ds("b")
    bad_restart["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_daemon_set(namespace, bad_restart)
    assert message(err) == (
        'DaemonSet.apps "b" is invalid: spec.template.spec.restartPolicy: Unsupported value: '
        '"Never": supported values: "Always"'
    )
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_daemon_set(
            namespace,
            ds(
                "c",
                updateStrategy={
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1},
                },
            ),
        )
    assert message(err) == (
        'DaemonSet.apps "c" is invalid: spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: '
        "1: may not be set when maxUnavailable is non-zero"
    )
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_daemon_set(
            namespace,
            ds(
                "d",
                updateStrategy={
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0},
                },
            ),
        )
    assert message(err) == (
        'DaemonSet.apps "d" is invalid: spec.updateStrategy.rollingUpdate.maxUnavailable: '
        "Required value: cannot be 0 when maxSurge is 0"
    )
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_daemon_set(namespace, ds("e", updateStrategy={"type": "Sometimes"}))
    assert (
        'spec.updateStrategy.type: Unsupported value: "Sometimes": supported values: "OnDelete", '
        '"RollingUpdate"'
    ) in message(err)
    surge = apps.create_namespaced_daemon_set(
        namespace,
        ds(
            "f",
            updateStrategy={
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "20%"},
            },
        ),
    )
    assert surge.spec.update_strategy.rolling_update.max_surge == "20%"
    with pytest.raises(ApiException) as err:
        apps.patch_namespaced_daemon_set(
            "f",
            namespace,
            {
                "spec": {
                    "selector": {"matchLabels": {"app": "f", "x": "y"}},
                    "template": {"metadata": {"labels": {"x": "y"}}},
                }
            },
        )
    assert 'spec.selector: Invalid value: {"matchLabels":{"app":"f","x":"y"}}: field is immutable' in message(
        err
    )


def test_status_and_columns(kubectl: Kubectl, apps: client.AppsV1Api, namespace: str) -> None:
    sel = ds("agent")
    sel["spec"]["template"]["spec"]["nodeSelector"] = {"disk": "ssd"}
    apps.create_namespaced_daemon_set(
        namespace,
        {
            **sel,
            "status": {
                "numberReady": 4,
                "desiredNumberScheduled": 4,
                "currentNumberScheduled": 4,
                "numberMisscheduled": 0,
            },
        },
    )
    reset = apps.read_namespaced_daemon_set_status("agent", namespace).status  # Go's zero DaemonSetStatus
    assert (
        reset.current_number_scheduled,
        reset.number_misscheduled,
        reset.desired_number_scheduled,
        reset.number_ready,
        reset.number_available,
    ) == (0, 0, 0, 0, None)
    apps.patch_namespaced_daemon_set_status(
        "agent",
        namespace,
        {
            "status": {
                "desiredNumberScheduled": 3,
                "currentNumberScheduled": 3,
                "numberReady": 2,
                "updatedNumberScheduled": 1,
                "numberAvailable": 2,
                "numberMisscheduled": 0,
            }
        },
    )
    out = kubectl.run("get", "ds", "-n", namespace).stdout.splitlines()
    assert out[0].split() == [
        "NAME",
        "DESIRED",
        "CURRENT",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "NODE",
        "SELECTOR",
        "AGE",
    ]
    assert out[1].split()[:7] == ["agent", "3", "3", "2", "1", "2", "disk=ssd"]
    wide = kubectl.run("get", "daemonset", "agent", "-o", "wide", "-n", namespace).stdout.splitlines()
    assert wide[1].split()[-3:] == ["c", "busybox:1.36", "app=agent"]
