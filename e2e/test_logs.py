"""`kubectl logs` through the API server to the node agent's containerLogs endpoint, including
--previous after a restart (which needs the garbage collector to keep the last dead container)."""

from __future__ import annotations

import json
import subprocess

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e.waiting import wait_for

pytestmark = pytest.mark.integration




def read_log(kube, ns: str, name: str, **kw) -> str:
    return kube.read_namespaced_pod_log(name, ns, **kw)


def pod(name: str, node: str, image: str, script: str, restart: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            node_name=node,
            restart_policy=restart,
            termination_grace_period_seconds=1,
            containers=[client.V1Container(name="main", image=image, command=["sh", "-c", script])],
        ),
    )


def test_logs_and_previous(kube, namespace, node_name, image):
    kube.create_namespaced_pod(namespace, pod("hello", node_name, image, "echo hello; sleep 0.5; echo world >&2", "Never"))
    wait_for(lambda: kube.read_namespaced_pod("hello", namespace).status.phase == "Succeeded", what="Succeeded")
    assert read_log(kube, namespace, "hello") == "hello\nworld\n"
    assert read_log(kube, namespace, "hello", tail_lines=1) == "world\n"

    script = 'echo "run $(cat /proc/uptime)"; exit 1'
    kube.create_namespaced_pod(namespace, pod("again", node_name, image, script, "Always"))

    def restarted():
        statuses = kube.read_namespaced_pod("again", namespace).status.container_statuses or []
        return statuses and statuses[0].restart_count >= 1 and statuses[0].last_state.terminated

    wait_for(restarted, what="a restart")
    previous = read_log(kube, namespace, "again", previous=True)
    assert previous.startswith("run ") and previous.endswith("\n")


def test_log_errors_name_the_container(kube, namespace, node_name, image):
    two = client.V1Pod(
        metadata=client.V1ObjectMeta(name="two"),
        spec=client.V1PodSpec(
            node_name=node_name,
            termination_grace_period_seconds=1,
            containers=[
                client.V1Container(name=n, image=image, command=["sh", "-c", f"echo {n}; sleep 3600"])
                for n in ("a", "b")
            ],
        ),
    )
    kube.create_namespaced_pod(namespace, two)
    with pytest.raises(ApiException) as err:
        read_log(kube, namespace, "two")
    assert err.value.status == 400
    assert json.loads(err.value.body)["message"] == "a container name must be specified for pod two, choose one of: [a b]"
    with pytest.raises(ApiException) as err:
        read_log(kube, namespace, "two", container="c")
    assert err.value.status == 400
    assert json.loads(err.value.body)["message"] == "container c is not valid for pod two"
    wait_for(
        lambda: (statuses := kube.read_namespaced_pod("two", namespace).status.container_statuses)
        and all(cs.state.running for cs in statuses),
        what="both containers running",
    )
    wait_for(lambda: read_log(kube, namespace, "two", container="b") == "b\n", what="b's log")
    with pytest.raises(ApiException) as err:
        read_log(kube, namespace, "two", container="a", tail_lines=-1)
    assert err.value.status == 422


def test_kubectl_logs_follow(kubeconfig, kube, namespace, node_name, image):
    """`kubectl logs -f` streams until the container exits, through the server to the agent."""
    kube.create_namespaced_pod(
        namespace, pod("counter", node_name, image, "for i in 1 2 3; do echo line $i; sleep 1; done", "Never")
    )
    wait_for(
        lambda: kube.read_namespaced_pod("counter", namespace).status.phase in ("Running", "Succeeded"),
        what="started",
    )
    out = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace, "logs", "-f", "counter"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert out == "line 1\nline 2\nline 3\n"
