"""The Node as the API shows it: registration facts, Ready, and a Lease whose renewTime moves."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

pytestmark = pytest.mark.integration


def test_node_registered_and_ready(kube, node_name):
    node = kube.read_node(node_name)
    labels = node.metadata.labels
    assert labels["kubernetes.io/hostname"] == node_name
    assert labels["kubernetes.io/os"] == "linux"
    assert labels["kubernetes.io/arch"] in ("amd64", "arm64")
    conds = {c.type: c for c in node.status.conditions}
    assert conds["Ready"].status == "True" and conds["Ready"].reason == "KubeletReady"
    for kind in ("MemoryPressure", "DiskPressure", "PIDPressure"):
        assert conds[kind].status == "False"
    cap, alloc = node.status.capacity, node.status.allocatable
    assert cap["pods"] == "110" and int(cap["cpu"]) >= 1
    assert set(alloc) >= {"cpu", "memory", "ephemeral-storage", "pods"}
    info = node.status.node_info
    assert info.container_runtime_version.startswith("containerd://")
    assert info.kubelet_version.startswith("v1.")
    assert info.boot_id and info.kernel_version and info.os_image
    assert info.operating_system == "linux"
    addresses = {a.type: a.address for a in node.status.addresses}
    assert addresses["Hostname"] and addresses["InternalIP"]
    assert node.status.daemon_endpoints.kubelet_endpoint.port > 0


def test_node_reports_its_images(kube, namespace, node_name, image):
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="img"),
        spec=client.V1PodSpec(
            node_name=node_name,
            restart_policy="Never",
            containers=[client.V1Container(name="main", image=image, command=["true"])],
        ),
    )
    kube.create_namespaced_pod(namespace, pod)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        images = kube.read_node(node_name).status.images or []
        if any(image.split("/")[-1].split(":")[0] in name for img in images for name in img.names):
            assert all(img.size_bytes > 0 for img in images)
            return
        time.sleep(1)
    raise AssertionError(f"{image} not in node.status.images")


def test_lease_renewed(api_client, kube, node_name):
    coord = client.CoordinationV1Api(api_client)
    lease = coord.read_namespaced_lease(node_name, "kube-node-lease")
    assert lease.spec.holder_identity == node_name
    assert lease.spec.lease_duration_seconds == 40
    node = kube.read_node(node_name)
    owners = lease.metadata.owner_references or []
    assert [(o.kind, o.name, o.uid) for o in owners] == [("Node", node_name, node.metadata.uid)]
    first = lease.spec.renew_time
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline:
        time.sleep(1)
        renewed = coord.read_namespaced_lease(node_name, "kube-node-lease").spec.renew_time
        if renewed > first:
            return
    raise AssertionError(f"lease renewTime stayed at {first}")
