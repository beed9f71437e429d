"""Scenarios that need two schedulable nodes, through the API and kubectl only (skipped on a one-node
cluster; the project's own stack runs them with PYKUBE_NODES=2):

- a pod on one node reaches a pod on the other by its pod IP, and a Service whose endpoints are on both
  nodes answers from both backends (the service rules see every node's endpoints);
- `kubectl drain` of the node holding a Deployment's two pods moves them to the other node, one at a
  time as the PodDisruptionBudget (minAvailable 1) allows: the second eviction is refused with
  upstream's 429 while the first pod's replacement is not yet Ready (kubectl's retry message);
- a DaemonSet runs exactly one pod on every schedulable node.

Every pod is kept to the two chosen nodes (kubernetes.io/hostname) and the drain to this test's pods
(`--pod-selector`); whatever happens, both nodes are uncordoned.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from e2e.twonodes import kubectl, on_nodes, schedulable
from e2e.waiting import wait_for

pytestmark = pytest.mark.integration

VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."


def web_pod(name: str, labels: dict[str, str], image: str, node: str) -> dict[str, Any]:
    """busybox httpd answering its own name on 8080."""
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "web",
                    "image": image,
                    "command": [
                        "sh",
                        "-c",
                        "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www",
                    ],
                    "ports": [{"containerPort": 8080}],
                    "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                }
            ],
        },
    }


def running_pod(kube: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod:
    def check() -> client.V1Pod | None:
        pod = kube.read_namespaced_pod(name, namespace)
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        return pod if ready and pod.status.pod_ip else None

    return wait_for(check, timeout=120, what=f"pod {name} Ready with an IP")


def fetch(kubeconfig: Path, namespace: str, pod: str, url: str) -> str:
    # `timeout`, not wget's -T: busybox 1.35's wget crashes with it.
    done = kubectl(
        kubeconfig,
        "-n",
        namespace,
        "exec",
        pod,
        "--",
        "timeout",
        "5",
        "wget",
        "-q",
        "-O",
        "-",
        url,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else ""


def test_pods_and_a_service_across_two_nodes(kube, kubeconfig, namespace, image, two_nodes) -> None:  # type: ignore[no-untyped-def]
    a, b = two_nodes
    for name, node in (("web-a", a), ("web-b", b), ("client", a)):
        kube.create_namespaced_pod(
            namespace, web_pod(name, {"app": "web" if name != "client" else "client"}, image, node)
        )
    pods = {name: running_pod(kube, namespace, name) for name in ("web-a", "web-b", "client")}
    assert pods["web-b"].spec.node_name == b and pods["client"].spec.node_name == a
    assert pods["web-b"].status.pod_ip != pods["client"].status.pod_ip

    # Pod to pod across nodes, by pod IP (no NAT in between: the server's log would show the client's IP,
    # and its answer is its own name).
    url = f"http://{pods['web-b'].status.pod_ip}:8080/"
    assert (
        wait_for(lambda: fetch(kubeconfig, namespace, "client", url), timeout=30, what="web-b from client")
        == "web-b"
    )

    # A Service with one endpoint on each node: both answer through its ClusterIP.
    kube.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )
    ip = kube.read_namespaced_service("web", namespace).spec.cluster_ip
    seen: set[str] = set()

    def both() -> set[str] | None:
        seen.add(fetch(kubeconfig, namespace, "client", f"http://{ip}/"))
        return seen if {"web-a", "web-b"} <= seen else None

    wait_for(both, timeout=90, interval=0.1, what=f"answers from both nodes through {ip}")


@pytest.fixture
def uncordon(kubeconfig: Path, two_nodes: list[str]) -> Iterator[None]:
    yield
    for node in two_nodes:
        kubectl(kubeconfig, "uncordon", node, check=False)


def test_drain_moves_a_deployment_to_the_other_node_within_its_budget(  # type: ignore[no-untyped-def]
    api_client, kube, kubeconfig, namespace, image, two_nodes, uncordon
) -> None:
    a, b = two_nodes
    apps, policy = client.AppsV1Api(api_client), client.PolicyV1Api(api_client)
    kubectl(kubeconfig, "cordon", b)  # both replicas start on a
    template = {
        "metadata": {"labels": {"app": "moved"}},
        "spec": {
            "affinity": on_nodes([a, b]),
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "command": ["sh", "-c", "exec sleep 3600"],
                    "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
                }
            ],
        },
    }
    apps.create_namespaced_deployment(
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "moved"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "moved"}}, "template": template},
        },
    )
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "moved"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "moved"}}},
        },
    )

    def placed(node: str) -> list[client.V1Pod] | None:
        pods = kube.list_namespaced_pod(namespace, label_selector="app=moved").items
        ready = [
            p
            for p in pods
            if p.metadata.deletion_timestamp is None
            and p.spec.node_name == node
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        ]
        return ready if len(ready) == 2 and len(pods) == 2 else None

    wait_for(lambda: placed(a), timeout=120, what=f"both replicas Ready on {a}")
    wait_for(
        lambda: (
            policy.read_namespaced_pod_disruption_budget("moved", namespace).status.disruptions_allowed == 1
        ),
        timeout=60,
        what="the budget to allow one disruption",
    )
    kubectl(kubeconfig, "uncordon", b)
    started = time.monotonic()
    drained = kubectl(
        kubeconfig, "drain", a, "--pod-selector", "app=moved", "--ignore-daemonsets", "--delete-emptydir-data",
        "--timeout", "180s",
    )  # fmt: skip
    out = drained.stdout + drained.stderr
    assert f"node/{a} drained" in out, out
    # kubectl evicts both at once: the budget let one go and refused the other until the first pod's
    # replacement on the other node was Ready.
    assert VIOLATES in out, out
    moved = wait_for(lambda: placed(b), timeout=120, what=f"both replicas Ready on {b}")
    assert {p.spec.node_name for p in moved} == {b}
    assert time.monotonic() - started < 240


def test_a_daemonset_runs_one_pod_on_every_schedulable_node(
    api_client, kube, namespace, image, two_nodes
) -> None:  # type: ignore[no-untyped-def]
    apps = client.AppsV1Api(api_client)
    apps.create_namespaced_daemon_set(
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "every"},
            "spec": {
                "selector": {"matchLabels": {"app": "every"}},
                "template": {
                    "metadata": {"labels": {"app": "every"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [
                            {"name": "c", "image": image, "command": ["sh", "-c", "exec sleep 3600"]}
                        ],
                    },
                },
            },
        },
    )
    nodes = {n.metadata.name for n in kube.list_node().items if schedulable(n)}

    def one_each() -> dict[str, int] | None:
        pods = kube.list_namespaced_pod(namespace, label_selector="app=every").items
        running = [p for p in pods if p.status.phase == "Running"]
        per_node: dict[str, int] = {}
        for pod in running:
            per_node[pod.spec.node_name] = per_node.get(pod.spec.node_name, 0) + 1
        return per_node if set(per_node) >= nodes and len(pods) == len(per_node) else None

    per_node = wait_for(one_each, timeout=120, what="a running pod of the DaemonSet on every node")
    assert set(per_node.values()) == {1}
    assert set(two_nodes) <= set(per_node)
    status = apps.read_namespaced_daemon_set("every", namespace).status
    assert status.desired_number_scheduled == len(per_node)
