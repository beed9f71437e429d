"""What the node itself refuses or ends, seen through the API: kubelet admission for pods bound
straight to the node (spec.nodeName, no scheduler in the way), and a container killed for its memory.
"""

from __future__ import annotations

import random

import pytest
from kubernetes import client
from kubernetes.utils import parse_quantity

from e2e.waiting import finished, wait_for

pytestmark = pytest.mark.integration


def bound(name: str, node: str, image: str, script: str = "sleep 3600", **container) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            node_name=node,
            restart_policy="Never",
            termination_grace_period_seconds=1,
            containers=[
                client.V1Container(name="main", image=image, command=["sh", "-c", script], **container)
            ],
        ),
    )


def test_pod_that_does_not_fit_is_rejected_out_of_cpu(kube, namespace, node_name, image):
    allocatable = kube.read_node(node_name).status.allocatable
    asked = client.V1ResourceRequirements(requests={"cpu": "1000"})
    kube.create_namespaced_pod(namespace, bound("too-big", node_name, image, resources=asked))
    pod = finished(kube, namespace, "too-big")
    assert (pod.status.phase, pod.status.reason) == ("Failed", "OutOfcpu")
    assert pod.status.message.startswith(
        "Pod was rejected: Node didn't have enough resource: cpu, requested: 1000000, used: "
    )
    assert pod.status.message.endswith(f", capacity: {int(parse_quantity(allocatable['cpu']) * 1000)}")
    assert not pod.status.container_statuses  # nothing was ever started
    events = kube.list_namespaced_event(namespace, field_selector="involvedObject.name=too-big").items
    assert any(e.reason == "OutOfcpu" and e.type == "Warning" for e in events)


def test_pod_whose_node_selector_does_not_match_is_rejected(kube, namespace, node_name, image):
    pod = bound("elsewhere", node_name, image)
    pod.spec.node_selector = {"pykubelet.test/absent": "yes"}
    kube.create_namespaced_pod(namespace, pod)
    pod = finished(kube, namespace, "elsewhere")
    assert (pod.status.phase, pod.status.reason) == ("Failed", "NodeAffinity")
    assert (
        pod.status.message
        == "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
    )


def test_pod_whose_host_port_is_taken_is_rejected(kube, namespace, node_name, image):
    port = random.randint(40000, 49000)
    ports = [client.V1ContainerPort(container_port=8080, host_port=port)]
    kube.create_namespaced_pod(namespace, bound("first", node_name, image, ports=ports))

    def running():
        return kube.read_namespaced_pod("first", namespace).status.phase == "Running"

    wait_for(running, what="the first pod Running")
    kube.create_namespaced_pod(namespace, bound("second", node_name, image, ports=ports))
    pod = finished(kube, namespace, "second")
    assert (pod.status.phase, pod.status.reason) == ("Failed", "NodePorts")
    assert (
        pod.status.message
        == "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
    )
    assert kube.read_namespaced_pod("first", namespace).status.phase == "Running"


def test_container_past_its_memory_limit_is_oom_killed(kube, namespace, node_name, image):
    # The shell itself (PID 1) holds what head writes, so the OOM kill ends the container.
    limits = client.V1ResourceRequirements(limits={"memory": "32Mi"}, requests={"memory": "32Mi"})
    kube.create_namespaced_pod(
        namespace,
        bound("hog", node_name, image, "a=$(head -c 200m /dev/zero | tr '\\000' x)", resources=limits),
    )
    pod = finished(kube, namespace, "hog", timeout=90)
    term = pod.status.container_statuses[0].state.terminated
    assert (pod.status.phase, term.exit_code, term.reason) == ("Failed", 137, "OOMKilled")
