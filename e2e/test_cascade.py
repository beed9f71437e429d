"""Cascading deletion as a user meets it, through kubectl and the API only (so the same file runs against
a genuine cluster): `kubectl delete` of a ReplicaSet in the background, in the foreground and orphaning
its pods; a pod whose owner never existed collected; a ReplicationController made with `kubectl create
-f` getting its pods. The stack runs the controller manager's replicaset, replicationcontroller and
garbage-collector loops; the node agent runs the pods.

Foreground deletion waits for the pods, which a busy kubelet may finish in well under a second: the
template carries a finalizer of the test's own, so the pods (and with them the ReplicaSet) stay until the
test lets them go, and every "still there" is a state, not a race.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from e2e.waiting import wait_for

pytestmark = pytest.mark.integration

HOLD = "e2e.pykubelet.dev/hold"
TERM_AWARE = "trap 'exit 0' TERM; sleep 3600 & wait"


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def get(kubeconfig: Path, namespace: str, what: str) -> dict[str, Any] | None:
    proc = subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "-n",
            namespace,
            "get",
            what,
            "-o",
            "json",
            "--ignore-not-found",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if proc.stdout.strip() else None


def template(app: str, node: str, image: str, hold: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": {"app": app}}
    if hold:
        meta["finalizers"] = [HOLD]
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": image, "command": ["sh", "-c", TERM_AWARE]}],
        },
    }


def replicaset(name: str, node: str, image: str, replicas: int = 2, hold: bool = False) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": template(name, node, image, hold),
            },
        }
    )


def pods(kube, namespace: str, app: str) -> list[Any]:
    return kube.list_namespaced_pod(namespace, label_selector=f"app={app}").items


def running(kube, namespace: str, app: str, count: int) -> list[Any]:
    def check() -> list[Any] | None:
        found = pods(kube, namespace, app)
        ok = len(found) == count and all(p.status.phase == "Running" for p in found)
        return found if ok else None

    return wait_for(check, timeout=90, what=f"{count} running pods of {app}")


def release(kube, namespace: str, found: list[Any]) -> None:
    for pod in found:
        try:
            kube.patch_namespaced_pod(
                pod.metadata.name, namespace, {"metadata": {"$deleteFromPrimitiveList/finalizers": [HOLD]}}
            )
        except ApiException as err:
            if err.status != 404:
                raise


def test_kubectl_delete_removes_the_pods_in_the_background(kubeconfig, kube, namespace, node_name, image):
    kubectl(kubeconfig, "-n", namespace, "apply", "-f", "-", stdin=replicaset("web", node_name, image))
    running(kube, namespace, "web", 2)
    assert (
        kubectl(kubeconfig, "-n", namespace, "delete", "rs", "web").strip() == 'replicaset.apps "web" deleted'
    )
    assert get(kubeconfig, namespace, "rs/web") is None  # gone at once: its pods go after it
    wait_for(lambda: not pods(kube, namespace, "web"), timeout=90, what="the ReplicaSet's pods to go")


def test_foreground_keeps_the_replicaset_until_its_pods_are_gone(
    kubeconfig, kube, namespace, node_name, image
):
    kubectl(
        kubeconfig, "-n", namespace, "apply", "-f", "-", stdin=replicaset("web", node_name, image, hold=True)
    )
    running(kube, namespace, "web", 2)
    kubectl(kubeconfig, "-n", namespace, "delete", "rs", "web", "--cascade=foreground", "--wait=false")
    held = wait_for(
        lambda: (p := pods(kube, namespace, "web")) and all(x.metadata.deletion_timestamp for x in p) and p,
        timeout=60,
        what="the pods to be deleted",
    )
    rs = get(kubeconfig, namespace, "rs/web")
    assert rs is not None and rs["metadata"]["deletionTimestamp"]
    assert rs["metadata"]["finalizers"] == ["foregroundDeletion"]
    # The finalizer keeps the pods; the ReplicaSet waits for them (and makes no new ones meanwhile).
    assert len(pods(kube, namespace, "web")) == 2
    release(kube, namespace, held)
    wait_for(lambda: not pods(kube, namespace, "web"), timeout=60, what="the released pods to go")
    wait_for(
        lambda: get(kubeconfig, namespace, "rs/web") is None,
        timeout=60,
        what="the ReplicaSet to go after its pods",
    )


def test_orphan_leaves_the_pods_running_without_owner(kubeconfig, kube, namespace, node_name, image):
    kubectl(kubeconfig, "-n", namespace, "apply", "-f", "-", stdin=replicaset("web", node_name, image))
    before = running(kube, namespace, "web", 2)
    kubectl(kubeconfig, "-n", namespace, "delete", "rs", "web", "--cascade=orphan")  # waits until it is gone
    assert get(kubeconfig, namespace, "rs/web") is None
    after = pods(kube, namespace, "web")
    assert {p.metadata.uid for p in after} == {p.metadata.uid for p in before}
    for pod in after:
        assert not pod.metadata.owner_references and not pod.metadata.deletion_timestamp
        assert pod.status.phase == "Running"


def test_a_pod_whose_owner_does_not_exist_is_collected(kubeconfig, kube, namespace, node_name, image):
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "ghost",
        "uid": str(uuid.uuid4()),
        "controller": True,
    }
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "stray", "ownerReferences": [owner]},
        "spec": template("stray", node_name, image)["spec"],
    }
    kubectl(kubeconfig, "-n", namespace, "create", "-f", "-", stdin=yaml.safe_dump(body))
    wait_for(
        lambda: get(kubeconfig, namespace, "pod/stray") is None,
        timeout=90,
        what="the ownerless pod to be collected",
    )


def test_kubectl_create_replicationcontroller_gets_its_pods(kubeconfig, kube, namespace, node_name, image):
    manifest = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "ReplicationController",
            "metadata": {"name": "legacy"},
            "spec": {"replicas": 2, "template": template("legacy", node_name, image)},
        }
    )
    assert (
        kubectl(kubeconfig, "-n", namespace, "create", "-f", "-", stdin=manifest).strip()
        == "replicationcontroller/legacy created"
    )
    made = running(kube, namespace, "legacy", 2)
    assert all(p.metadata.owner_references[0].kind == "ReplicationController" for p in made)
    rc = wait_for(
        lambda: (
            (r := get(kubeconfig, namespace, "rc/legacy"))
            and r.get("status", {}).get("readyReplicas") == 2
            and r
        ),
        timeout=60,
        what="the RC's status",
    )
    assert rc["spec"]["selector"] == {"app": "legacy"}
    kubectl(kubeconfig, "-n", namespace, "delete", "rc", "legacy")  # kubectl asks for background
    wait_for(lambda: not pods(kube, namespace, "legacy"), timeout=90, what="the RC's pods to go")
