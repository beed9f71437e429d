"""The ReplicationController loop (the ReplicaSet controller over core/v1 ReplicationControllers) against
the real API server: an RC gets its pods and its status, scales, and a DELETE naming no propagation
orphans its pods (core/v1's default) while kubectl's background deletion takes them along. A ReplicaSet
with a long name still makes pods (generateName is cut as upstream's name generator cuts it)."""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from tests.controllers.conftest import eventually, mark_ready, running
from tests.controllers.test_replicaset_integration import owned, replicaset


def rc(name: str, replicas: int, app: str = "") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ReplicationController",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": {"app": app or name}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }


def gone(read) -> bool:  # type: ignore[no-untyped-def]
    try:
        read()
    except ApiException as err:
        return err.status == 404
    return False


async def test_an_rc_gets_its_pods_and_status(apiserver, v1, namespace):
    async with running(apiserver, "replicationcontroller"):
        made = v1.create_namespaced_replication_controller(namespace, rc("web", 2))
        pods = await eventually(
            lambda: (p := owned(v1, namespace, made.metadata.uid)) and len(p) == 2 and p, what="2 pods"
        )
        ref = pods[0].metadata.owner_references[0]
        assert (ref.api_version, ref.kind, ref.name, ref.block_owner_deletion) == (
            "v1",
            "ReplicationController",
            "web",
            True,
        )
        assert all(p.metadata.name.startswith("web-") and p.metadata.labels == {"app": "web"} for p in pods)
        mark_ready(v1, pods[0])
        status = await eventually(
            lambda: (
                (s := v1.read_namespaced_replication_controller_status("web", namespace).status)
                and s.ready_replicas == 1
                and s
            ),
            what="status",
        )
        assert (status.replicas, status.fully_labeled_replicas, status.observed_generation) == (2, 2, 1)
        events = await eventually(
            lambda: [e for e in v1.list_namespaced_event(namespace).items if e.reason == "SuccessfulCreate"]
        )
        assert events[0].source.component == "replication-controller"
        v1.patch_namespaced_replication_controller_scale("web", namespace, {"spec": {"replicas": 1}})
        await eventually(lambda: len(owned(v1, namespace, made.metadata.uid)) == 1, what="scaled down to 1")


async def test_deleting_an_rc_orphans_its_pods_unless_asked_to_cascade(apiserver, v1, namespace):
    async with running(apiserver, "replicationcontroller", "garbage-collector"):
        made = v1.create_namespaced_replication_controller(namespace, rc("old", 2))
        pods = await eventually(lambda: (p := owned(v1, namespace, made.metadata.uid)) and len(p) == 2 and p)
        v1.delete_namespaced_replication_controller("old", namespace)  # no propagation: core/v1 orphans
        await eventually(
            lambda: gone(lambda: v1.read_namespaced_replication_controller("old", namespace)),
            what="the RC to go",
        )
        left = v1.list_namespaced_pod(namespace).items
        assert {p.metadata.uid for p in left} == {p.metadata.uid for p in pods}
        assert all(not p.metadata.owner_references and not p.metadata.deletion_timestamp for p in left)
        again = v1.create_namespaced_replication_controller(namespace, rc("new", 2, app="old"))
        # The new RC adopts the orphans (same selector) rather than making pods ...
        await eventually(lambda: len(owned(v1, namespace, again.metadata.uid)) == 2, what="adoption")
        assert len(v1.list_namespaced_pod(namespace).items) == 2
        # ... and a background deletion takes them along.
        v1.delete_namespaced_replication_controller("new", namespace, propagation_policy="Background")
        await eventually(
            lambda: (
                not [p for p in v1.list_namespaced_pod(namespace).items if not p.metadata.deletion_timestamp]
            ),
            what="the pods to go with their RC",
        )


async def test_a_replicaset_with_a_long_name_makes_pods(apiserver, v1, apps, namespace):
    name = "r" * 250
    body = replicaset(name, 1, labels={"app": "long"})
    async with running(apiserver, "replicaset"):
        rs = apps.create_namespaced_replica_set(namespace, body)
        pods = await eventually(
            lambda: owned(v1, namespace, rs.metadata.uid), what="a pod of a long-named ReplicaSet"
        )
        assert len(pods[0].metadata.name) == 63 and pods[0].metadata.name.startswith("r" * 58)
        assert pods[0].metadata.generate_name == f"{name}-"
