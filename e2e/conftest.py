"""The e2e target: a cluster reached only through the Kubernetes API (and kubectl).

With KUBECONFIG set, the suite runs against that cluster (a kind cluster's upstream kubelet, say), on
node NODE_NAME (default: the first node) with image E2E_IMAGE (default busybox:1.36), and for the gRPC
probe scenarios E2E_GRPC_IMAGE (the rig's grpc-health image pushed somewhere the cluster pulls from;
those scenarios skip without it). Without KUBECONFIG, the suite starts the project's own single-machine
stack for the session (on a bridge and pod CIDR leased for it; PYKUBE_NODES=N: N nodes on this machine,
their pod CIDRs from a leased cluster CIDR; PYKUBE_ZONES=a,b: their topology.kubernetes.io/zone labels,
dealt round-robin as `up --zones` does) and tears it down at the end, checking that nothing the stack owns
is left on the host: no process, shim, mount or netns under its state dir, no veth on its bridge, the
bridge gone, no NAT entry for its CIDR (pykubelet.rig.leaks; what is not the stack's is never reported).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pykubelet.rig.leaks import Scope
from pykubelet.rig.netlease import lease_cluster_network, lease_network


@dataclass
class Target:
    kubeconfig: Path
    node_name: str
    image: str
    stack: object | None  # pykubelet.rig.stack.Stack when the target is our own
    grpc_image: str | None = None  # the rig's grpc-health image (a grpc.health.v1 server)


def _external_target() -> Target:
    from kubernetes import client, config

    kubeconfig = Path(os.environ["KUBECONFIG"])
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    node = os.environ.get("NODE_NAME") or api.list_node().items[0].metadata.name
    return Target(
        kubeconfig, node, os.environ.get("E2E_IMAGE", "busybox:1.36"), None, os.environ.get("E2E_GRPC_IMAGE")
    )


@pytest.fixture(scope="session")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    if os.environ.get("KUBECONFIG"):
        yield _external_target()
        return
    if os.geteuid() != 0:
        pytest.skip("the project's own stack needs root (containerd, network namespaces)")
    from pykubelet.rig.nodes import node_bridge
    from pykubelet.rig.stack import Stack, StackConfig, proxy_table

    nodes = int(os.environ.get("PYKUBE_NODES", "1"))  # several: a multi-node stack on this machine
    with lease_cluster_network("e") if nodes > 1 else lease_network("e") as net:
        config = StackConfig(
            state_dir=tmp_path_factory.mktemp("stack"),
            node_name="e2e-node",
            bridge=net.bridge,
            pod_cidr=net.pod_cidr,
            store=os.environ.get("PYKUBE_STORE", "sqlite"),  # PYKUBE_STORE=etcd: the stack on a local etcd
            nodes=nodes,
            cluster_cidr=net.pod_cidr if nodes > 1 else "",
            # PYKUBE_ZONES=zone-a,zone-b: the nodes' topology.kubernetes.io/zone, as `up --zones` deals them
            zones=tuple(z for z in os.environ.get("PYKUBE_ZONES", "").split(",") if z),
        )
        scope = Scope.of(
            config.state_dir,
            bridges=[net.bridge, *(node_bridge(net.bridge, i) for i in range(2, nodes + 1))],
            pod_cidrs=[net.pod_cidr],
            nft_tables=[f"ip {proxy_table(net.bridge)}"],
        )
        stack = Stack(config)
        stack.start()
        try:
            assert stack.images is not None
            yield Target(
                stack.kubeconfig, stack.node_name, stack.images.busybox, stack, stack.images.grpc_health
            )
        finally:
            problems = stack.stop()
            assert not problems, problems
            leaked = scope.leaked()
            assert not leaked, f"the e2e session left these on the host: {leaked}"


@pytest.fixture(scope="session")
def kubeconfig(target: Target) -> Path:
    return target.kubeconfig


@pytest.fixture(scope="session")
def node_name(target: Target) -> str:
    return target.node_name


@pytest.fixture(scope="session")
def image(target: Target) -> str:
    return target.image


@pytest.fixture(scope="session")
def grpc_image(target: Target) -> str:
    """An image whose /bin/grpc-health serves grpc.health.v1 (pykubelet.rig's; E2E_GRPC_IMAGE elsewhere)."""
    if not target.grpc_image:
        pytest.skip("no grpc-health image for this cluster (set E2E_GRPC_IMAGE)")
    return target.grpc_image


@pytest.fixture(scope="session")
def stack(target: Target):
    """The project's own stack, for scenarios that restart its parts; skipped on external clusters."""
    if target.stack is None:
        pytest.skip("needs the project's own stack (restarts the agent or containerd)")
    return target.stack


@pytest.fixture(scope="session")
def api_client(target: Target):
    from kubernetes import config

    return config.new_client_from_config(config_file=str(target.kubeconfig))


@pytest.fixture(scope="session")
def kube(api_client):
    """CoreV1Api of the official client."""
    from kubernetes import client

    return client.CoreV1Api(api_client)


@pytest.fixture
def two_nodes(kube, node_name: str) -> list[str]:
    """Two schedulable nodes, this run's first; the test is skipped on a cluster with fewer."""
    from e2e.twonodes import pick_two_nodes

    return pick_two_nodes(kube, node_name)


@pytest.fixture
def schedulable_nodes(kube) -> list[str]:
    """Every schedulable node (two or more: the test is skipped on a cluster with fewer), by name."""
    from e2e.twonodes import pick_schedulable_nodes

    return pick_schedulable_nodes(kube)


@pytest.fixture
def namespace(kube) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (with whatever it holds). As upstream's e2e
    framework, it is handed over once its `default` ServiceAccount exists: pods need it."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from e2e.waiting import wait_for

    name = f"e2e-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))

    def account() -> bool:
        try:
            return bool(kube.read_namespaced_service_account("default", name))
        except ApiException as err:
            if err.status == 404:
                return False
            raise

    wait_for(account, timeout=30, what=f"the default ServiceAccount of {name}")
    yield name
    kube.delete_namespace(name)
