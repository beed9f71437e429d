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
        lambda: (
            (p := kube.read_namespaced_pod("of-bad", namespace))
            and main_status(p)
            and main_status(p).restart_count >= 1
            and p
        ),
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
        lambda: (
            {c.type: c.status for c in kube.read_namespaced_pod("init", namespace).status.conditions}["Ready"]
            == "True"
        ),
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
    missing = (
        f"{registry}/library/no-such-image:1.0" if registry != "docker.io" else "no-such-image-pykubelet:1.0"
    )
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
    events = {
        e.reason
        for e in kube.list_namespaced_event(namespace, field_selector="involvedObject.name=missing").items
    }
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
    polite = make_pod(
        "polite",
        node_name,
        image,
        "trap 'exit 0' TERM; while true; do sleep 0.2; done",
        restart="Always",
        grace=30,
    )
    stubborn = make_pod(
        "stubborn",
        node_name,
        image,
        "trap '' TERM; while true; do sleep 0.2; done",
        restart="Always",
        grace=3,
    )
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
    pod = wait_for(
        phase_is(kube, namespace, "deadline", "Failed", "Succeeded"), timeout=60, what="Failed by deadline"
    )
    assert (pod.status.phase, pod.status.reason) == ("Failed", "DeadlineExceeded")
    assert pod.status.message == "Pod was active on the node longer than the specified deadline"
    assert main_status(pod).state.terminated is not None


def test_sidecar_runs_beside_the_app_and_stops_after_it(kube, namespace, node_name, image):
    pod = make_pod("sidecar", node_name, image, "sleep 3; exit 0", restart="Never", grace=1)
    side = client.V1Container(
        name="side", image=image, command=["sh", "-c", "sleep 3600"], restart_policy="Always"
    )
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


def _watch_pod(
    kube, namespace: str, name: str, until: Callable[[client.V1Pod], bool], timeout: int = 90
) -> list[client.V1Pod]:
    """Every version of the pod a watch shows, until `until` holds for one (which is the last)."""
    from kubernetes import watch

    seen: list[client.V1Pod] = []
    w = watch.Watch()
    for event in w.stream(
        kube.list_namespaced_pod, namespace, field_selector=f"metadata.name={name}", timeout_seconds=timeout
    ):
        seen.append(event["object"])
        if until(event["object"]):
            w.stop()
    assert seen and until(seen[-1]), (
        f"pod {name} never reached the state waited for; last: {seen[-1].status if seen else None}"
    )
    return seen


def test_crash_backoff_is_counted_from_the_exit(kube, namespace, node_name, image):
    """The restart of a container that ran for a while still waits out its back-off window, counted
    from its exit (not from its last start): after the second exit it shows CrashLoopBackOff and starts
    again no sooner than 10 s later."""
    kube.create_namespaced_pod(
        namespace, make_pod("slowcrash", node_name, image, "sleep 12; exit 1", restart="Always", grace=1)
    )
    seen = _watch_pod(
        kube,
        namespace,
        "slowcrash",
        lambda p: bool((cs := main_status(p)) and cs.restart_count >= 2 and cs.state.running),
        timeout=120,
    )
    reasons = [
        cs.state.waiting.reason
        for p in seen
        if (cs := main_status(p)) and cs.restart_count == 1 and cs.state.waiting
    ]
    assert "CrashLoopBackOff" in reasons
    last = main_status(seen[-1])
    waited = (last.state.running.started_at - last.last_state.terminated.finished_at).total_seconds()
    assert waited >= 9, f"restarted {waited} s after its exit"


def _other_name(image: str) -> str:
    """The same image under another reference (another container hash, the same content)."""
    if image.endswith(":latest"):
        return image.removesuffix(":latest")
    return image if "/" in image else f"docker.io/library/{image}"


def test_fixed_image_restarts_at_once(kube, namespace, node_name, image):
    """The crash-loop back-off belongs to the container's definition: once its image is changed, the
    container starts right away instead of waiting out the old definition's window."""
    kube.create_namespaced_pod(
        namespace, make_pod("fixme", node_name, image, "exit 1", restart="Always", grace=1)
    )
    wait_for(
        lambda: (cs := main_status(kube.read_namespaced_pod("fixme", namespace))) and cs.restart_count >= 3,
        timeout=90,
        what="three restarts (a 40 s window ahead)",
    )
    patch = {"spec": {"containers": [{"name": "main", "image": _other_name(image)}]}}
    changed = time.monotonic()
    kube.patch_namespaced_pod("fixme", namespace, patch)
    wait_for(
        lambda: (
            (cs := main_status(kube.read_namespaced_pod("fixme", namespace)))
            and cs.image_id
            and cs.restart_count >= 4
        ),
        timeout=20,
        what="a start with the new image",
    )
    assert time.monotonic() - changed < 15


def test_never_pod_with_sidecar_is_terminal_only_once_the_sidecar_stopped(kube, namespace, node_name, image):
    pod = make_pod("side-done", node_name, image, "sleep 2; exit 0", restart="Never", grace=2)
    pod.spec.init_containers = [
        client.V1Container(
            name="side", image=image, command=["sh", "-c", "sleep 3600"], restart_policy="Always"
        )
    ]
    kube.create_namespaced_pod(namespace, pod)
    seen = _watch_pod(kube, namespace, "side-done", lambda p: p.status.phase in ("Succeeded", "Failed"))
    final = seen[-1]
    assert final.status.phase == "Succeeded"
    side = final.status.init_container_statuses[0]
    assert side.state.terminated is not None, "a terminal phase while the sidecar still ran"
    # Before the end, the app container's exit left the pod Running while the sidecar was stopped.
    assert any(
        p.status.phase == "Running" and main_status(p) and main_status(p).state.terminated for p in seen
    )


def test_terminal_phase_arrives_with_the_sandbox_stopped(kube, namespace, node_name, image):
    kube.create_namespaced_pod(namespace, make_pod("done", node_name, image, "echo done", restart="Never"))
    seen = _watch_pod(kube, namespace, "done", lambda p: p.status.phase in ("Succeeded", "Failed"))
    conditions = {c.type: c.status for c in seen[-1].status.conditions}
    assert conditions["PodReadyToStartContainers"] == "False"


def test_container_statuses_sorted_by_name(kube, namespace, node_name, image):
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="order"),
        spec=client.V1PodSpec(
            node_name=node_name,
            termination_grace_period_seconds=1,
            containers=[
                client.V1Container(name=n, image=image, command=["sleep", "3600"])
                for n in ("zeta", "alpha", "mid")
            ],
        ),
    )
    kube.create_namespaced_pod(namespace, pod)
    pod = wait_for(phase_is(kube, namespace, "order", "Running"), what="Running")
    assert [cs.name for cs in pod.status.container_statuses] == ["alpha", "mid", "zeta"]


def test_force_deleted_pod_is_stopped_with_its_own_grace_and_events(kube, namespace, node_name, image):
    kube.create_namespaced_pod(
        namespace,
        make_pod(
            "forced", node_name, image, "trap 'exit 0' TERM; sleep 3600 & wait", restart="Always", grace=20
        ),
    )
    wait_for(phase_is(kube, namespace, "forced", "Running"), what="Running")
    kube.delete_namespaced_pod(
        "forced", namespace, grace_period_seconds=0
    )  # kubectl delete --force --grace-period=0

    def killing():
        items = kube.list_namespaced_event(namespace, field_selector="involvedObject.name=forced").items
        return [e for e in items if e.reason == "Killing"]

    [event] = wait_for(killing, timeout=30, what="a Killing event for the force-deleted pod")[:1]
    assert event.message == "Stopping container main"


def test_shorter_grace_period_cuts_a_running_termination(kubeconfig, kube, namespace, node_name, image):
    import subprocess

    kube.create_namespaced_pod(
        namespace,
        make_pod(
            "slowstop",
            node_name,
            image,
            "trap '' TERM; while true; do sleep 0.2; done",
            restart="Always",
            grace=60,
        ),
    )
    wait_for(phase_is(kube, namespace, "slowstop", "Running"), what="Running")
    kubectl = [
        "kubectl",
        "--kubeconfig",
        str(kubeconfig),
        "-n",
        namespace,
        "delete",
        "pod",
        "slowstop",
        "--wait=false",
    ]
    subprocess.run(kubectl, check=True, capture_output=True, timeout=30)
    wait_for(
        lambda: any(
            e.reason == "Killing"
            for e in kube.list_namespaced_event(
                namespace, field_selector="involvedObject.name=slowstop"
            ).items
        ),
        timeout=30,
        what="the stop begun",
    )
    started = time.monotonic()
    subprocess.run([*kubectl, "--grace-period=1"], check=True, capture_output=True, timeout=30)

    def gone() -> bool:
        try:
            kube.read_namespaced_pod("slowstop", namespace)
        except ApiException as err:
            return err.status == 404
        return False

    wait_for(gone, timeout=40, what="the pod gone with the shorter grace period")
    assert time.monotonic() - started < 30, "the 60 s stop was not cut short"


def test_deleted_pending_pod_ends_failed(kube, namespace, node_name, image):
    """A pod deleted before it ever ran gets Failed as its last phase (upstream's TerminatePod)."""
    from kubernetes import watch

    missing = "no-such-image-pykubelet:3.0"
    kube.create_namespaced_pod(
        namespace, make_pod("never-ran", node_name, missing, "true", restart="Always", grace=1)
    )
    wait_for(
        lambda: (
            (cs := main_status(kube.read_namespaced_pod("never-ran", namespace)))
            and cs.state.waiting
            and cs.state.waiting.reason in ("ErrImagePull", "ImagePullBackOff")
        ),
        timeout=60,
        what="image pull failing",
    )
    phases = []
    w = watch.Watch()
    for event in w.stream(
        kube.list_namespaced_pod, namespace, field_selector="metadata.name=never-ran", timeout_seconds=60
    ):
        if event["type"] == "ADDED" and not phases:
            kube.delete_namespaced_pod("never-ran", namespace)
        phases.append(event["object"].status.phase)
        if event["type"] == "DELETED":
            w.stop()
    assert phases[-1] == "Failed", phases
