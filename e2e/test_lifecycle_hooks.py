"""postStart and preStop hooks seen through the API only.

What a hook did is read back through the container's termination message: a hook that writes to
/dev/termination-log leaves its mark in the status of the container it ran in once that container ends.
"""

from __future__ import annotations

import pytest
from kubernetes import watch

from e2e.probing import events, exec_action, fast, has_event, main_status, probe_pod, read
from e2e.waiting import finished, wait_for

pytestmark = pytest.mark.integration

TERM_AWARE = "trap 'exit 0' TERM; sleep 3600 & wait"


def test_post_start_runs_in_the_container(kube, namespace, node_name, image):
    body = probe_pod(
        "post-start",
        node_name,
        image,
        "for i in $(seq 50); do [ -f /tmp/hook ] && break; sleep 0.1; done; cat /tmp/hook > /dev/termination-log",
        restart="Never",
        lifecycle={"postStart": exec_action("echo post-start-ran > /tmp/hook")},
    )
    kube.create_namespaced_pod(namespace, body)
    pod = finished(kube, namespace, "post-start")
    assert pod.status.phase == "Succeeded"
    assert main_status(pod).state.terminated.message == "post-start-ran\n"


def test_failing_post_start_kills_the_container(kube, namespace, node_name, image):
    body = probe_pod(
        "post-start-fails",
        node_name,
        image,
        TERM_AWARE,
        lifecycle={"postStart": exec_action("echo nope >&2; exit 3")},
    )
    seen: set[str] = set()
    w = watch.Watch()
    kube.create_namespaced_pod(namespace, body)
    for event in w.stream(
        kube.list_namespaced_pod,
        namespace,
        field_selector="metadata.name=post-start-fails",
        timeout_seconds=60,
    ):
        cs = main_status(event["object"])
        if cs is not None and cs.state.waiting is not None:
            seen.add(cs.state.waiting.reason)
            if cs.state.waiting.reason == "PostStartHookError":
                assert (
                    'Exec lifecycle hook ([sh -c echo nope >&2; exit 3]) for Container "main" in Pod'
                    in cs.state.waiting.message
                )
        if "PostStartHookError" in seen and cs.restart_count >= 1:
            w.stop()
    assert "PostStartHookError" in seen, seen
    # The event carries upstream's fixed text: the hook's output (which may hold secrets) is only in the
    # container's waiting message, never in an event.
    assert has_event(kube, namespace, "post-start-fails", "FailedPostStartHook", "PostStartHook failed")
    assert not any("nope" in m for _, m in events(kube, namespace, "post-start-fails"))
    assert has_event(kube, namespace, "post-start-fails", "Killing", "FailedPostStartHook")


def test_http_post_start_that_cannot_connect_fails(kube, namespace, node_name, image):
    body = probe_pod(
        "post-start-http",
        node_name,
        image,
        # No TERM handler (PID 1 ignores SIGTERM): the kill ends in SIGKILL after the grace period, so the
        # phase cannot depend on whether a trap was set before the hook failed.
        "sleep 3600",
        restart="Never",
        grace=2,
        lifecycle={"postStart": {"httpGet": {"path": "/started", "port": 8080}}},
    )
    kube.create_namespaced_pod(namespace, body)
    pod = finished(kube, namespace, "post-start-http")
    assert pod.status.phase == "Failed"
    # 137: SIGKILL after the grace period. 2: the hook failed so fast that the kill reached runc's init
    # (a Go program, PID 1 of the container) before it exec'd the command; Go's runtime exits 2 when a
    # fatal signal's default action is ignored, as it is for PID 1. Upstream's kubelet has the same race.
    assert main_status(pod).state.terminated.exit_code in (137, 2)
    assert has_event(kube, namespace, "post-start-http", "FailedPostStartHook", "PostStartHook failed")


def test_pre_stop_runs_before_a_liveness_kill(kube, namespace, node_name, image):
    body = probe_pod(
        "pre-stop-live",
        node_name,
        image,
        TERM_AWARE,
        livenessProbe=fast(exec_action("exit 1"), initialDelaySeconds=2),
        lifecycle={"preStop": exec_action("echo pre-stop-ran > /dev/termination-log")},
    )
    kube.create_namespaced_pod(namespace, body)
    pod = wait_for(
        lambda: (
            (p := read(kube, namespace, "pre-stop-live"))
            and (cs := main_status(p))
            and cs.restart_count >= 1
            and p
        ),
        timeout=60,
        what="a restart after liveness fails",
    )
    last = main_status(pod).last_state.terminated
    assert last.message == "pre-stop-ran\n"
    assert last.exit_code == 0  # the script's TERM trap ran: a graceful stop, not a SIGKILL


def test_pre_stop_runs_when_the_pod_is_deleted(kube, namespace, node_name, image):
    body = probe_pod(
        "pre-stop-delete",
        node_name,
        image,
        TERM_AWARE,
        grace=20,
        lifecycle={"preStop": exec_action("echo pre-stop-ran > /dev/termination-log; sleep 1")},
    )
    kube.create_namespaced_pod(namespace, body)
    wait_for(
        lambda: (cs := main_status(read(kube, namespace, "pre-stop-delete"))) and cs.state.running,
        timeout=60,
        what="running",
    )
    w = watch.Watch()
    messages: list[str] = []
    stream = w.stream(
        kube.list_namespaced_pod,
        namespace,
        field_selector="metadata.name=pre-stop-delete",
        timeout_seconds=60,
    )
    for event in stream:
        if event["type"] == "ADDED" and not messages:
            kube.delete_namespaced_pod("pre-stop-delete", namespace)
            messages.append("")
        cs = main_status(event["object"])
        if cs is not None and cs.state.terminated is not None:
            messages.append(cs.state.terminated.message or "")
        if event["type"] == "DELETED":
            w.stop()
    assert "pre-stop-ran\n" in messages, messages


def test_failing_pre_stop_event_names_no_output(kube, namespace, node_name, image):
    body = probe_pod(
        "pre-stop-fails",
        node_name,
        image,
        TERM_AWARE,
        grace=5,
        lifecycle={"preStop": exec_action("echo token=s3cret >&2; exit 4")},
    )
    kube.create_namespaced_pod(namespace, body)
    wait_for(
        lambda: (cs := main_status(read(kube, namespace, "pre-stop-fails"))) and cs.state.running,
        timeout=60,
        what="running",
    )
    kube.delete_namespaced_pod("pre-stop-fails", namespace)
    wait_for(
        lambda: has_event(kube, namespace, "pre-stop-fails", "FailedPreStopHook", "PreStopHook failed"),
        timeout=60,
        what="FailedPreStopHook event",
    )
    assert not any("s3cret" in m for _, m in events(kube, namespace, "pre-stop-fails"))
