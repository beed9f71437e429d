"""Pod lifecycle through the Kubernetes API only: exits, restarts, init containers, image errors, deletion.

Every scenario reads what a user would read (`kubectl get pod -o yaml`), so the same file runs against a
kind cluster's upstream kubelet (KUBECONFIG, NODE_NAME) to compare behaviour.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e.waiting import wait_for

pytestmark = pytest.mark.integration




def make_pod(
    name: str,
    node: str,
    image: str,
    script: str,
    restart: str = "Never",
    init: list[tuple[str, str]] | None = None,
    grace: int | None = None,
    pull_policy: str | None = None,
) -> client.V1Pod:
    def container(cname: str, cscript: str, cimage: str = image) -> client.V1Container:
        return client.V1Container(
            name=cname, image=cimage, command=["sh", "-c", cscript], image_pull_policy=pull_policy
        )

    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            node_name=node,
            restart_policy=restart,
            termination_grace_period_seconds=grace,
            init_containers=[container(n, s) for n, s in init] if init else None,
            containers=[container("main", script)],
        ),
    )


def phase_is(kube, ns: str, name: str, *phases: str) -> Callable[[], Any]:
    def check():
        pod = kube.read_namespaced_pod(name, ns)
        return pod if pod.status.phase in phases else None

    return check


def main_status(pod: client.V1Pod) -> client.V1ContainerStatus | None:
    for cs in pod.status.container_statuses or []:
        if cs.name == "main":
            return cs
    return None


def test_never_exit_zero_succeeds(kube, namespace, node_name, image):
    kube.create_namespaced_pod(namespace, make_pod("ok", node_name, image, "echo done"))
    pod = wait_for(phase_is(kube, namespace, "ok", "Succeeded", "Failed"), what="terminal phase")
    assert pod.status.phase == "Succeeded"
    term = main_status(pod).state.terminated
    assert (term.exit_code, term.reason) == (0, "Completed")
    assert main_status(pod).container_id.startswith("containerd://")
    assert main_status(pod).restart_count == 0
    conds = {c.type: c for c in pod.status.conditions}
    assert conds["Ready"].status == "False" and conds["Ready"].reason == "PodCompleted"
    assert conds["PodScheduled"].status == "True"
    assert pod.status.qos_class == "BestEffort"
    assert pod.status.host_ip and pod.status.start_time


def test_never_exit_one_fails(kube, namespace, node_name, image):
    kube.create_namespaced_pod(namespace, make_pod("bad", node_name, image, "exit 1"))
    pod = wait_for(phase_is(kube, namespace, "bad", "Succeeded", "Failed"), what="terminal phase")
    assert pod.status.phase == "Failed"
    term = main_status(pod).state.terminated
    assert (term.exit_code, term.reason) == (1, "Error")
    # Terminal phases never change: still Failed a few syncs later.
    time.sleep(2)
    assert kube.read_namespaced_pod("bad", namespace).status.phase == "Failed"


def test_always_crashing_container_backs_off(kube, namespace, node_name, image):
    kube.create_namespaced_pod(namespace, make_pod("crash", node_name, image, "exit 3", restart="Always"))

    def in_backoff():
        pod = kube.read_namespaced_pod("crash", namespace)
        cs = main_status(pod)
        if cs and cs.state.waiting and cs.state.waiting.reason == "CrashLoopBackOff":
            return pod
        return None

    pod = wait_for(in_backoff, timeout=60, what="CrashLoopBackOff")
    cs = main_status(pod)
    assert pod.status.phase == "Running"
    assert cs.restart_count >= 1
    assert cs.last_state.terminated.exit_code == 3
    assert cs.last_state.terminated.reason == "Error"
    assert "back-off 10s restarting failed container=main" in cs.state.waiting.message
    first = cs.restart_count
    # After the 10 s backoff the container runs again and the count grows.
    wait_for(
        lambda: main_status(kube.read_namespaced_pod("crash", namespace)).restart_count > first,
        timeout=40,
        what="restartCount to grow",
    )
    events = kube.list_namespaced_event(namespace, field_selector="involvedObject.name=crash").items
    backoff = [e for e in events if e.reason == "BackOff"]
    assert backoff and backoff[0].type == "Warning" and backoff[0].source.component == "kubelet"


def test_on_failure_restarts_failures_only(kube, namespace, node_name, image):
    kube.create_namespaced_pod(namespace, make_pod("of-ok", node_name, image, "exit 0", restart="OnFailure"))
    kube.create_namespaced_pod(namespace, make_pod("of-bad", node_name, image, "exit 2", restart="OnFailure"))
    pod = wait_for(phase_is(kube, namespace, "of-ok", "Succeeded", "Failed"), what="of-ok terminal")
    assert pod.status.phase == "Succeeded" and main_status(pod).restart_count == 0
    pod = wait_for(
        lambda: (p := kube.read_namespaced_pod("of-bad", namespace))
        and main_status(p)
        and main_status(p).restart_count >= 1
        and p,
        what="of-bad restarted",
    )
    assert pod.status.phase in ("Running", "Pending")


def test_init_containers_run_in_order_first(kube, namespace, node_name, image):
    pod = make_pod(
        "init",
        node_name,
        image,
        "sleep 3600",
        restart="Always",
        init=[("first", "sleep 1"), ("second", "sleep 1")],
        grace=2,
    )
    kube.create_namespaced_pod(namespace, pod)
    pod = wait_for(phase_is(kube, namespace, "init", "Running"), what="Running")
    first, second = pod.status.init_container_statuses
    assert (first.name, second.name) == ("first", "second")
    for cs in (first, second):
        assert cs.state.terminated.reason == "Completed"
    assert first.state.terminated.finished_at <= second.state.terminated.started_at
    assert second.state.terminated.finished_at <= main_status(pod).state.running.started_at
    conds = {c.type: c.status for c in pod.status.conditions}
    assert conds["Initialized"] == "True"
    wait_for(
        lambda: {c.type: c.status for c in kube.read_namespaced_pod("init", namespace).status.conditions}["Ready"] == "True",
        what="Ready",
    )


def test_failing_init_container_fails_never_pod(kube, namespace, node_name, image):
    pod = make_pod("init-fail", node_name, image, "echo never", init=[("broken", "exit 7")])
    kube.create_namespaced_pod(namespace, pod)
    pod = wait_for(phase_is(kube, namespace, "init-fail", "Failed", "Succeeded"), what="Failed")
    assert pod.status.phase == "Failed"
    assert pod.status.init_container_statuses[0].state.terminated.exit_code == 7
    main = main_status(pod)
    assert main.state.waiting is not None and main.state.waiting.reason == "PodInitializing"
    conds = {c.type: c for c in pod.status.conditions}
    assert conds["Initialized"].status == "False"
    assert conds["Initialized"].reason == "ContainersNotInitialized"


def test_missing_image_pull_backoff(kube, namespace, node_name, image):
    registry = image.rsplit("/", 2)[0] if image.count("/") >= 2 else "docker.io"
    missing = f"{registry}/library/no-such-image:1.0" if registry != "docker.io" else "no-such-image-pykubelet:1.0"
    kube.create_namespaced_pod(namespace, make_pod("missing", node_name, missing, "true"))
    seen: set[str] = set()

    def reasons():
        cs = main_status(kube.read_namespaced_pod("missing", namespace))
        if cs and cs.state.waiting:
            seen.add(cs.state.waiting.reason)
        return {"ErrImagePull", "ImagePullBackOff"} <= seen

    wait_for(reasons, timeout=60, interval=0.1, what="ErrImagePull then ImagePullBackOff")
    pod = kube.read_namespaced_pod("missing", namespace)
    assert pod.status.phase == "Pending"
    events = {e.reason for e in kube.list_namespaced_event(namespace, field_selector="involvedObject.name=missing").items}
    assert {"Pulling", "Failed", "BackOff"} <= events


def test_never_pull_policy_without_image(kube, namespace, node_name, image):
    pod = make_pod("never", node_name, "no-such-image-pykubelet:2.0", "true", pull_policy="Never")
    kube.create_namespaced_pod(namespace, pod)

    def never_pull():
        cs = main_status(kube.read_namespaced_pod("never", namespace))
        return cs if cs and cs.state.waiting and cs.state.waiting.reason == "ErrImageNeverPull" else None

    cs = wait_for(never_pull, what="ErrImageNeverPull")
    assert "is not present with pull policy of Never" in cs.state.waiting.message


def test_delete_stops_within_grace_and_removes_object(kube, namespace, node_name, image):
    # The container exits on SIGTERM; the one that ignores it is killed when its 3 s grace runs out.
    polite = make_pod("polite", node_name, image, "trap 'exit 0' TERM; while true; do sleep 0.2; done", restart="Always", grace=30)
    stubborn = make_pod("stubborn", node_name, image, "trap '' TERM; while true; do sleep 0.2; done", restart="Always", grace=3)
    for pod in (polite, stubborn):
        kube.create_namespaced_pod(namespace, pod)
    for name in ("polite", "stubborn"):
        wait_for(phase_is(kube, namespace, name, "Running"), what=f"{name} Running")

    def gone(name: str) -> Callable[[], bool]:
        def check() -> bool:
            try:
                kube.read_namespaced_pod(name, namespace)
            except ApiException as err:
                return err.status == 404
            return False

        return check

    started = time.monotonic()
    kube.delete_namespaced_pod("polite", namespace)
    wait_for(gone("polite"), timeout=30, what="polite removed")
    assert time.monotonic() - started < 30
    started = time.monotonic()
    kube.delete_namespaced_pod("stubborn", namespace)
    wait_for(gone("stubborn"), timeout=20, what="stubborn removed")
    elapsed = time.monotonic() - started
    assert elapsed >= 2.5, f"stubborn container removed after {elapsed:.1f} s, before its grace period"
    events = {e.reason for e in kube.list_namespaced_event(namespace).items}
    assert "Killing" in events


def test_active_deadline_fails_pod(kube, namespace, node_name, image):
    pod = make_pod("deadline", node_name, image, "sleep 3600", restart="Always", grace=1)
    pod.spec.active_deadline_seconds = 3
    kube.create_namespaced_pod(namespace, pod)
    pod = wait_for(phase_is(kube, namespace, "deadline", "Failed", "Succeeded"), timeout=60, what="Failed by deadline")
    assert (pod.status.phase, pod.status.reason) == ("Failed", "DeadlineExceeded")
    assert pod.status.message == "Pod was active on the node longer than the specified deadline"
    assert main_status(pod).state.terminated is not None


def test_sidecar_runs_beside_the_app_and_stops_after_it(kube, namespace, node_name, image):
    pod = make_pod("sidecar", node_name, image, "sleep 3; exit 0", restart="Never", grace=1)
    side = client.V1Container(name="side", image=image, command=["sh", "-c", "sleep 3600"], restart_policy="Always")
    pod.spec.init_containers = [side]
    kube.create_namespaced_pod(namespace, pod)

    def both_running():
        p = kube.read_namespaced_pod("sidecar", namespace)
        inits = p.status.init_container_statuses or []
        main = main_status(p)
        ok = inits and inits[0].state.running and main and main.state.running
        return p if ok else None

    p = wait_for(both_running, what="sidecar and app running together")
    assert p.status.phase == "Running"
    assert {c.type: c.status for c in p.status.conditions}["Initialized"] == "True"
    p = wait_for(phase_is(kube, namespace, "sidecar", "Succeeded", "Failed"), what="done when the app exits")
    assert p.status.phase == "Succeeded"
