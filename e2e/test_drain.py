"""Voluntary disruptions through the API and kubectl only: the Eviction API against a PodDisruptionBudget
(the first eviction of a two-pod Deployment with minAvailable 1 succeeds, the second at once is refused
with upstream's 429), and `kubectl cordon|drain|uncordon` of the target node: a drain refuses DaemonSet
pods without --ignore-daemonsets and emptyDir pods without --delete-emptydir-data, times out with
kubectl's message while the budget allows no eviction, evicts once it allows them (the Deployment
re-creates its pods, Pending while the node is cordoned, running once it is uncordoned), and leaves the
DaemonSet's pod where it is.

Every pod is kept to the target node (kubernetes.io/hostname) and the drain to this test's pods
(`--pod-selector`), so the scenario reads the same on a genuine cluster and leaves other pods alone; the
node is uncordoned whatever happens.
"""

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

VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."


def kubectl(
    kubeconfig: Path, *args: str, check: bool = True, timeout: float = 180
) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=timeout
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}")
    return done


def pod_template(labels: dict[str, str], image: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": image, "command": ["sh", "-c", "exec sleep 3600"]}],
        },
    }


def deployment(
    name: str, replicas: int, image: str, node: str, extra: dict[str, str], scratch: bool = False
) -> dict[str, Any]:
    template = pod_template({"app": name, **extra}, image, node)
    if scratch:  # local storage: kubectl drain wants --delete-emptydir-data for these
        template["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        template["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template},
    }


def budget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}}, **spec},
    }


def ready(pod: client.V1Pod) -> bool:
    return pod.metadata.deletion_timestamp is None and any(
        c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
    )


def ready_pods(kube: client.CoreV1Api, namespace: str, selector: str, count: int) -> list[client.V1Pod]:
    def check() -> list[client.V1Pod] | None:
        pods = kube.list_namespaced_pod(namespace, label_selector=selector).items
        live = [p for p in pods if ready(p)]
        return live if len(live) == count and len(pods) == count else None

    return wait_for(check, timeout=120, what=f"{count} ready pods {selector}")


def settled(policy: client.PolicyV1Api, namespace: str, name: str, allowed: int, expected: int) -> None:
    """The disruption controller has computed the budget's current spec."""

    def check() -> bool:
        pdb = policy.read_namespaced_pod_disruption_budget(name, namespace)
        status = pdb.status
        return bool(
            status
            and status.observed_generation == pdb.metadata.generation
            and status.disruptions_allowed == allowed
            and status.expected_pods == expected
        )

    wait_for(check, timeout=60, what=f"budget {name} to allow {allowed} of {expected}")


def evict(kube: client.CoreV1Api, namespace: str, name: str) -> None:
    kube.create_namespaced_pod_eviction(
        name,
        namespace,
        client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace)),
    )


def test_eviction_api_respects_the_budget(api_client, kube, namespace, node_name, image) -> None:  # type: ignore[no-untyped-def]
    apps, policy = client.AppsV1Api(api_client), client.PolicyV1Api(api_client)
    apps.create_namespaced_deployment(namespace, deployment("web", 2, image, node_name, {}))
    policy.create_namespaced_pod_disruption_budget(namespace, budget("web", minAvailable=1))
    first, second = ready_pods(kube, namespace, "app=web", 2)
    settled(policy, namespace, "web", allowed=1, expected=2)

    evict(kube, namespace, first.metadata.name)
    with pytest.raises(ApiException) as err:
        evict(kube, namespace, second.metadata.name)
    assert err.value.status == 429
    status = json.loads(err.value.body)
    assert (status["reason"], status["message"]) == ("TooManyRequests", VIOLATES)
    assert status["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert kube.read_namespaced_pod(second.metadata.name, namespace).metadata.deletion_timestamp is None
    # the evicted pod goes, the Deployment replaces it and the budget allows one again
    wait_for(
        lambda: (
            first.metadata.name
            not in {
                p.metadata.name for p in kube.list_namespaced_pod(namespace, label_selector="app=web").items
            }
        ),
        timeout=60,
        what="the evicted pod to go",
    )
    ready_pods(kube, namespace, "app=web", 2)
    settled(policy, namespace, "web", allowed=1, expected=2)


def test_cordon_drain_uncordon(api_client, kube, kubeconfig, namespace, node_name, image) -> None:  # type: ignore[no-untyped-def]
    apps, policy = client.AppsV1Api(api_client), client.PolicyV1Api(api_client)
    mine = {"e2e-drain": namespace}
    selector = f"e2e-drain={namespace}"
    apps.create_namespaced_daemon_set(
        namespace,
        {
            "metadata": {"name": "agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": pod_template({"app": "agent", **mine}, image, node_name),
            },
        },
    )
    apps.create_namespaced_deployment(namespace, deployment("web", 2, image, node_name, mine, scratch=True))
    policy.create_namespaced_pod_disruption_budget(namespace, budget("web", minAvailable=2))
    (daemon,) = ready_pods(kube, namespace, "app=agent", 1)
    web = ready_pods(kube, namespace, "app=web", 2)
    settled(policy, namespace, "web", allowed=0, expected=2)
    drain = ["drain", node_name, "--pod-selector", selector]
    try:
        refused = kubectl(kubeconfig, *drain, "--timeout=30s", check=False)
        assert refused.returncode != 0
        assert "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore)" in refused.stderr
        assert f"{namespace}/{daemon.metadata.name}" in refused.stderr
        assert (
            "cannot delete Pods with local storage (use --delete-emptydir-data to override)" in refused.stderr
        )
        for pod in web:
            assert f"{namespace}/{pod.metadata.name}" in refused.stderr
        assert f"node/{node_name} cordoned" in refused.stdout
        node = kube.read_node(node_name)
        assert node.spec.unschedulable is True
        taints = wait_for(
            lambda: [
                t
                for t in kube.read_node(node_name).spec.taints or []
                if t.key == "node.kubernetes.io/unschedulable"
            ],
            timeout=30,
            what="the unschedulable taint",
        )
        assert taints[0].effect == "NoSchedule"

        drain += ["--ignore-daemonsets", "--delete-emptydir-data"]
        blocked = kubectl(kubeconfig, *drain, "--timeout=12s", check=False, timeout=90)
        assert blocked.returncode != 0
        out = blocked.stdout + blocked.stderr
        assert f"Warning: ignoring DaemonSet-managed Pods: {namespace}/{daemon.metadata.name}" in out
        assert "(will retry after 5s): " + VIOLATES in out
        assert "global timeout reached: 12s" in out
        assert all(
            kube.read_namespaced_pod(p.metadata.name, namespace).metadata.deletion_timestamp is None
            for p in web
        )

        policy.patch_namespaced_pod_disruption_budget(
            "web", namespace, {"spec": {"minAvailable": None, "maxUnavailable": 2}}
        )
        settled(policy, namespace, "web", allowed=2, expected=2)
        drained = kubectl(kubeconfig, *drain, "--timeout=120s", timeout=180)
        for pod in web:
            assert f"pod/{pod.metadata.name} evicted" in drained.stdout
        assert f"node/{node_name} drained" in drained.stdout

        # the DaemonSet's pod stays; the Deployment's new pods wait, unscheduled, for the node
        still = kube.read_namespaced_pod(daemon.metadata.name, namespace)
        assert still.metadata.uid == daemon.metadata.uid and still.metadata.deletion_timestamp is None
        old = {p.metadata.name for p in web}

        def pending() -> list[client.V1Pod] | None:
            pods = kube.list_namespaced_pod(namespace, label_selector="app=web").items
            new = [p for p in pods if p.metadata.name not in old]
            return new if len(pods) == 2 and len(new) == 2 else None

        for pod in wait_for(pending, timeout=60, what="two replacement pods"):
            assert pod.status.phase == "Pending" and not pod.spec.node_name
    finally:
        uncordoned = kubectl(kubeconfig, "uncordon", node_name, check=False)
    assert uncordoned.returncode == 0 and f"node/{node_name} uncordoned" in uncordoned.stdout
    assert not kube.read_node(node_name).spec.unschedulable
    for pod in ready_pods(kube, namespace, "app=web", 2):
        assert pod.metadata.name not in old and pod.spec.node_name == node_name
