"""Liveness, readiness and startup probes seen through the API only: container `ready`/`started`,
the pod's Ready and ContainersReady conditions, restarts, and the Unhealthy/Killing events.

Probes tick every second (periodSeconds 1) so each scenario takes seconds; the scripts change the
container's health on their own clock, so nothing but the API is needed to drive them.
"""

from __future__ import annotations

import pytest

from e2e.probing import (
    conditions,
    events,
    exec_action,
    fast,
    has_event,
    main_status,
    probe_pod,
    read,
)
from e2e.waiting import finished, wait_for

pytestmark = pytest.mark.integration

HTTPD = "mkdir -p /www && echo ok > /www/healthz && httpd -f -p 8080 -h /www"


def test_exec_readiness_follows_a_file_without_restarting(kube, namespace, node_name, image):
    script = "touch /tmp/ready; sleep 6; rm /tmp/ready; sleep 6; touch /tmp/ready; sleep 3600"
    body = probe_pod(
        "ready-file", node_name, image, script, readinessProbe=fast(exec_action("cat /tmp/ready"))
    )
    kube.create_namespaced_pod(namespace, body)

    def ready_is(value: bool):
        def check():
            pod = read(kube, namespace, "ready-file")
            cs = main_status(pod)
            return pod if cs and cs.state.running and cs.ready is value else None

        return check

    pod = wait_for(ready_is(True), timeout=60, what="container ready")
    assert conditions(pod)["Ready"].status == "True"
    assert conditions(pod)["ContainersReady"].status == "True"
    pod = wait_for(ready_is(False), timeout=30, what="container unready after the file is removed")
    ready, containers_ready = conditions(pod)["Ready"], conditions(pod)["ContainersReady"]
    assert (ready.status, ready.reason) == ("False", "ContainersNotReady")
    assert ready.message == "containers with unready status: [main]"
    assert (containers_ready.status, containers_ready.reason) == ("False", "ContainersNotReady")
    assert pod.status.phase == "Running" and main_status(pod).started is True
    pod = wait_for(ready_is(True), timeout=30, what="ready again once the file is back")
    assert main_status(pod).restart_count == 0
    assert has_event(kube, namespace, "ready-file", "Unhealthy", "Readiness probe failed: ")
    assert not has_event(kube, namespace, "ready-file", "Killing")


def test_http_liveness_failure_restarts_the_container(kube, namespace, node_name, image):
    # Healthy for 4 s, then /healthz answers 404; each new container starts healthy again.
    script = f"({HTTPD}) & sleep 4; rm /www/healthz; sleep 3600"
    body = probe_pod(
        "http-live",
        node_name,
        image,
        script,
        ports=[{"name": "http", "containerPort": 8080}],
        livenessProbe=fast({"httpGet": {"path": "/healthz", "port": "http"}}, failureThreshold=2),
        readinessProbe=fast({"httpGet": {"path": "/healthz", "port": 8080}}),
    )
    kube.create_namespaced_pod(namespace, body)
    pod = wait_for(
        lambda: (
            (p := read(kube, namespace, "http-live"))
            and (cs := main_status(p))
            and cs.restart_count >= 1
            and p
        ),
        timeout=60,
        what="a restart after liveness fails",
    )
    last = main_status(pod).last_state.terminated
    assert last is not None and last.exit_code != 0
    assert has_event(
        kube,
        namespace,
        "http-live",
        "Unhealthy",
        "Liveness probe failed: HTTP probe failed with statuscode: 404",
    )
    assert has_event(
        kube, namespace, "http-live", "Killing", "Container main failed liveness probe, will be restarted"
    )
    # The new container serves /healthz again: ready, with the restart counted.
    wait_for(
        lambda: (cs := main_status(read(kube, namespace, "http-live"))) and cs.ready and cs.state.running,
        timeout=30,
        what="ready after the restart",
    )


def test_tcp_readiness_waits_for_the_listener(kube, namespace, node_name, image):
    body = probe_pod(
        "tcp-ready",
        node_name,
        image,
        f"sleep 5; {HTTPD}",
        readinessProbe=fast({"tcpSocket": {"port": 8080}}),
        livenessProbe=fast({"tcpSocket": {"port": 8080}}, initialDelaySeconds=20, failureThreshold=3),
    )
    kube.create_namespaced_pod(namespace, body)
    wait_for(
        lambda: (cs := main_status(read(kube, namespace, "tcp-ready"))) and cs.state.running and not cs.ready,
        timeout=60,
        what="running but not ready before the listener opens",
    )
    wait_for(
        lambda: main_status(read(kube, namespace, "tcp-ready")).ready,
        timeout=30,
        what="ready once it listens",
    )
    assert has_event(kube, namespace, "tcp-ready", "Unhealthy", "Readiness probe failed: dial tcp ")
    assert any("connect: connection refused" in m for _, m in events(kube, namespace, "tcp-ready"))
    assert main_status(read(kube, namespace, "tcp-ready")).restart_count == 0


def test_startup_probe_holds_liveness_and_readiness_back(kube, namespace, node_name, image):
    body = probe_pod(
        "startup",
        node_name,
        image,
        "sleep 5; touch /tmp/started; sleep 3600",
        startupProbe=fast(exec_action("test -f /tmp/started"), failureThreshold=30),
        # Would kill the container at once if it ran before the startup probe passed.
        livenessProbe=fast(exec_action("test -f /tmp/started")),
        readinessProbe=fast(exec_action("true")),
    )
    kube.create_namespaced_pod(namespace, body)
    pod = wait_for(
        lambda: (p := read(kube, namespace, "startup")) and (cs := main_status(p)) and cs.state.running and p,
        timeout=60,
        what="running",
    )
    cs = main_status(pod)
    assert cs.started is False and cs.ready is False
    assert conditions(pod)["Ready"].status == "False"
    pod = wait_for(
        lambda: (p := read(kube, namespace, "startup")) and main_status(p).ready and p,
        timeout=30,
        what="ready",
    )
    assert main_status(pod).started is True and main_status(pod).restart_count == 0
    assert conditions(pod)["Ready"].status == "True"
    assert not has_event(kube, namespace, "startup", "Unhealthy", "Liveness probe failed")


def test_startup_probe_failure_kills_the_container(kube, namespace, node_name, image):
    body = probe_pod(
        "startup-fail",
        node_name,
        image,
        "sleep 3600",
        startupProbe=fast(exec_action("exit 1"), failureThreshold=2),
    )
    kube.create_namespaced_pod(namespace, body)
    wait_for(
        lambda: (cs := main_status(read(kube, namespace, "startup-fail"))) and cs.restart_count >= 1,
        timeout=60,
        what="a restart after the startup probe fails",
    )
    assert has_event(
        kube, namespace, "startup-fail", "Killing", "Container main failed startup probe, will be restarted"
    )
    assert has_event(kube, namespace, "startup-fail", "Unhealthy", "Startup probe failed: ")


def test_exec_probe_that_outlives_its_timeout_fails(kube, namespace, node_name, image):
    body = probe_pod(
        "slow-probe",
        node_name,
        image,
        "sleep 3600",
        readinessProbe=fast(exec_action("sleep 10"), timeoutSeconds=1),
    )
    kube.create_namespaced_pod(namespace, body)
    wait_for(
        lambda: has_event(kube, namespace, "slow-probe", "Unhealthy", "timed out"),
        timeout=60,
        what="a timed-out readiness probe",
    )
    message = next(m for r, m in events(kube, namespace, "slow-probe") if r == "Unhealthy")
    # v1.31+ wording (k8s.io/cri-client): containerd 1.6 answers DEADLINE_EXCEEDED at the timeout.
    assert message == 'Readiness probe failed: command timed out: "sh -c sleep 10" timed out after 1s'
    pod = read(kube, namespace, "slow-probe")
    assert main_status(pod).ready is False and main_status(pod).restart_count == 0


def test_liveness_failure_under_restart_policy_never_fails_the_pod(kube, namespace, node_name, image):
    body = probe_pod(
        "never-live",
        node_name,
        image,
        "sleep 3600",
        restart="Never",
        livenessProbe=fast(exec_action("exit 1")),
    )
    kube.create_namespaced_pod(namespace, body)
    pod = finished(kube, namespace, "never-live")
    assert pod.status.phase == "Failed"
    assert main_status(pod).state.terminated is not None and main_status(pod).restart_count == 0
    assert has_event(kube, namespace, "never-live", "Unhealthy", "Liveness probe failed")
    # As upstream's computePodActions: with nothing left to run under Never the container is not killed
    # on its own but with the whole pod (KillPod), and that kill names no cause.
    wait_for(
        lambda: has_event(kube, namespace, "never-live", "Killing", "Stopping container main"),
        timeout=10,
        what="the pod's Killing event",
    )
    assert not has_event(kube, namespace, "never-live", "Killing", "will be restarted")


def test_grpc_probes_against_a_real_health_server(kube, namespace, node_name, grpc_image):
    # SERVING for the whole server and for svc-a; the whole server turns NOT_SERVING after 6 s.
    script = "touch /tmp/up; (sleep 6; rm /tmp/up) & exec grpc-health -port 5000 -serving svc-a -status-file /tmp/up"
    body = probe_pod(
        "grpc",
        node_name,
        grpc_image,
        script,
        readinessProbe=fast({"grpc": {"port": 5000}}),
        livenessProbe=fast({"grpc": {"port": 5000, "service": "svc-a"}}, failureThreshold=3),
    )
    kube.create_namespaced_pod(namespace, body)
    wait_for(
        lambda: (cs := main_status(read(kube, namespace, "grpc"))) and cs.ready, timeout=60, what="ready"
    )
    pod = wait_for(
        lambda: (
            (p := read(kube, namespace, "grpc"))
            and (cs := main_status(p))
            and cs.state.running
            and not cs.ready
            and p
        ),
        timeout=30,
        what="unready once the server says NOT_SERVING",
    )
    assert conditions(pod)["Ready"].status == "False"
    assert has_event(
        kube,
        namespace,
        "grpc",
        "Unhealthy",
        'Readiness probe failed: service unhealthy (responded with "NOT_SERVING")',
    )
    assert main_status(pod).restart_count == 0  # svc-a stays SERVING: liveness holds


def test_grpc_liveness_for_an_unknown_service_restarts(kube, namespace, node_name, grpc_image):
    body = probe_pod(
        "grpc-unknown",
        node_name,
        grpc_image,
        "exec grpc-health -port 5000",
        livenessProbe=fast({"grpc": {"port": 5000, "service": "nobody"}}, failureThreshold=2),
    )
    kube.create_namespaced_pod(namespace, body)
    wait_for(
        lambda: (cs := main_status(read(kube, namespace, "grpc-unknown"))) and cs.restart_count >= 1,
        timeout=60,
        what="a restart after the grpc liveness probe fails",
    )
    assert has_event(
        kube,
        namespace,
        "grpc-unknown",
        "Unhealthy",
        "Liveness probe failed: error: health rpc probe failed: rpc error: code = NotFound desc = unknown service",
    )
