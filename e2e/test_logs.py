"""`kubectl logs` through the API server to the node agent's containerLogs endpoint, including
--previous after a restart (which needs the garbage collector to keep the last dead container)."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e.waiting import wait_for

pytestmark = pytest.mark.integration




def read_log(kube, ns: str, name: str, **kw) -> str:
    try:
        return kube.read_namespaced_pod_log(name, ns, **kw)
    except ApiException as err:
        # A server without the log subresource answers 404/405 without naming the pod.
        if err.status in (404, 405) and f'pods "{name}" not found' not in (err.body or ""):
            pytest.skip(f"the API server does not serve pods/log yet: {err.status} {err.reason}")
        raise


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
