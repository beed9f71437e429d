"""Namespaces fenced by quotas and limit ranges, through the API and kubectl only: the quota
controller fills a ResourceQuota's status, a quota of 2 pods refuses the third with upstream's
message (kubectl and a ReplicaSet's FailedCreate event say the same), deleting a pod gives its share
back, and a LimitRange defaults a container's requests and limits and refuses a pod above its max."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.waiting import wait_for

pytestmark = pytest.mark.integration


def kubectl(
    kubeconfig: Path, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}")
    return done


def pod(name: str, image: str, **resources: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": image, "command": ["sh", "-c", "exec sleep 3600"]}
    if resources:
        container["resources"] = resources
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]}}  # fmt: skip


def used(kube: client.CoreV1Api, namespace: str, name: str) -> dict[str, str]:
    status = kube.read_namespaced_resource_quota(name, namespace).status
    return dict((status.used if status else None) or {})


def test_quota_of_two_pods(kube, api_client, namespace, image, kubeconfig):
    kubectl(kubeconfig, "-n", namespace, "create", "quota", "two-pods", "--hard=pods=2")
    wait_for(
        lambda: used(kube, namespace, "two-pods") == {"pods": "0"}, timeout=60, what="the quota's status"
    )
    for name in ("p1", "p2"):
        kube.create_namespaced_pod(namespace, pod(name, image))
    assert used(kube, namespace, "two-pods") == {"pods": "2"}
    with pytest.raises(ApiException) as err:
        kube.create_namespaced_pod(namespace, pod("p3", image))
    assert err.value.status == 403
    assert json.loads(err.value.body)["message"] == (
        'pods "p3" is forbidden: exceeded quota: two-pods, requested: pods=1, used: pods=2, limited: pods=2'
    )
    done = kubectl(
        kubeconfig, "-n", namespace, "create", "-f", "-", stdin=json.dumps(pod("p4", image)), check=False
    )
    assert done.returncode != 0
    assert (
        'pods "p4" is forbidden: exceeded quota: two-pods, requested: pods=1, used: pods=2, limited: pods=2'
        in done.stderr
    )
    table = kubectl(kubeconfig, "-n", namespace, "get", "quota").stdout.splitlines()
    assert table[0].split() == ["NAME", "AGE", "REQUEST", "LIMIT"] and "pods: 2/2" in table[1]

    # A ReplicaSet meets the same refusal, and says so in its events.
    rs = {
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod("x", image)["spec"]}},
    }  # fmt: skip
    client.AppsV1Api(api_client).create_namespaced_replica_set(namespace, rs)

    def refused() -> bool:
        events = kube.list_namespaced_event(namespace, field_selector="involvedObject.name=web").items
        return any(
            e.reason == "FailedCreate" and "exceeded quota: two-pods" in (e.message or "") for e in events
        )

    wait_for(refused, timeout=60, what="the ReplicaSet's FailedCreate event")

    # Deleting a pod gives its share back: the ReplicaSet's pod gets in.
    kube.delete_namespaced_pod("p1", namespace, grace_period_seconds=0)

    def replica() -> bool:
        return any(p.metadata.name.startswith("web-") for p in kube.list_namespaced_pod(namespace).items)

    wait_for(replica, timeout=90, what="the ReplicaSet's pod once p1 is gone")
    wait_for(lambda: used(kube, namespace, "two-pods") == {"pods": "2"}, timeout=60, what="pods=2 used again")
    assert len(kube.list_namespaced_pod(namespace).items) == 2


def test_limit_range_defaults_and_bounds(kube, namespace, image):
    kube.create_namespaced_limit_range(
        namespace,
        {"metadata": {"name": "limits"},
         "spec": {"limits": [{"type": "Container", "max": {"cpu": "1", "memory": "256Mi"},
                              "default": {"cpu": "200m", "memory": "64Mi"}, "defaultRequest": {"cpu": "100m", "memory": "32Mi"}}]}},
    )  # fmt: skip
    created = kube.create_namespaced_pod(namespace, pod("defaulted", image))
    resources = created.spec.containers[0].resources
    assert resources.limits == {"cpu": "200m", "memory": "64Mi"}
    assert resources.requests == {"cpu": "100m", "memory": "32Mi"}
    assert created.metadata.annotations["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu, memory request for container main; cpu, memory limit for container main"
    )
    wait_for(
        lambda: kube.read_namespaced_pod("defaulted", namespace).status.phase == "Running",
        timeout=90,
        what="the pod running",
    )
    with pytest.raises(ApiException) as err:
        kube.create_namespaced_pod(namespace, pod("greedy", image, limits={"cpu": "2"}))
    assert err.value.status == 403
    assert json.loads(err.value.body)["message"] == (
        'pods "greedy" is forbidden: maximum cpu usage per Container is 1, but limit is 2'
    )
