"""Failures of the agent and of the runtime, on the project's own stack (these restart its parts).

kill -9 of the agent must not touch running pods: the restarted agent adopts the same containers with
the same restart counts. Stopping containerd makes the Node NotReady with the runtime's message (once
it has not answered for 30 s, as upstream), and Ready again once containerd is back, with the pods
untouched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from e2e.probing import exec_action, fast, has_event, main_status, probe_pod, read
from e2e.waiting import wait_for

pytestmark = pytest.mark.integration


def sleeper(name: str, node: str, image: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            node_name=node,
            termination_grace_period_seconds=1,
            containers=[client.V1Container(name="main", image=image, command=["sleep", "3600"])],
        ),
    )


def snapshot(kube, namespace: str) -> dict[str, tuple[str, int, str]]:
    """name -> (containerID, restartCount, phase) for every pod in the namespace."""
    out = {}
    for pod in kube.list_namespaced_pod(namespace).items:
        cs = (pod.status.container_statuses or [None])[0]
        out[pod.metadata.name] = (
            cs.container_id if cs else "",
            cs.restart_count if cs else -1,
            pod.status.phase,
        )
    return out


def all_running(kube, namespace: str, count: int) -> Callable[[], Any]:
    def check():
        snap = snapshot(kube, namespace)
        ok = len(snap) == count and all(phase == "Running" and cid for cid, _, phase in snap.values())
        return snap if ok else None

    return check


def ready_condition(kube, node: str):
    return next(c for c in kube.read_node(node).status.conditions if c.type == "Ready")


def kubelet_metric(kube, node: str, name: str, **labels: str) -> float:
    """One sample of the node's /metrics (through the API server's nodes/proxy, as Prometheus scrapes
    it); 0 while the kubelet does not answer."""
    try:
        text = kube.connect_get_node_proxy_with_path(node, "metrics")
    except client.ApiException:
        return 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def worker_syncs(kube, node: str, operation: str) -> float:
    """How many pod syncs of one kind (create: a worker's first) the running kubelet has finished."""
    return kubelet_metric(kube, node, "kubelet_pod_worker_duration_seconds_count", operation_type=operation)


def pods_on_node(kube, node: str) -> int:
    pods = kube.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    return sum(1 for p in pods if p.status.phase not in ("Succeeded", "Failed"))


def test_agent_kill_9_adopts_running_pods(kube, namespace, node_name, image, stack):
    for i in range(5):
        kube.create_namespaced_pod(namespace, sleeper(f"keep-{i}", node_name, image))
    before = wait_for(all_running(kube, namespace, 5), what="5 pods Running")
    stack.agent.kill()
    stack.start_agent()
    # The restarted kubelet's first sync of a pod ("create") is where it would (wrongly) restart it:
    # wait until its pod workers have made that first pass over every pod bound to the node.
    wait_for(
        lambda: worker_syncs(kube, node_name, "create") >= pods_on_node(kube, node_name),
        timeout=60,
        what="the restarted kubelet's first sync of every pod",
    )
    after = wait_for(all_running(kube, namespace, 5), what="5 pods Running after restart")
    assert after == before
    # And it still acts: a new pod starts under the restarted agent.
    kube.create_namespaced_pod(namespace, sleeper("after-restart", node_name, image))
    wait_for(all_running(kube, namespace, 6), what="new pod Running")


def test_containerd_down_makes_node_not_ready(kube, namespace, node_name, image, stack):
    kube.create_namespaced_pod(namespace, sleeper("survivor", node_name, image))
    before = wait_for(all_running(kube, namespace, 1), what="survivor Running")
    assert ready_condition(kube, node_name).status == "True"
    stack.containerd.stop_daemon()
    stopped = time.monotonic()
    try:
        # One failed Status call is no outage: the node turns NotReady only once the runtime has not
        # answered for 30 s (upstream's threshold). The poll below watches Ready throughout, so the
        # first False it sees comes no sooner than that threshold allows (asserted after it).
        cond = wait_for(
            lambda: (c := ready_condition(kube, node_name)).status == "False" and c,
            timeout=60,
            what="Ready=False",
        )
        # Its last answer came at most one 5 s round of upstream's updateRuntimeUp before the stop.
        assert time.monotonic() - stopped >= 24
        assert cond.reason == "KubeletNotReady"
        assert "container runtime is down" in cond.message
    finally:
        stack.containerd.start()
    wait_for(lambda: ready_condition(kube, node_name).status == "True", timeout=40, what="Ready again")
    # Two relists of the runtime after it came back: the kubelet has seen what containerd now reports
    # and acted on it before the pods are compared.
    relists = kubelet_metric(kube, node_name, "kubelet_pleg_relist_duration_seconds_count")
    wait_for(
        lambda: kubelet_metric(kube, node_name, "kubelet_pleg_relist_duration_seconds_count") >= relists + 2,
        timeout=30,
        what="two relists after the runtime came back",
    )
    assert snapshot(kube, namespace) == before


def test_api_server_restart_is_survived(kube, namespace, node_name, image, stack):
    kube.create_namespaced_pod(namespace, sleeper("before", node_name, image))
    wait_for(all_running(kube, namespace, 1), what="before Running")
    stack.apiserver.stop()
    time.sleep(3)
    stack.apiserver.start()
    # The agent's watch resumes (or relists): a pod created after the restart starts, and the node
    # keeps reporting Ready.
    kube.create_namespaced_pod(namespace, sleeper("after", node_name, image))
    wait_for(all_running(kube, namespace, 2), timeout=90, what="after Running")
    assert ready_condition(kube, node_name).status == "True"


def test_agent_kill_9_keeps_probed_pods_alive_and_ready(kube, namespace, node_name, image, stack):
    """The restarted agent starts its probes over (verdicts are not persisted, as upstream's): liveness
    starts as alive, so nothing is killed, and readiness and startup are probed at once, so the pod is
    Ready again within a few seconds."""
    body = probe_pod(
        "probed",
        node_name,
        image,
        "mkdir -p /www && echo ok > /www/healthz && touch /tmp/ready && exec httpd -f -p 8080 -h /www",
        startupProbe=fast(exec_action("true")),
        readinessProbe=fast(exec_action("cat /tmp/ready"), periodSeconds=10),
        livenessProbe=fast({"httpGet": {"path": "/healthz", "port": 8080}}, periodSeconds=10),
    )
    kube.create_namespaced_pod(namespace, body)
    before = wait_for(
        lambda: (cs := main_status(read(kube, namespace, "probed"))) and cs.ready and cs,
        timeout=60,
        what="ready",
    )
    stack.agent.kill()
    stack.start_agent()
    after = wait_for(
        lambda: (cs := main_status(read(kube, namespace, "probed"))) and cs.ready and cs.started and cs,
        timeout=15,
        what="ready again under the restarted agent",
    )
    assert (after.container_id, after.restart_count) == (before.container_id, 0)
    time.sleep(3)  # a few probe rounds: still nothing killed
    assert main_status(read(kube, namespace, "probed")).restart_count == 0
    assert not has_event(kube, namespace, "probed", "Killing")


def test_restarted_agent_reports_starting(kube, node_name, stack):
    """Each start of the agent is a Starting event on the Node (upstream's BirthCry)."""

    def starts() -> int:
        items = kube.list_namespaced_event("default", field_selector=f"involvedObject.name={node_name}").items
        return sum(
            (e.count or 1) for e in items if e.reason == "Starting" and e.involved_object.kind == "Node"
        )

    before = starts()
    stack.agent.kill()
    stack.start_agent()
    wait_for(lambda: starts() > before, timeout=30, what="a new Starting event")
