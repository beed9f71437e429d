"""PVC-backed volumes on the real stack (our API server, controllers, scheduler and agent on a real
containerd), checked on the host as e2e cannot: a static hostPath PersistentVolume bound to a claim is
bind-mounted into the pod (what the pod writes is in the host folder; a readOnly claim source refuses
writes); a local PersistentVolume's figures reach /stats/summary and kubelet_volume_stats_*; a pod bound
to the node with an unbound claim waits in ContainerCreating with the kubelet's
FailedMount text and starts once a volume binds; the local-path provisioner's folder is made on the node
and removed (by its helper pod) with the claim; a pod's RuntimeClass handler reaches RunPodSandbox, and a
missing RuntimeClass fails the sandbox with the kubelet's message."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from e2e.waiting import finished, wait_for
from tests.csi.conftest import volume_stats_reported
from tests.rig.stacks import exists, fresh_namespace, leased_stack

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    if os.geteuid() != 0:
        pytest.skip("needs root (containerd, network namespaces)")
    with leased_stack(tmp_path_factory.mktemp("pvstack"), "v", "pv-node") as running:
        yield running


@pytest.fixture(scope="module")
def kube(stack) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(stack.kubeconfig)))


@pytest.fixture
def namespace(kube: client.CoreV1Api) -> Iterator[str]:
    with fresh_namespace(kube, "pv") as name:
        yield name


def pod(name: str, image: str, script: str, claim: str, read_only: bool = False, **spec) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "command": ["sh", "-c", script],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}}
            ],
            **spec,
        },
    }


def static_pv(name: str, path: Path, node: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            },
        },
    }


def static_claim(name: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "",
        },
    }


def event(kube: client.CoreV1Api, namespace: str, name: str, reason: str) -> client.CoreV1Event | None:
    found = [
        e
        for e in kube.list_namespaced_event(namespace).items
        if e.involved_object.name == name and e.reason == reason
    ]
    return found[-1] if found else None


def cleanup_pv(kube: client.CoreV1Api, name: str) -> None:
    try:
        kube.patch_persistent_volume(name, {"metadata": {"finalizers": None}})
        kube.delete_persistent_volume(name)
    except ApiException as err:
        assert err.status == 404


def test_static_host_path_volume_mounted_and_read_only(stack, kube, namespace, tmp_path) -> None:
    folder = tmp_path / f"static-{uuid.uuid4().hex[:6]}"
    pv_name = f"host-{namespace}"
    kube.create_persistent_volume(static_pv(pv_name, folder, stack.node_name))
    try:
        kube.create_namespaced_persistent_volume_claim(namespace, static_claim("data"))
        wait_for(
            lambda: kube.read_namespaced_persistent_volume_claim("data", namespace).status.phase == "Bound",
            60,
        )
        kube.create_namespaced_pod(
            namespace, pod("writer", stack.images.busybox, "echo from-pod > /data/out", "data")
        )
        assert finished(kube, namespace, "writer", 120).status.phase == "Succeeded"
        assert (folder / "out").read_text() == "from-pod\n"  # the bind mount is the host folder
        kube.create_namespaced_pod(
            namespace,
            pod("ro", stack.images.busybox, "cat /data/out; echo x > /data/out", "data", read_only=True),
        )
        done = finished(kube, namespace, "ro", 120)
        assert done.status.phase == "Failed"
        logged = kube.read_namespaced_pod_log("ro", namespace).splitlines()
        assert sorted(logged) == ["from-pod", "sh: can't create /data/out: Read-only file system"]
        assert (folder / "out").read_text() == "from-pod\n"
    finally:
        for name in ("writer", "ro"):
            try:
                kube.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            except ApiException:
                pass
        kube.delete_namespaced_persistent_volume_claim("data", namespace)
        cleanup_pv(kube, pv_name)


def test_local_volume_reported_in_stats_and_metrics(stack, kube, namespace, tmp_path) -> None:
    """A running pod's claim bound to a `local` PersistentVolume: its volume entry in /stats/summary
    (with its pvcRef) and the claim's kubelet_volume_stats_* carry the statfs figures of the local path's
    file system, as upstream's local plugin reports them."""
    disk = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    disk.mkdir()
    pv_name = f"local-{namespace}"
    body = static_pv(pv_name, disk, stack.node_name)
    del body["spec"]["hostPath"]
    body["spec"]["local"] = {"path": str(disk)}
    kube.create_persistent_volume(body)
    try:
        kube.create_namespaced_persistent_volume_claim(namespace, static_claim("disk"))
        kube.create_namespaced_pod(
            namespace, pod("user", stack.images.busybox, "echo x > /data/f && sleep 3600", "disk")
        )
        wait_for(lambda: (disk / "f").exists(), 120, what="the container's write on the local volume")
        volume_stats_reported(kube, stack.node_name, namespace, "user", "disk", disk)
    finally:
        try:
            kube.delete_namespaced_pod("user", namespace, grace_period_seconds=0)
        except ApiException:
            pass
        kube.delete_namespaced_persistent_volume_claim("disk", namespace)
        cleanup_pv(kube, pv_name)


def test_unbound_claim_waits_with_failed_mount_then_starts(stack, kube, namespace, tmp_path) -> None:
    kube.create_namespaced_persistent_volume_claim(namespace, static_claim("later"))
    # nodeName set: no scheduler stands between the pod and the agent, so the agent meets the unbound claim
    kube.create_namespaced_pod(
        namespace, pod("waits", stack.images.busybox, "cat /data/hello", "later", nodeName=stack.node_name)
    )
    failed = wait_for(lambda: event(kube, namespace, "waits", "FailedMount"), 60, what="FailedMount")
    assert failed.type == "Warning"
    assert failed.message == (
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to "
        f"process volumes=[data]: error processing PVC {namespace}/later: PVC is not bound"
    )
    waiting = kube.read_namespaced_pod("waits", namespace)
    assert waiting.status.phase == "Pending"
    assert waiting.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    folder = tmp_path / "late"
    folder.mkdir()
    (folder / "hello").write_text("bound at last\n")
    pv_name = f"late-{namespace}"
    kube.create_persistent_volume(static_pv(pv_name, folder, stack.node_name))
    try:
        assert finished(kube, namespace, "waits", 120).status.phase == "Succeeded"
        assert kube.read_namespaced_pod_log("waits", namespace) == "bound at last\n"
    finally:
        kube.delete_namespaced_pod("waits", namespace, grace_period_seconds=0)
        kube.delete_namespaced_persistent_volume_claim("later", namespace)
        cleanup_pv(kube, pv_name)


def test_local_path_folder_made_and_removed(stack, kube, namespace) -> None:
    root = stack.config.state_dir / "local-path"
    kube.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": "lp"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "8Mi"}}},
        },
    )
    kube.create_namespaced_pod(
        namespace, pod("lp-writer", stack.images.busybox, "echo on-node > /data/f", "lp")
    )
    assert finished(kube, namespace, "lp-writer", 180).status.phase == "Succeeded"
    pvc = kube.read_namespaced_persistent_volume_claim("lp", namespace)
    folder = root / f"{pvc.spec.volume_name}_{namespace}_lp"
    assert kube.read_persistent_volume(pvc.spec.volume_name).spec.host_path.path == str(folder)
    assert (folder / "f").read_text() == "on-node\n"
    kube.delete_namespaced_pod("lp-writer", namespace, grace_period_seconds=0)
    kube.delete_namespaced_persistent_volume_claim("lp", namespace)
    wait_for(
        lambda: not exists(lambda: kube.read_persistent_volume(pvc.spec.volume_name)), 180, what="PV deleted"
    )
    assert not folder.exists()  # the helper pod removed it before the volume went
    assert root.is_dir()


def test_runtime_class_handler(stack, kube, namespace) -> None:
    node_api = client.NodeV1Api(kube.api_client)
    name = f"rc-{uuid.uuid4().hex[:6]}"
    node_api.create_runtime_class({"metadata": {"name": name}, "handler": "runc"})
    try:
        spec = {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": stack.images.busybox, "command": ["true"]}],
        }
        kube.create_namespaced_pod(
            namespace, {"metadata": {"name": "with-rc"}, "spec": {**spec, "runtimeClassName": name}}
        )
        assert finished(kube, namespace, "with-rc", 120).status.phase == "Succeeded"
        # The API server refuses a pod naming a class that does not exist (RuntimeClass admission), so
        # the kubelet meets a missing class only when it is deleted after the pod was admitted: held
        # by a scheduling gate until the class is gone, then released to the node.
        gone = f"gone-{uuid.uuid4().hex[:6]}"
        node_api.create_runtime_class({"metadata": {"name": gone}, "handler": "runc"})
        kube.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": "no-rc"},
                "spec": {**spec, "runtimeClassName": gone, "schedulingGates": [{"name": "test/hold"}]},
            },
        )
        node_api.delete_runtime_class(gone)
        kube.patch_namespaced_pod("no-rc", namespace, {"spec": {"schedulingGates": None}})
        failed = wait_for(lambda: event(kube, namespace, "no-rc", "FailedCreatePodSandBox"), 60, what="event")
        assert failed.message == f'Failed to create pod sandbox: runtimeclass.node.k8s.io "{gone}" not found'
        assert kube.read_namespaced_pod("no-rc", namespace).status.phase == "Pending"
    finally:
        node_api.delete_runtime_class(name)
