"""core/v1 ReplicationController served as upstream serves it: defaulting from the template, validation
(422 with upstream's texts), status and scale subresources, field selector, kubectl's columns, short
name and category."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controlplane.conftest import Kubectl, message


def rc(name: str, **spec: object) -> dict:
    body: dict = {
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            }
        },
    }
    body["spec"].update(spec)
    return body


def test_defaults_come_from_the_template(v1: client.CoreV1Api, namespace: str) -> None:
    made = v1.create_namespaced_replication_controller(namespace, rc("web"))
    assert made.spec.selector == {"app": "web"} and made.metadata.labels == {"app": "web"}
    assert made.spec.replicas == 1 and made.metadata.generation == 1
    assert made.status is None or not made.status.replicas
    pod_spec = made.spec.template.spec
    assert pod_spec.restart_policy == "Always" and pod_spec.dns_policy == "ClusterFirst"
    assert pod_spec.containers[0].image_pull_policy == "IfNotPresent"
    # What the client sent wins over the defaults.
    own = v1.create_namespaced_replication_controller(
        namespace,
        {
            **rc("own", replicas=0, selector={"app": "own"}),
            "metadata": {"name": "own", "labels": {"team": "x"}},
        },
    )
    assert own.spec.replicas == 0 and own.metadata.labels == {"team": "x"}


def test_validation(v1: client.CoreV1Api, namespace: str) -> None:
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_replication_controller(namespace, rc("a", selector={"app": "other"}))
    assert message(err) == (
        'ReplicationController "a" is invalid: spec.template.metadata.labels: Invalid value: '
        '{"app":"a"}: `selector` does not match template `labels`'
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_replication_controller(namespace, {"metadata": {"name": "b"}, "spec": {}})
    assert (
        message(err)
        == 'ReplicationController "b" is invalid: [spec.selector: Required value, spec.template: Required value]'
    )
    bad = rc("c", replicas=-1)
    bad["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    bad["spec"]["template"]["spec"]["activeDeadlineSeconds"] = 5
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_replication_controller(namespace, bad)
    assert message(err) == (
        'ReplicationController "c" is invalid: [spec.replicas: Invalid value: -1: must be greater than or equal to 0, '
        'spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always", '
        "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicationController is not Supported]"
    )


def test_status_and_scale_subresources(v1: client.CoreV1Api, namespace: str) -> None:
    v1.create_namespaced_replication_controller(namespace, rc("web", replicas=2))
    # The main resource ignores status; status writes are checked.
    v1.patch_namespaced_replication_controller("web", namespace, {"status": {"replicas": 5}})
    status = v1.read_namespaced_replication_controller("web", namespace).status
    assert status is None or not status.replicas
    v1.patch_namespaced_replication_controller_status(
        "web", namespace, {"status": {"replicas": 2, "readyReplicas": 1}}
    )
    assert v1.read_namespaced_replication_controller_status("web", namespace).status.ready_replicas == 1
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_replication_controller_status(
            "web", namespace, {"status": {"replicas": 1, "readyReplicas": 2, "availableReplicas": 2}}
        )
    assert message(err) == (
        'ReplicationController "web" is invalid: [status.readyReplicas: Invalid value: 2: cannot be '
        "greater than status.replicas, status.availableReplicas: Invalid value: 2: cannot be greater "
        "than status.replicas]"
    )
    scale = v1.read_namespaced_replication_controller_scale("web", namespace)
    assert (scale.spec.replicas, scale.status.replicas, scale.status.selector) == (2, 2, "app=web")
    v1.patch_namespaced_replication_controller_scale("web", namespace, {"spec": {"replicas": 4}})
    updated = v1.read_namespaced_replication_controller("web", namespace)
    assert updated.spec.replicas == 4 and updated.metadata.generation == 2
    # Unlike apps/v1, the selector of an RC may change (with the template's labels still matching).
    v1.patch_namespaced_replication_controller(
        "web",
        namespace,
        {"spec": {"selector": {"app": "web", "v": "2"}, "template": {"metadata": {"labels": {"v": "2"}}}}},
    )
    assert v1.read_namespaced_replication_controller("web", namespace).spec.selector == {
        "app": "web",
        "v": "2",
    }
    assert (
        v1.list_namespaced_replication_controller(namespace, field_selector="status.replicas=2")
        .items[0]
        .metadata.name
        == "web"
    )
    assert not v1.list_namespaced_replication_controller(namespace, field_selector="status.replicas=3").items


def test_kubectl_columns_short_name_and_category(
    kubectl: Kubectl, v1: client.CoreV1Api, namespace: str
) -> None:
    manifest = yaml.safe_dump(rc("web", replicas=3) | {"apiVersion": "v1", "kind": "ReplicationController"})
    assert (
        kubectl("-n", namespace, "create", "-f", "-", input=manifest).strip()
        == "replicationcontroller/web created"
    )
    table = kubectl("-n", namespace, "get", "rc", "-o", "wide").splitlines()
    assert table[0].split() == [
        "NAME",
        "DESIRED",
        "CURRENT",
        "READY",
        "AGE",
        "CONTAINERS",
        "IMAGES",
        "SELECTOR",
    ]
    row = table[1].split()
    assert row[:4] == ["web", "3", "0", "0"] and row[5:] == ["c", "busybox:1.36", "app=web"]
    assert "replicationcontroller/web" in kubectl("-n", namespace, "get", "all", "-o", "name")
    rows = {tuple(line.split()) for line in kubectl("api-resources", "--no-headers").splitlines()}
    assert ("replicationcontrollers", "rc", "v1", "true", "ReplicationController") in rows
    kubectl("-n", namespace, "scale", "rc", "web", "--replicas=1")
    assert v1.read_namespaced_replication_controller("web", namespace).spec.replicas == 1
    assert "Selector is a label query over pods that should match the Replicas count" in kubectl(
        "explain", "rc.spec.selector"
    )
