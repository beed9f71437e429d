"""The Node authorizer and NodeRestriction on the real server, with a node's own client certificate
(system:node:<name>, O=system:nodes): what a kubelet may read and write, and upstream's refusals."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from pykubelet.rig.apiserver import ApiServer, api_client

pytestmark = pytest.mark.integration


def node_body(name: str) -> dict:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}


def bound_pod(name: str, node: str, secret: str, configmap: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "c", "image": "busybox", "envFrom": [{"configMapRef": {"name": configmap}}]}
            ],
            "volumes": [{"name": "s", "secret": {"secretName": secret}}],
        },
    }


@pytest.fixture
def nodes(
    apiserver: ApiServer, v1: client.CoreV1Api, tmp_path: Path
) -> Iterator[tuple[str, str, client.CoreV1Api]]:
    """Two registered nodes, and the first one's own API client."""
    mine, other = f"n-{uuid.uuid4().hex[:6]}", f"n-{uuid.uuid4().hex[:6]}"
    for name in (mine, other):
        v1.create_node(node_body(name))
    kubeconfig = apiserver.client_kubeconfig(
        f"system:node:{mine}", ("system:nodes",), tmp_path / "kubelet.kubeconfig"
    )
    with api_client(kubeconfig) as api:
        yield mine, other, client.CoreV1Api(api)
    for name in (mine, other):
        v1.delete_node(name)


def forbidden(call, *args, **kwargs) -> str:
    with pytest.raises(ApiException) as err:
        call(*args, **kwargs)
    assert err.value.status == 403, err.value.body
    return json.loads(err.value.body)["message"]


def test_a_node_reads_only_what_its_pods_use(
    nodes: tuple[str, str, client.CoreV1Api], v1: client.CoreV1Api, namespace: str
) -> None:
    mine, other, kubelet = nodes
    for name in ("mine-secret", "their-secret"):
        v1.create_namespaced_secret(namespace, {"metadata": {"name": name}, "stringData": {"k": "v"}})
    for name in ("mine-cm", "their-cm"):
        v1.create_namespaced_config_map(namespace, {"metadata": {"name": name}, "data": {"k": "v"}})
    v1.create_namespaced_pod(namespace, bound_pod("mine", mine, "mine-secret", "mine-cm"))
    v1.create_namespaced_pod(namespace, bound_pod("theirs", other, "their-secret", "their-cm"))
    assert kubelet.read_namespaced_secret("mine-secret", namespace).data == {"k": "dg=="}
    assert kubelet.read_namespaced_config_map("mine-cm", namespace).data == {"k": "v"}
    assert forbidden(kubelet.read_namespaced_secret, "their-secret", namespace) == (
        f'secrets "their-secret" is forbidden: User "system:node:{mine}" cannot get resource "secrets" in API group "" '
        f"in the namespace \"{namespace}\": no relationship found between node '{mine}' and this object"
    )
    assert "no relationship found" in forbidden(kubelet.read_namespaced_config_map, "their-cm", namespace)
    # a single-object watch (as the kubelet's secret manager does) is judged as that object; a list is refused
    assert kubelet.list_namespaced_secret(namespace, field_selector="metadata.name=mine-secret").items
    assert forbidden(kubelet.list_namespaced_secret, namespace).endswith(": No Object name found")
    # pods: only its own, and list/watch only by spec.nodeName=itself
    assert [
        p.metadata.name
        for p in kubelet.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={mine}").items
    ] == ["mine"]
    assert forbidden(kubelet.list_pod_for_all_namespaces).endswith(
        ": can only list/watch pods with spec.nodeName field selector"
    )
    assert kubelet.read_namespaced_pod("mine", namespace).spec.node_name == mine
    assert "no relationship found" in forbidden(kubelet.read_namespaced_pod, "theirs", namespace)
    # rebinding takes the access away at once: the pod is deleted and recreated on the other node
    v1.delete_namespaced_pod("mine", namespace, grace_period_seconds=0)
    assert "no relationship found" in forbidden(kubelet.read_namespaced_secret, "mine-secret", namespace)


def test_a_node_writes_only_itself(nodes: tuple[str, str, client.CoreV1Api], v1: client.CoreV1Api) -> None:
    mine, other, kubelet = nodes
    assert kubelet.read_node(mine).metadata.name == mine
    assert forbidden(kubelet.read_node, other).endswith(
        f": node '{mine}' cannot read '{other}', only its own Node object"
    )
    assert forbidden(kubelet.patch_node, other, {"metadata": {"labels": {"a": "b"}}}) == (
        f'nodes "{other}" is forbidden: node "{mine}" is not allowed to modify node "{other}"'
    )
    assert forbidden(
        kubelet.patch_node, mine, {"metadata": {"labels": {"node-restriction.kubernetes.io/x": "y"}}}
    ) == (f'nodes "{mine}" is forbidden: is not allowed to modify labels: node-restriction.kubernetes.io/x')
    assert forbidden(
        kubelet.patch_node, mine, {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
    ).endswith(f'node "{mine}" is not allowed to modify taints')
    kubelet.patch_node(
        mine, {"metadata": {"labels": {"example.com/team": "a", "node.kubernetes.io/pool": "p"}}}
    )
    kubelet.patch_node_status(mine, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert forbidden(kubelet.delete_node, mine).startswith(
        f'nodes "{mine}" is forbidden: User "system:node:{mine}" cannot delete'
    )


def test_a_node_touches_only_its_pods_and_lease(
    nodes: tuple[str, str, client.CoreV1Api], v1: client.CoreV1Api, api: client.ApiClient, namespace: str
) -> None:
    mine, other, kubelet = nodes
    for name, node in (("mine", mine), ("theirs", other)):
        v1.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": name},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
            },
        )
    kubelet.patch_namespaced_pod_status("mine", namespace, {"status": {"phase": "Running"}})
    assert forbidden(
        kubelet.patch_namespaced_pod_status, "theirs", namespace, {"status": {"phase": "Running"}}
    ) == (
        f'pods "theirs" is forbidden: node "{mine}" can only update pod status for pods with spec.nodeName set to itself'
    )
    assert forbidden(kubelet.delete_namespaced_pod, "theirs", namespace) == (
        f'pods "theirs" is forbidden: node "{mine}" can only delete pods with spec.nodeName set to itself'
    )
    assert forbidden(
        kubelet.create_namespaced_pod,
        namespace,
        {
            "metadata": {"name": "new"},
            "spec": {"nodeName": mine, "containers": [{"name": "c", "image": "busybox"}]},
        },
    ) == (
        f'pods "new" is forbidden: pod does not have "kubernetes.io/config.mirror" annotation, node "{mine}" can only '
        "create mirror pods"
    )
    kubelet.delete_namespaced_pod("mine", namespace, grace_period_seconds=0)
    leases = client.CoordinationV1Api(kubelet.api_client)
    lease = {"metadata": {"name": mine}, "spec": {"holderIdentity": mine, "leaseDurationSeconds": 40}}
    leases.create_namespaced_lease("kube-node-lease", lease)
    leases.replace_namespaced_lease(
        mine, "kube-node-lease", leases.read_namespaced_lease(mine, "kube-node-lease")
    )
    assert forbidden(
        leases.create_namespaced_lease, "kube-node-lease", {**lease, "metadata": {"name": other}}
    ) == (
        f'leases.coordination.k8s.io "{other}" is forbidden: can only access node lease with the same name as the '
        "requesting node"
    )
    assert forbidden(leases.read_namespaced_lease, mine, "default").endswith(
        ': can only access leases in the "kube-node-lease" system namespace'
    )
    client.CoordinationV1Api(api).delete_namespaced_lease(mine, "kube-node-lease")
    # Its rights cannot be listed: the Node authorizer says so.
    rules = client.AuthorizationV1Api(kubelet.api_client).create_self_subject_rules_review(
        client.V1SelfSubjectRulesReview(spec=client.V1SelfSubjectRulesReviewSpec(namespace=namespace))
    )
    assert (
        rules.status.incomplete
        and rules.status.evaluation_error == "node authorizer does not support user rule resolution"
    )


async def test_the_agent_registers_its_node_with_its_zone_and_a_reserved_label_is_refused(
    apiserver: ApiServer, v1: client.CoreV1Api, tmp_path: Path
) -> None:
    """The agent's registration on its own certificate: the Node is created with --node-labels (a zone,
    another domain's label) as NodeRestriction lets a kubelet; a label of the reserved domains outside the
    kubelet's set (which the agent's flag check refuses first, agent.nodelabels) is refused by the server
    too, with upstream's 403."""
    from agent.config import AgentConfig
    from agent.node.controller import NodeController
    from agent.node.status import RuntimeHealth
    from kubeclient.client import KubeClient
    from kubeclient.config import load_kubeconfig
    from kubeclient.errors import ApiError

    async def health() -> RuntimeHealth:
        return RuntimeHealth(True, True, "", "", True, "", "", "containerd://1.6.20")

    def agent(name: str, labels: dict[str, str]) -> NodeController:
        kubeconfig = apiserver.client_kubeconfig(
            f"system:node:{name}", ("system:nodes",), tmp_path / f"{name}.kubeconfig"
        )
        cfg = AgentConfig(node_name=name, node_ip="192.0.2.7", root_dir=str(tmp_path), node_labels=labels)
        return NodeController(KubeClient(load_kubeconfig(kubeconfig)), cfg, health)

    zoned, roled = f"n-{uuid.uuid4().hex[:6]}", f"n-{uuid.uuid4().hex[:6]}"
    node = agent(zoned, {"topology.kubernetes.io/zone": "zone-a", "example.com/pool": "blue"})
    refused = agent(roled, {"topology.kubernetes.io/zone": "zone-a", "node-role.kubernetes.io/worker": ""})
    try:
        await node.register()
        labels = v1.read_node(zoned).metadata.labels
        assert (labels["topology.kubernetes.io/zone"], labels["example.com/pool"]) == ("zone-a", "blue")
        assert labels["kubernetes.io/hostname"] == zoned
        with pytest.raises(ApiError) as err:
            await refused._register_once()  # one attempt: register() retries with backoff
        assert err.value.status == 403
        assert err.value.message == (
            f'nodes "{roled}" is forbidden: node "{roled}" is not allowed to set the following labels: '
            "node-role.kubernetes.io/worker"
        )
        assert roled not in {n.metadata.name for n in v1.list_node().items}
    finally:
        await node.client.close()
        await refused.client.close()
        v1.delete_node(zoned)
