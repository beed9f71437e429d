"""apps/v1 StatefulSet served as upstream serves it: defaults (OrderedReady, RollingUpdate partition 0,
history 10, Retain/Retain, one replica, claim templates defaulted), validation with upstream's 422 texts
(a selector not matching the template, policy names, the forbidden update of fixed spec fields),
maxUnavailable dropped while its feature gate is off, the status and scale subresources and kubectl's
columns."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controlplane.conftest import Kubectl, message

FORBIDDEN = (
    "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', "
    "'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are "
    "forbidden"
)


def sts(name: str, labels: dict | None = None, **spec: object) -> dict:
    body: dict = {
        "metadata": {"name": name},
        "spec": {
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels or {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    }
    body["spec"].update(spec)
    return body


def test_defaults(apps: client.AppsV1Api, namespace: str) -> None:
    claim = {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    body = sts("web", volumeClaimTemplates=[claim])
    # containers may mount a claim template (the controller adds its volume to each pod)
    body["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/d"}]
    made = apps.create_namespaced_stateful_set(namespace, body)
    spec = made.spec
    assert spec.pod_management_policy == "OrderedReady"
    assert spec.update_strategy.type == "RollingUpdate"
    assert spec.update_strategy.rolling_update.partition == 0
    assert spec.update_strategy.rolling_update.max_unavailable is None
    retention = spec.persistent_volume_claim_retention_policy
    assert (retention.when_deleted, retention.when_scaled) == ("Retain", "Retain")
    assert (spec.replicas, spec.revision_history_limit) == (1, 10)
    assert spec.template.spec.restart_policy == "Always"
    assert spec.volume_claim_templates[0].spec.volume_mode == "Filesystem"
    assert spec.volume_claim_templates[0].status.phase == "Pending"
    assert made.metadata.generation == 1 and made.status.replicas == 0 and made.status.ready_replicas is None
    on_delete = apps.create_namespaced_stateful_set(
        namespace, sts("manual", updateStrategy={"type": "OnDelete"}, podManagementPolicy="Parallel")
    )
    assert on_delete.spec.update_strategy.rolling_update is None
    assert on_delete.spec.pod_management_policy == "Parallel"
    gated = apps.create_namespaced_stateful_set(
        namespace,
        sts("gated", updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}}),
    )
    # MaxUnavailableStatefulSet is off by default in 1.32: the field is dropped, partition defaulted.
    assert gated.spec.update_strategy.rolling_update.max_unavailable is None
    assert gated.spec.update_strategy.rolling_update.partition == 0


def test_validation(apps: client.AppsV1Api, namespace: str) -> None:
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_stateful_set(namespace, sts("a", labels={"app": "other"}))
    assert message(err) == (
        'StatefulSet.apps "a" is invalid: spec.template.metadata.labels: Invalid value: '
        '{"app":"other"}: `selector` does not match template `labels`'
    )
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_stateful_set(namespace, sts("b", podManagementPolicy="Sometimes"))
    assert message(err) == (
        'StatefulSet.apps "b" is invalid: spec.podManagementPolicy: Invalid value: "Sometimes": '
        "must be 'OrderedReady' or 'Parallel'"
    )
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_stateful_set(
            namespace,
            sts("c", updateStrategy={"type": "OnDelete", "rollingUpdate": {"partition": 1}}),
        )
    assert "spec.updateStrategy.rollingUpdate: Invalid value:" in message(err)
    assert "only allowed for updateStrategy 'RollingUpdate'" in message(err)
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_stateful_set(
            namespace,
            sts("d", updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": -1}}),
        )
    assert message(err) == (
        'StatefulSet.apps "d" is invalid: spec.updateStrategy.rollingUpdate.partition: Invalid value: '
        "-1: must be greater than or equal to 0"
    )
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_stateful_set(
            namespace, sts("e", persistentVolumeClaimRetentionPolicy={"whenDeleted": "Keep"})
        )
    assert message(err) == (
        'StatefulSet.apps "e" is invalid: spec.persistentVolumeClaimRetentionPolicy.whenDeleted: '
        'Unsupported value: "Keep": supported values: "Retain", "Delete"'
    )
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_stateful_set(namespace, sts("f", replicas=-1, ordinals={"start": -2}))
    assert "spec.replicas: Invalid value: -1: must be greater than or equal to 0" in message(err)
    assert "spec.ordinals.start: Invalid value: -2: must be greater than or equal to 0" in message(err)
    never = sts("g")
    never["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_stateful_set(namespace, never)
    assert message(err) == (
        'StatefulSet.apps "g" is invalid: spec.template.spec.restartPolicy: Unsupported value: '
        '"Never": supported values: "Always"'
    )
    unknown = sts("i")
    unknown["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "data", "mountPath": "/d"}
    ]
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_stateful_set(namespace, unknown)
    assert 'spec.template.spec.containers[0].volumeMounts[0].name: Not found: "data"' in message(err)
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_stateful_set(namespace, sts("h", selector={"matchLabels": {}}))
    assert "spec.selector: Invalid value:" in message(err)
    assert "empty selector is not valid for statefulset." in message(err)


def test_forbidden_update(apps: client.AppsV1Api, namespace: str) -> None:
    apps.create_namespaced_stateful_set(namespace, sts("db"))
    for change in (
        {"spec": {"serviceName": "other"}},
        {"spec": {"podManagementPolicy": "Parallel"}},
        {"spec": {"volumeClaimTemplates": [{"metadata": {"name": "x"}, "spec": {}}]}},
        {"spec": {"revisionHistoryLimit": 3}},
    ):
        with pytest.raises(ApiException) as err:
            apps.patch_namespaced_stateful_set("db", namespace, change)
        assert message(err) == f'StatefulSet.apps "db" is invalid: {FORBIDDEN}', change
    changed = apps.patch_namespaced_stateful_set(
        "db",
        namespace,
        {
            "spec": {
                "replicas": 3,
                "ordinals": {"start": 5},
                "minReadySeconds": 2,
                "updateStrategy": {"type": "OnDelete", "rollingUpdate": None},
                "persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete"},
                "template": {"spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}},
            }
        },
    )
    assert changed.spec.replicas == 3 and changed.spec.ordinals.start == 5
    assert changed.spec.persistent_volume_claim_retention_policy.when_scaled == "Delete"
    assert changed.spec.update_strategy.type == "OnDelete"
    assert changed.metadata.generation == 2


def test_status_scale_and_columns(kubectl: Kubectl, apps: client.AppsV1Api, namespace: str) -> None:
    apps.create_namespaced_stateful_set(namespace, {**sts("web", replicas=3), "status": {"replicas": 9}})
    assert apps.read_namespaced_stateful_set_status("web", namespace).status.replicas == 0  # reset
    apps.patch_namespaced_stateful_set_status(
        "web",
        namespace,
        {
            "status": {
                "replicas": 3,
                "readyReplicas": 2,
                "currentReplicas": 3,
                "updatedReplicas": 3,
                "availableReplicas": 2,
                "currentRevision": "web-abc",
                "updateRevision": "web-abc",
                "collisionCount": 0,
                "observedGeneration": 1,
            }
        },
    )
    status = apps.read_namespaced_stateful_set("web", namespace).status
    assert (status.ready_replicas, status.current_revision, status.observed_generation) == (2, "web-abc", 1)
    scale = apps.read_namespaced_stateful_set_scale("web", namespace)
    assert (scale.spec.replicas, scale.status.replicas, scale.status.selector) == (3, 3, "app=web")
    kubectl("scale", "statefulset", "web", "--replicas=5", "-n", namespace)
    assert apps.read_namespaced_stateful_set("web", namespace).spec.replicas == 5
    with pytest.raises(ApiException) as err:
        apps.patch_namespaced_stateful_set_scale("web", namespace, {"spec": {"replicas": -1}})
    assert err.value.status == 422
    out = kubectl.run("get", "sts", "-n", namespace).stdout.splitlines()
    assert out[0].split() == ["NAME", "READY", "AGE"]
    assert out[1].split()[:2] == ["web", "2/5"]
    wide = kubectl.run("get", "statefulset", "web", "-o", "wide", "-n", namespace).stdout.splitlines()
    assert wide[0].split() == ["NAME", "READY", "AGE", "CONTAINERS", "IMAGES"]
    assert wide[1].split()[-2:] == ["c", "busybox:1.36"]
