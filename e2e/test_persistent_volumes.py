"""Persistent volumes through kubectl and the API only, on the cluster's default StorageClass (k3s's
`local-path`, WaitForFirstConsumer): a claim stays Pending with the WaitForFirstConsumer event until a pod
uses it, then binds to a volume pinned to the pod's node; what one pod writes the next pod on the claim
reads; deleting the pods and the claim removes the volume (reclaim policy Delete). A claim of a class that
does not exist stays Pending with upstream's ProvisioningFailed event. Nothing here knows whose
provisioner runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from kubernetes import client

from e2e.waiting import finished, gone, wait_for

pytestmark = pytest.mark.integration

DEFAULT = "storageclass.kubernetes.io/is-default-class"


def kubectl(kubeconfig: Path, namespace: str, *args: str) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def claim(name: str, cls: str | None = None) -> dict:
    spec: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}
    if cls is not None:
        spec["storageClassName"] = cls
    return {"metadata": {"name": name}, "spec": spec}


def pod(name: str, image: str, script: str, claim_name: str) -> dict:
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
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}],
        },
    }


def events(kube: client.CoreV1Api, namespace: str, name: str, reason: str) -> list[client.CoreV1Event]:
    return [
        e
        for e in kube.list_namespaced_event(namespace).items
        if e.involved_object.name == name and e.reason == reason
    ]


@pytest.fixture(scope="module")
def default_class(api_client) -> str:
    classes = client.StorageV1Api(api_client).list_storage_class().items
    chosen = [c for c in classes if (c.metadata.annotations or {}).get(DEFAULT) == "true"]
    if not chosen or chosen[0].volume_binding_mode != "WaitForFirstConsumer":
        pytest.skip("the cluster has no default WaitForFirstConsumer StorageClass (k3s's local-path)")
    return chosen[0].metadata.name


def test_claim_binds_for_its_first_pod_and_keeps_data(
    kube, namespace, image, kubeconfig, default_class
) -> None:
    made = kube.create_namespaced_persistent_volume_claim(namespace, claim("data"))
    assert made.spec.storage_class_name == default_class  # the DefaultStorageClass admission
    waiting = wait_for(
        lambda: events(kube, namespace, "data", "WaitForFirstConsumer"), timeout=60, what="event"
    )
    assert waiting[0].message == "waiting for first consumer to be created before binding"
    assert kube.read_namespaced_persistent_volume_claim("data", namespace).status.phase == "Pending"

    kube.create_namespaced_pod(namespace, pod("writer", image, "echo kept > /data/file && sync", "data"))
    written = finished(kube, namespace, "writer", timeout=180)
    assert written.status.phase == "Succeeded"
    bound = kube.read_namespaced_persistent_volume_claim("data", namespace)
    assert bound.status.phase == "Bound" and bound.status.access_modes == ["ReadWriteOnce"]
    volume = kube.read_persistent_volume(bound.spec.volume_name)
    assert (volume.spec.claim_ref.namespace, volume.spec.claim_ref.name) == (namespace, "data")
    assert volume.spec.claim_ref.uid == bound.metadata.uid
    assert volume.spec.persistent_volume_reclaim_policy == "Delete"
    assert volume.spec.storage_class_name == default_class
    term = volume.spec.node_affinity.required.node_selector_terms[0].match_expressions[0]
    assert term.key == "kubernetes.io/hostname" and term.operator == "In"
    node = kube.read_node(written.spec.node_name)
    assert term.values == [node.metadata.labels.get("kubernetes.io/hostname", node.metadata.name)]
    row = kubectl(kubeconfig, namespace, "get", "pvc", "data").splitlines()[1].split()
    assert row[:3] == ["data", "Bound", bound.spec.volume_name] and default_class in row

    kube.create_namespaced_pod(namespace, pod("reader", image, "cat /data/file", "data"))
    read = finished(kube, namespace, "reader", timeout=180)
    assert read.status.phase == "Succeeded"
    assert read.spec.node_name == written.spec.node_name  # the volume's node affinity
    assert kube.read_namespaced_pod_log("reader", namespace) == "kept\n"

    for name in ("writer", "reader"):
        kube.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    kube.delete_namespaced_persistent_volume_claim("data", namespace)
    wait_for(
        lambda: gone(lambda: kube.read_persistent_volume(bound.spec.volume_name)),
        timeout=180,
        what="the volume to be deleted with its claim",
    )
    assert gone(lambda: kube.read_namespaced_persistent_volume_claim("data", namespace))


def test_claim_of_a_missing_class_stays_pending(kube, namespace) -> None:
    kube.create_namespaced_persistent_volume_claim(namespace, claim("orphan", "no-such-class"))
    failed = wait_for(
        lambda: events(kube, namespace, "orphan", "ProvisioningFailed"), timeout=60, what="event"
    )
    assert failed[0].type == "Warning"
    assert failed[0].message == 'storageclass.storage.k8s.io "no-such-class" not found'
    assert kube.read_namespaced_persistent_volume_claim("orphan", namespace).status.phase == "Pending"
