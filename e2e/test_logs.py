"""`kubectl logs` through the API server to the node agent's containerLogs endpoint, including
--previous after a restart (which needs the garbage collector to keep the last dead container)."""

from __future__ import annotations

import json
import re
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
    kube.create_namespaced_pod(
        namespace, pod("hello", node_name, image, "echo hello; sleep 0.5; echo world >&2", "Never")
    )
    wait_for(
        lambda: kube.read_namespaced_pod("hello", namespace).status.phase == "Succeeded", what="Succeeded"
    )
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
    assert (
        json.loads(err.value.body)["message"]
        == "a container name must be specified for pod two, choose one of: [a b]"
    )
    with pytest.raises(ApiException) as err:
        read_log(kube, namespace, "two", container="c")
    assert err.value.status == 400
    assert json.loads(err.value.body)["message"] == "container c is not valid for pod two"
    wait_for(
        lambda: (
            (statuses := kube.read_namespaced_pod("two", namespace).status.container_statuses)
            and all(cs.state.running for cs in statuses)
        ),
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
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out == "line 1\nline 2\nline 3\n"


def kubectl_logs(kubeconfig, namespace: str, name: str, *flags: str) -> str:
    """`kubectl logs` output; a broken or truncated stream makes kubectl fail, and this with it."""
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace, "logs", name, *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


def test_kubectl_logs_since_and_since_time(kubeconfig, kube, namespace, node_name, image):
    """--since and --since-time compare each line's CRI timestamp with the bound (issue 22 item 1)."""
    kube.create_namespaced_pod(
        namespace, pod("clock", node_name, image, "echo early; sleep 3; echo late; sleep 3600", "Never")
    )
    wait_for(lambda: kube.read_namespaced_pod("clock", namespace).status.phase == "Running", what="Running")
    wait_for(lambda: read_log(kube, namespace, "clock") == "early\nlate\n", what="both lines logged")
    assert kubectl_logs(kubeconfig, namespace, "clock", "--since=1h") == "early\nlate\n"
    stamped = kubectl_logs(kubeconfig, namespace, "clock", "--timestamps").splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["early", "late"]
    # upstream writes RFC3339 with nine fraction digits (RFC3339NanoFixed), whatever the runtime wrote.
    rfc3339_nano_fixed = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}(Z|[+-]\d\d:\d\d)"
    assert all(re.fullmatch(rfc3339_nano_fixed, line.split(" ", 1)[0]) for line in stamped), stamped
    # sinceTime travels with second precision: the second "late" was written in is after "early".
    late_second = re.sub(r"\.\d+", "", stamped[1].split(" ", 1)[0])
    assert kubectl_logs(kubeconfig, namespace, "clock", f"--since-time={late_second}") == "late\n"
    assert read_log(kube, namespace, "clock", since_seconds=3600) == "early\nlate\n"
    wait_for(
        lambda: kubectl_logs(kubeconfig, namespace, "clock", "--since=1s") == "",
        what="no line in the last second",
    )


def test_final_partial_line_is_served(kubeconfig, kube, namespace, node_name, image):
    """A last line without a newline is in the log as a partial (P) entry: served as written, with and
    without -f (issue 22 item 2)."""
    kube.create_namespaced_pod(namespace, pod("nonl", node_name, image, "echo first; printf DONE", "Never"))
    wait_for(
        lambda: kube.read_namespaced_pod("nonl", namespace).status.phase == "Succeeded", what="Succeeded"
    )
    assert read_log(kube, namespace, "nonl") == "first\nDONE"
    assert kubectl_logs(kubeconfig, namespace, "nonl", "-f") == "first\nDONE"
    assert kubectl_logs(kubeconfig, namespace, "nonl", "--tail=1") == "DONE"
