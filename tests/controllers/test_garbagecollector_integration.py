"""The garbage collector against the real API server: dependents of a deleted owner go, an object whose
owner never existed goes, an object with a live owner stays."""

from __future__ import annotations

import uuid

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controllers.conftest import eventually, running
from tests.controllers.test_replicaset_integration import owned, replicaset


def gone(read) -> bool:  # type: ignore[no-untyped-def]
    try:
        read()
    except ApiException as err:
        return err.status == 404
    return False


async def test_background_deletion_removes_dependents(apiserver, v1, apps, namespace):
    async with running(apiserver, "replicaset", "garbage-collector"):
        rs = apps.create_namespaced_replica_set(namespace, replicaset("web", 3))
        await eventually(lambda: len(owned(v1, namespace, rs.metadata.uid)) == 3, what="3 pods")
        apps.delete_namespaced_replica_set("web", namespace, propagation_policy="Background")
        await eventually(
            lambda: (
                not [p for p in v1.list_namespaced_pod(namespace).items if not p.metadata.deletion_timestamp]
            ),
            what="the pods to go",
        )


async def test_an_object_whose_owner_never_existed_is_collected_and_one_with_an_owner_stays(
    apiserver, v1, namespace
):
    owner = v1.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = lambda uid: [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]  # noqa: E731
    v1.create_namespaced_config_map(
        namespace, {"metadata": {"name": "kept", "ownerReferences": ref(owner.metadata.uid)}}
    )
    v1.create_namespaced_config_map(
        namespace, {"metadata": {"name": "stray", "ownerReferences": ref(str(uuid.uuid4()))}}
    )
    async with running(apiserver, "garbage-collector"):
        await eventually(
            lambda: gone(lambda: v1.read_namespaced_config_map("stray", namespace)), what="stray to go"
        )
        assert v1.read_namespaced_config_map("kept", namespace).metadata.name == "kept"
        v1.delete_namespaced_config_map("owner", namespace)
        await eventually(
            lambda: gone(lambda: v1.read_namespaced_config_map("kept", namespace)),
            what="the dependent of a deleted owner to go",
        )


async def test_a_cluster_scoped_owner_of_namespaced_dependents(apiserver, v1, namespace):
    node = v1.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=f"gc-{uuid.uuid4().hex[:6]}")))
    leases = client.CoordinationV1Api(v1.api_client)
    leases.create_namespaced_lease(
        namespace,
        {
            "metadata": {
                "name": node.metadata.name,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": node.metadata.name, "uid": node.metadata.uid}
                ],
            },
            "spec": {},
        },
    )
    async with running(apiserver, "garbage-collector"):
        v1.delete_node(node.metadata.name)
        await eventually(
            lambda: gone(lambda: leases.read_namespaced_lease(node.metadata.name, namespace)),
            what="the node's lease to go",
        )
