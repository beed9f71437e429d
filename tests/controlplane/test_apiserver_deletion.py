"""DELETE as upstream's generic store answers it, through the official client and kubectl, with no
garbage collector running (so the finalizers a DELETE leaves stay where the tests can read them):
propagationPolicy and orphanDependents (body or query), each kind's default policy, a second DELETE
changing a pending one, the 422s for invalid options, and the answer's status code and body."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controlplane.conftest import Kubectl


def raw(response: Any) -> tuple[int, dict[str, Any]]:
    """(status code, body) of a call made with _preload_content=False."""
    return response.status, json.loads(response.data)


def configmap(name: str, finalizers: list[str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, **({"finalizers": finalizers} if finalizers else {})}}


def replicaset(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }


def rc(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }


def gone(read: Any) -> bool:
    try:
        read()
    except ApiException as err:
        return err.status == 404
    return False


@pytest.fixture(scope="module")
def apps(api: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api)


def test_foreground_marks_and_keeps_the_object_with_its_finalizer(v1, apps, namespace):
    created = apps.create_namespaced_replica_set(namespace, replicaset("web"))
    status, body = raw(
        apps.delete_namespaced_replica_set(
            "web",
            namespace,
            body=client.V1DeleteOptions(propagation_policy="Foreground"),
            _preload_content=False,
        )
    )
    # 200 with the object (not a Status) while the finalizer holds it.
    assert status == 200 and body["kind"] == "ReplicaSet"
    meta = body["metadata"]
    assert meta["finalizers"] == ["foregroundDeletion"] and meta["deletionTimestamp"]
    assert meta["deletionGracePeriodSeconds"] == 0
    assert meta["generation"] == created.metadata.generation + 1  # markAsDeleting bumps it
    held = apps.read_namespaced_replica_set("web", namespace)
    assert held.metadata.deletion_timestamp is not None and held.metadata.finalizers == ["foregroundDeletion"]


def test_orphan_from_the_query_string_and_the_legacy_field(v1, namespace):
    v1.create_namespaced_config_map(namespace, configmap("q"))
    status, body = raw(
        v1.delete_namespaced_config_map("q", namespace, propagation_policy="Orphan", _preload_content=False)
    )
    assert status == 200 and body["metadata"]["finalizers"] == ["orphan"]
    v1.create_namespaced_config_map(namespace, configmap("legacy"))
    status, body = raw(
        v1.delete_namespaced_config_map(
            "legacy", namespace, body=client.V1DeleteOptions(orphan_dependents=True), _preload_content=False
        )
    )
    assert status == 200 and body["metadata"]["finalizers"] == ["orphan"]


def test_a_second_delete_changes_the_pending_policy(v1, apps, namespace):
    apps.create_namespaced_replica_set(namespace, replicaset("web"))
    apps.delete_namespaced_replica_set("web", namespace, propagation_policy="Foreground")
    first = apps.read_namespaced_replica_set("web", namespace).metadata
    status, body = raw(
        apps.delete_namespaced_replica_set(
            "web", namespace, propagation_policy="Orphan", _preload_content=False
        )
    )
    assert status == 200 and body["metadata"]["finalizers"] == ["orphan"]
    assert body["metadata"]["deletionTimestamp"] == first.deletion_timestamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    # The same policy again changes nothing (no write).
    _, again = raw(
        apps.delete_namespaced_replica_set(
            "web", namespace, propagation_policy="Orphan", _preload_content=False
        )
    )
    assert again["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"]
    # Background drops the GC finalizer; nothing else holds it, so it goes now.
    status, body = raw(
        apps.delete_namespaced_replica_set(
            "web", namespace, propagation_policy="Background", _preload_content=False
        )
    )
    assert status == 200 and body["kind"] == "Status" and body["status"] == "Success"
    assert gone(lambda: apps.read_namespaced_replica_set("web", namespace))


def test_other_finalizers_are_kept_and_orphan_dependents_false_answers_202(v1, namespace):
    v1.create_namespaced_config_map(namespace, configmap("held", ["example.com/hold"]))
    status, body = raw(
        v1.delete_namespaced_config_map(
            "held",
            namespace,
            body=client.V1DeleteOptions(propagation_policy="Foreground"),
            _preload_content=False,
        )
    )
    assert status == 200 and body["metadata"]["finalizers"] == ["example.com/hold", "foregroundDeletion"]
    # orphanDependents=false removes both GC finalizers (it asks for neither in the generic store) and,
    # the object staying, is the one case upstream answers 202 Accepted.
    status, body = raw(
        v1.delete_namespaced_config_map(
            "held", namespace, body=client.V1DeleteOptions(orphan_dependents=False), _preload_content=False
        )
    )
    assert (
        status == 202
        and body["kind"] == "ConfigMap"
        and body["metadata"]["finalizers"] == ["example.com/hold"]
    )
    # A held object without that request is a 200.
    status, _ = raw(v1.delete_namespaced_config_map("held", namespace, _preload_content=False))
    assert status == 200
    v1.create_namespaced_config_map(namespace, configmap("free"))
    status, body = raw(
        v1.delete_namespaced_config_map(
            "free", namespace, body=client.V1DeleteOptions(orphan_dependents=False), _preload_content=False
        )
    )
    assert status == 200 and body["kind"] == "Status"  # gone at once: no 202


def test_invalid_options_are_refused_before_the_object_is_looked_up(v1, namespace):
    with pytest.raises(ApiException) as err:
        v1.delete_namespaced_config_map(
            "no-such",
            namespace,
            body=client.V1DeleteOptions(orphan_dependents=True, propagation_policy="Orphan"),
        )
    body = json.loads(err.value.body)
    assert err.value.status == 422 and body["reason"] == "Invalid"
    assert body["message"] == (
        'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Invalid value: "Orphan": '
        "orphanDependents and deletionPropagation cannot be both set"
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "propagationPolicy",
            "message": 'Invalid value: "Orphan": orphanDependents and deletionPropagation cannot be both set',
        }
    ]
    with pytest.raises(ApiException) as err:
        v1.delete_namespaced_config_map("no-such", namespace, propagation_policy="Sideways")
    assert err.value.status == 422 and json.loads(err.value.body)["message"] == (
        'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Sideways": '
        'supported values: "Foreground", "Background", "Orphan", "nil"'
    )
    with pytest.raises(ApiException) as err:
        v1.delete_namespaced_config_map("no-such", namespace, body=client.V1DeleteOptions(dry_run=["Maybe"]))
    assert err.value.status == 422 and json.loads(err.value.body)["message"] == (
        'DeleteOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"Maybe"}: supported values: "All"'
    )
    # (the client will not send a bool that is none; the server's answer is a 400 naming it)
    answer = v1.api_client.call_api(
        "DELETE",
        f"{v1.api_client.configuration.host}/api/v1/namespaces/{namespace}/configmaps/x?orphanDependents=perhaps",
        header_params={"Accept": "application/json"},
    )
    answer.read()
    assert answer.status == 400 and json.loads(answer.data)["message"] == (
        'invalid value "perhaps" for query parameter orphanDependents: strconv.ParseBool: parsing "perhaps": invalid syntax'
    )


def test_each_kinds_default_policy(v1, apps, namespace):
    # core/v1 ReplicationController orphans by default (upstream keeps it for compatibility) ...
    v1.create_namespaced_replication_controller(namespace, rc("old"))
    status, body = raw(v1.delete_namespaced_replication_controller("old", namespace, _preload_content=False))
    assert (
        status == 200
        and body["kind"] == "ReplicationController"
        and body["metadata"]["finalizers"] == ["orphan"]
    )
    # ... unless asked otherwise; apps/v1 kinds and the rest delete in the background (gone at once).
    v1.create_namespaced_replication_controller(namespace, rc("old2"))
    status, body = raw(
        v1.delete_namespaced_replication_controller(
            "old2", namespace, propagation_policy="Background", _preload_content=False
        )
    )
    assert status == 200 and body["kind"] == "Status"
    apps.create_namespaced_replica_set(namespace, replicaset("new"))
    status, body = raw(apps.delete_namespaced_replica_set("new", namespace, _preload_content=False))
    assert status == 200 and body["kind"] == "Status"
    # Events never get the garbage collector's finalizers (Unsupported).
    event = v1.create_namespaced_event(
        namespace,
        {
            "metadata": {"name": "e"},
            "involvedObject": {"kind": "Pod", "name": "p"},
            "reason": "R",
            "message": "m",
        },
    )
    status, body = raw(
        v1.delete_namespaced_event(
            event.metadata.name, namespace, propagation_policy="Orphan", _preload_content=False
        )
    )
    assert status == 200 and body["kind"] == "Status"


def test_the_answer_is_the_object_for_kinds_that_return_it_and_a_status_for_the_others(v1, apps, namespace):
    svc = v1.create_namespaced_service(
        namespace, {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}
    )
    deleted = v1.delete_namespaced_service("s", namespace)
    assert isinstance(deleted, client.V1Service) and deleted.metadata.uid == svc.metadata.uid
    assert deleted.spec.ports[0].port == 80
    sa = v1.create_namespaced_service_account(namespace, {"metadata": {"name": "robot"}})
    deleted_sa = v1.delete_namespaced_service_account("robot", namespace)
    assert isinstance(deleted_sa, client.V1ServiceAccount) and deleted_sa.metadata.uid == sa.metadata.uid
    v1.create_namespaced_pod_template(
        namespace,
        {
            "metadata": {"name": "t"},
            "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        },
    )
    assert isinstance(v1.delete_namespaced_pod_template("t", namespace), client.V1PodTemplate)
    cm = v1.create_namespaced_config_map(namespace, configmap("c"))
    status, body = raw(v1.delete_namespaced_config_map("c", namespace, _preload_content=False))
    assert (status, body) == (
        200,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": "c", "kind": "configmaps", "uid": cm.metadata.uid},
        },
    )
    rs = apps.create_namespaced_replica_set(namespace, replicaset("r"))
    _, body = raw(apps.delete_namespaced_replica_set("r", namespace, _preload_content=False))
    assert body["details"] == {"name": "r", "group": "apps", "kind": "replicasets", "uid": rs.metadata.uid}


def test_a_pending_graceful_deletion_keeps_its_finalizers(v1, namespace):
    v1.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "p"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    first = v1.delete_namespaced_pod("p", namespace)
    assert first.metadata.deletion_grace_period_seconds == 30 and not first.metadata.finalizers
    # Already going gracefully and nothing shortened: upstream leaves it as it is, finalizers too.
    again = v1.delete_namespaced_pod("p", namespace, propagation_policy="Orphan")
    assert (
        not again.metadata.finalizers and again.metadata.resource_version == first.metadata.resource_version
    )
    shorter = v1.delete_namespaced_pod(
        "p", namespace, grace_period_seconds=10, propagation_policy="Foreground"
    )
    assert shorter.metadata.deletion_grace_period_seconds == 10 and shorter.metadata.finalizers == [
        "foregroundDeletion"
    ]
    assert (first.metadata.deletion_timestamp - shorter.metadata.deletion_timestamp).total_seconds() == 20
    # A negative grace period counts as 1 s.
    assert (
        v1.delete_namespaced_pod(
            "p", namespace, grace_period_seconds=-5
        ).metadata.deletion_grace_period_seconds
        == 1
    )


def test_namespace_deletion_takes_the_gc_finalizers_from_the_request(v1):
    name = f"t-{uuid.uuid4().hex[:8]}"
    v1.create_namespace({"metadata": {"name": name}})
    # Something the namespace finalizer cannot remove keeps the namespace being emptied.
    v1.create_namespaced_config_map(name, configmap("held", ["example.com/hold"]))
    status, body = raw(
        v1.delete_namespace(
            name, body=client.V1DeleteOptions(orphan_dependents=False), _preload_content=False
        )
    )
    # orphanDependents=false means foreground for namespaces (their store's own rule); held: 202.
    assert (
        status == 202
        and body["kind"] == "Namespace"
        and body["metadata"]["finalizers"] == ["foregroundDeletion"]
    )
    assert body["status"]["phase"] == "Terminating"
    # A DELETE while it is emptied changes nothing.
    _, again = raw(v1.delete_namespace(name, propagation_policy="Orphan", _preload_content=False))
    assert again["metadata"]["finalizers"] == ["foregroundDeletion"]
    with pytest.raises(ApiException) as err:
        v1.delete_namespace(
            name, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="other"))
        )
    assert err.value.status == 409 and json.loads(err.value.body)["message"] == (
        f'Operation cannot be fulfilled on namespaces "{name}": Precondition failed: UID in precondition: other, '
        f"UID in object meta: {body['metadata']['uid']}"
    )
    v1.patch_namespaced_config_map("held", name, {"metadata": {"finalizers": None}})


def test_resource_version_precondition_names_the_kind(apps, namespace):
    rs = apps.create_namespaced_replica_set(namespace, replicaset("web"))
    with pytest.raises(ApiException) as err:
        apps.delete_namespaced_replica_set(
            "web",
            namespace,
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(resource_version="1")),
        )
    assert err.value.status == 409
    body = json.loads(err.value.body)
    assert body["message"] == (
        f'Operation cannot be fulfilled on ReplicaSet.apps "web": the ResourceVersion in the precondition (1) does not '
        f"match the ResourceVersion in record ({rs.metadata.resource_version}). The object might have been modified"
    )
    assert body["details"] == {"name": "web", "group": "apps", "kind": "ReplicaSet"}


def test_dry_run_changes_nothing(v1, namespace):
    v1.create_namespaced_config_map(namespace, configmap("d"))
    status, body = raw(
        v1.delete_namespaced_config_map(
            "d", namespace, dry_run="All", propagation_policy="Foreground", _preload_content=False
        )
    )
    assert status == 200 and body["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert not v1.read_namespaced_config_map("d", namespace).metadata.finalizers


def test_generate_name_is_cut_to_leave_room_for_the_random_suffix(v1, namespace):
    base = "a" * 70
    made = v1.create_namespaced_config_map(namespace, {"metadata": {"generateName": base}})
    assert len(made.metadata.name) == 63 and made.metadata.name.startswith("a" * 58)
    assert made.metadata.generate_name == base


def test_kubectl_delete_cascade_flags(kubectl: Kubectl, v1, apps, namespace):
    apps.create_namespaced_replica_set(namespace, replicaset("fg"))
    out = kubectl("-n", namespace, "delete", "rs", "fg", "--cascade=foreground", "--wait=false")
    assert out.strip() == 'replicaset.apps "fg" deleted'
    assert apps.read_namespaced_replica_set("fg", namespace).metadata.finalizers == ["foregroundDeletion"]
    v1.create_namespaced_config_map(namespace, configmap("or"))
    kubectl("-n", namespace, "delete", "configmap", "or", "--cascade=orphan", "--wait=false")
    assert v1.read_namespaced_config_map("or", namespace).metadata.finalizers == ["orphan"]
    # kubectl's default is background: an RC, orphaning by default on the server, goes at once.
    v1.create_namespaced_replication_controller(namespace, rc("bg"))
    kubectl("-n", namespace, "delete", "rc", "bg")
    assert gone(lambda: v1.read_namespaced_replication_controller("bg", namespace))
