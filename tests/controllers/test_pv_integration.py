"""The persistent-volume loops against the real API server, on their own identities: the PV controller
binds a claim to the smallest volume that fits, a deleted claim leaves a Retain volume Released, a claim
of a missing class gets upstream's ProvisioningFailed event, a WaitForFirstConsumer claim waits with its
event; the local-path provisioner makes a hostPath volume on the node the scheduler chose (the test plays
the scheduler) and, once the claim is gone, removes it through a helper pod on that node (the test plays
the kubelet: the helper pod succeeds); the protection controllers hold claims and volumes in use."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controlplane.controllers.volume.localpath import HELPER_NAMESPACE, HELPER_PREFIX
from tests.controllers.conftest import eventually, running
from tests.controllers.kubeletplay import delete_node, events, make_node

CONTROLLERS = ("persistentvolume-binder", "pvc-protection", "pv-protection")


def pv(name: str, size: str, cls: str, **spec: object) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": cls,
            "hostPath": {"path": f"/tmp/{name}"},
            **spec,
        },
    }


def pvc(name: str, size: str, cls: str | None = None, **spec: object) -> dict:
    body: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}, **spec}
    if cls is not None:
        body["storageClassName"] = cls
    return {"metadata": {"name": name}, "spec": body}


def read_claim(v1: client.CoreV1Api, namespace: str, name: str) -> client.V1PersistentVolumeClaim | None:
    try:
        return v1.read_namespaced_persistent_volume_claim(name, namespace)
    except ApiException as err:
        assert err.status == 404
        return None


def read_volume(v1: client.CoreV1Api, name: str) -> client.V1PersistentVolume | None:
    try:
        return v1.read_persistent_volume(name)
    except ApiException as err:
        assert err.status == 404
        return None


@pytest.fixture
def tag() -> Iterator[str]:
    yield uuid.uuid4().hex[:6]


async def test_smallest_fit_binding_and_retain_released(apiserver, v1, namespace, tag) -> None:
    cls = f"manual-{tag}"
    for name, size in ((f"small-{tag}", "1Gi"), (f"mid-{tag}", "5Gi"), (f"big-{tag}", "10Gi")):
        v1.create_persistent_volume(pv(name, size, cls))
    v1.create_persistent_volume(pv(f"rwx-{tag}", "4Gi", cls, accessModes=["ReadWriteMany"]))
    v1.create_persistent_volume(pv(f"other-{tag}", "4Gi", f"x{cls}"))
    async with running(apiserver, *CONTROLLERS):
        await eventually(
            lambda: all(
                read_volume(v1, f"{n}-{tag}").status.phase == "Available" for n in ("small", "mid", "big")
            )
        )
        v1.create_namespaced_persistent_volume_claim(namespace, pvc("data", "3Gi", cls))
        claim = await eventually(
            lambda: (c := read_claim(v1, namespace, "data")) and c.status.phase == "Bound" and c,
            what="claim Bound",
        )
        assert claim.spec.volume_name == f"mid-{tag}"
        assert claim.status.capacity == {"storage": "5Gi"} and claim.status.access_modes == ["ReadWriteOnce"]
        assert claim.metadata.annotations["pv.kubernetes.io/bind-completed"] == "yes"
        volume = await eventually(
            lambda: (v := read_volume(v1, f"mid-{tag}")) and v.status.phase == "Bound" and v
        )
        ref = volume.spec.claim_ref
        assert (ref.namespace, ref.name, ref.uid) == (namespace, "data", claim.metadata.uid)
        assert volume.metadata.annotations["pv.kubernetes.io/bound-by-controller"] == "yes"
        # A bound volume being deleted is held by pv-protection.
        v1.delete_persistent_volume(f"mid-{tag}")
        # The claim (no pod uses it) goes; the Retain volume is Released and, no longer Bound, let go.
        v1.delete_namespaced_persistent_volume_claim("data", namespace)
        await eventually(lambda: read_claim(v1, namespace, "data") is None, what="claim gone")
        await eventually(lambda: read_volume(v1, f"mid-{tag}") is None, what="Released volume deleted")
        v1.create_namespaced_persistent_volume_claim(namespace, pvc("kept", "1Gi", cls))
        await eventually(
            lambda: (c := read_claim(v1, namespace, "kept")) and c.spec.volume_name == f"small-{tag}"
        )
        v1.delete_namespaced_persistent_volume_claim("kept", namespace)
        released = await eventually(
            lambda: (v := read_volume(v1, f"small-{tag}")) and v.status.phase == "Released" and v,
            what="Released",
        )
        assert released.spec.claim_ref.name == "kept"  # Retain: the data and the reference stay
    for name in ("small", "big", "rwx", "other"):
        v1.patch_persistent_volume(f"{name}-{tag}", {"metadata": {"finalizers": None}})
        v1.delete_persistent_volume(f"{name}-{tag}")


async def test_missing_class_and_wait_for_first_consumer(apiserver, v1, namespace) -> None:
    async with running(apiserver, *CONTROLLERS):
        v1.create_namespaced_persistent_volume_claim(namespace, pvc("lost", "1Gi", "nope"))
        failed = await eventually(lambda: events(v1, namespace, "ProvisioningFailed", "lost"), what="event")
        assert failed[0].message == 'storageclass.storage.k8s.io "nope" not found'
        assert failed[0].type == "Warning" and failed[0].source.component == "persistentvolume-controller"
        v1.create_namespaced_persistent_volume_claim(
            namespace, pvc("later", "1Gi")
        )  # the default: local-path
        waiting = await eventually(
            lambda: events(v1, namespace, "WaitForFirstConsumer", "later"), what="event"
        )
        assert waiting[0].message == "waiting for first consumer to be created before binding"
        assert read_claim(v1, namespace, "later").status.phase == "Pending"
        assert read_claim(v1, namespace, "lost").status.phase == "Pending"


async def test_local_path_provision_and_delete(apiserver, v1, namespace, tag, tmp_path) -> None:
    node = f"lp-{tag}"
    make_node(v1, None, node, labels={"kubernetes.io/hostname": node})
    try:
        async with running(apiserver, *CONTROLLERS, "local-path-provisioner", local_path_root=str(tmp_path)):
            v1.create_namespaced_persistent_volume_claim(namespace, pvc("web", "2Gi"))
            await eventually(lambda: events(v1, namespace, "WaitForFirstConsumer", "web"))
            # the scheduler's part: the node it chose for the claim's first pod
            v1.patch_namespaced_persistent_volume_claim(
                "web", namespace, {"metadata": {"annotations": {"volume.kubernetes.io/selected-node": node}}}
            )
            claim = await eventually(
                lambda: (c := read_claim(v1, namespace, "web")) and c.status.phase == "Bound" and c,
                what="Bound",
            )
            notes = claim.metadata.annotations
            assert notes["volume.kubernetes.io/storage-provisioner"] == "rancher.io/local-path"
            assert notes["volume.beta.kubernetes.io/storage-provisioner"] == "rancher.io/local-path"
            name = f"pvc-{claim.metadata.uid}"
            assert claim.spec.volume_name == name
            volume = v1.read_persistent_volume(name)
            assert volume.spec.host_path.path == f"{tmp_path}/{name}_{namespace}_web"
            assert volume.spec.host_path.type == "DirectoryOrCreate"
            assert volume.spec.persistent_volume_reclaim_policy == "Delete"
            assert volume.spec.storage_class_name == "local-path"
            assert volume.metadata.annotations["pv.kubernetes.io/provisioned-by"] == "rancher.io/local-path"
            term = volume.spec.node_affinity.required.node_selector_terms[0].match_expressions[0]
            assert (term.key, term.operator, term.values) == ("kubernetes.io/hostname", "In", [node])
            assert [e.message for e in events(v1, namespace, "ProvisioningSucceeded", "web")] == [
                f"Successfully provisioned volume {name}"
            ]
            v1.delete_namespaced_persistent_volume_claim("web", namespace)
            helper = await eventually(
                lambda: _read_pod(v1, HELPER_NAMESPACE, HELPER_PREFIX + name), what="helper pod"
            )
            assert helper.spec.node_name == node and helper.spec.restart_policy == "Never"
            command = helper.spec.containers[0].command
            assert command == ["sh", "-c", 'rm -rf "$VOL_DIR"']
            assert helper.spec.containers[0].env[0].value == volume.spec.host_path.path
            assert read_volume(v1, name) is not None  # not before the folder is gone
            # the kubelet's part: the helper pod ran and succeeded
            v1.patch_namespaced_pod_status(
                helper.metadata.name, HELPER_NAMESPACE, {"status": {"phase": "Succeeded"}}
            )
            await eventually(lambda: read_volume(v1, name) is None, what="volume deleted")
            await eventually(
                lambda: _read_pod(v1, HELPER_NAMESPACE, HELPER_PREFIX + name) is None, what="helper gone"
            )
    finally:
        delete_node(v1, None, node)


async def test_claim_in_use_is_protected(apiserver, v1, namespace, tag) -> None:
    async with running(apiserver, *CONTROLLERS):
        v1.create_namespaced_persistent_volume_claim(namespace, pvc("used", "1Gi", f"none-{tag}"))
        v1.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": "user"},
                "spec": {
                    "nodeName": "n1",
                    "containers": [{"name": "c", "image": "busybox"}],
                    "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "used"}}],
                },
            },
        )
        v1.delete_namespaced_persistent_volume_claim("used", namespace)
        held = await eventually(lambda: read_claim(v1, namespace, "used"))
        assert held.metadata.deletion_timestamp is not None
        assert held.metadata.finalizers == ["kubernetes.io/pvc-protection"]
        v1.delete_namespaced_pod("user", namespace, grace_period_seconds=0)
        await eventually(lambda: read_claim(v1, namespace, "used") is None, what="claim released")


def _read_pod(v1: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod | None:
    try:
        return v1.read_namespaced_pod(name, namespace)
    except ApiException as err:
        assert err.status == 404
        return None
