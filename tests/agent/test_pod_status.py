"""Pod status rules (phase, container states, conditions) against upstream's, one case at a time."""

from __future__ import annotations

import pytest

from agent.pods.runtime import ContainerRecord, PodRuntime, SandboxRecord
from agent.pods.status import StatusInputs, compute_status, pod_phase, terminate_pod

NS = 1_000_000_000


def pod(restart="Always", containers=("main",), init=(), status=None):
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {
            "restartPolicy": restart,
            "containers": [{"name": n, "image": "busybox"} for n in containers],
            "initContainers": [{"name": n, "image": "busybox"} for n in init],
        },
        "status": status or {},
    }


def rec(name, state, exit_code=0, restarts=0, cid=None, kind="app", sandbox="sb1", reason=""):
    return ContainerRecord(
        id=cid or f"{name}-{restarts}",
        name=name,
        kind=kind,
        sandbox_id=sandbox,
        restart_count=restarts,
        hash="",
        state=state,
        created_at=restarts + 1,
        started_at=10 * NS,
        finished_at=20 * NS if state == "exited" else 0,
        exit_code=exit_code,
        reason=reason or ("" if state != "exited" else ("Completed" if exit_code == 0 else "Error")),
        message="",
        image="docker.io/library/busybox:latest",
        image_ref="docker.io/library/busybox@sha256:abc",
        log_path="",
    )


def runtime(*records, ready=True):
    rt = PodRuntime("u1", [SandboxRecord("sb1", 0, ready, 1, "10.0.0.5", (), False)])
    for r in records:
        rt.containers.setdefault(r.name, []).append(r)
    for recs in rt.containers.values():
        recs.sort(key=lambda r: r.restart_count, reverse=True)
    return rt


def status_of(p, rt, **kw):
    return compute_status(
        StatusInputs(pod=p, runtime=rt, host_ip="192.0.2.1", now="2026-01-01T00:00:00Z", **kw)
    )


def test_running_container():
    st = status_of(pod(), runtime(rec("main", "running")))
    assert st["phase"] == "Running"
    cs = st["containerStatuses"][0]
    assert cs["state"] == {"running": {"startedAt": "1970-01-01T00:00:10Z"}}
    assert cs["ready"] and cs["started"] and cs["restartCount"] == 0
    assert cs["containerID"] == "containerd://main-0"
    assert cs["imageID"] == "docker.io/library/busybox@sha256:abc"
    conds = {c["type"]: c for c in st["conditions"]}
    assert {k: v["status"] for k, v in conds.items()} == {
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
        "PodScheduled": "True",
    }
    assert st["podIP"] == "10.0.0.5" and st["podIPs"] == [{"ip": "10.0.0.5"}]
    assert st["hostIP"] == "192.0.2.1" and st["qosClass"] == "BestEffort"


def test_nothing_yet_is_container_creating():
    st = status_of(pod(), PodRuntime("u1"))
    assert st["phase"] == "Pending"
    assert st["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["ContainersReady"]["reason"] == "ContainersNotReady"
    assert conds["ContainersReady"]["message"] == "containers with unready status: [main]"
    assert conds["PodReadyToStartContainers"]["status"] == "False"


@pytest.mark.parametrize(
    ("policy", "code", "phase"),
    [
        ("Never", 0, "Succeeded"),
        ("Never", 1, "Failed"),
        ("OnFailure", 0, "Succeeded"),
        ("OnFailure", 1, "Running"),
        ("Always", 0, "Running"),
    ],
)
def test_exited_phase_by_policy(policy, code, phase):
    st = status_of(pod(restart=policy), runtime(rec("main", "exited", code)))
    assert st["phase"] == phase
    term = st["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == code and term["reason"] == ("Completed" if code == 0 else "Error")


def test_succeeded_ready_reason_pod_completed():
    st = status_of(pod(restart="Never"), runtime(rec("main", "exited", 0)))
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "PodCompleted"


def test_crash_loop_waiting_with_last_state():
    rt = runtime(rec("main", "exited", 3, restarts=1), rec("main", "exited", 3, restarts=0))
    st = status_of(
        pod(),
        rt,
        waiting={"main": ("CrashLoopBackOff", "back-off 10s restarting failed container=main pod=p_ns(u1)")},
    )
    cs = st["containerStatuses"][0]
    assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert cs["lastState"]["terminated"]["exitCode"] == 3
    assert cs["restartCount"] == 1 and not cs["ready"]
    assert st["phase"] == "Running"


def test_running_after_restart_shows_previous_termination():
    rt = runtime(rec("main", "running", restarts=2), rec("main", "exited", 1, restarts=1))
    cs = status_of(pod(), rt)["containerStatuses"][0]
    assert "running" in cs["state"] and cs["lastState"]["terminated"]["containerID"] == "containerd://main-1"
    assert cs["restartCount"] == 2


def test_init_pending_then_app_pod_initializing():
    p = pod(init=("i1", "i2"))
    st = status_of(p, runtime(rec("i1", "running", kind="init")))
    assert st["phase"] == "Pending"
    assert st["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    assert st["initContainerStatuses"][1]["state"]["waiting"]["reason"] == "PodInitializing"
    init = {c["type"]: c for c in st["conditions"]}["Initialized"]
    assert init["status"] == "False" and init["message"] == "containers with incomplete status: [i1 i2]"


def test_failed_init_under_never_fails_pod():
    st = status_of(pod(restart="Never", init=("i1",)), runtime(rec("i1", "exited", 7, kind="init")))
    assert st["phase"] == "Failed"


def test_failed_init_under_always_stays_pending():
    st = status_of(pod(init=("i1",)), runtime(rec("i1", "exited", 7, kind="init")))
    assert st["phase"] == "Pending"


def test_terminal_phase_never_changes():
    st = status_of(pod(status={"phase": "Failed"}), runtime(rec("main", "running")))
    assert st["phase"] == "Failed"


def test_terminating_always_pod_becomes_failed_or_succeeded():
    assert status_of(pod(), runtime(rec("main", "exited", 137)), terminal=True)["phase"] == "Failed"
    assert status_of(pod(), runtime(rec("main", "exited", 0)), terminal=True)["phase"] == "Succeeded"


def test_final_status_counts_a_container_without_an_end_as_failed():
    """upstream's TerminatePod: in the last status a container that reported no end is
    ContainerStatusUnknown (137), and the pod is Failed."""
    final = terminate_pod(pod(), status_of(pod(), runtime(rec("main", "running")), terminal=True))
    cs = final["containerStatuses"][0]
    assert cs["state"]["terminated"]["reason"] == "ContainerStatusUnknown"
    assert cs["state"]["terminated"]["exitCode"] == 137
    assert (
        cs["state"]["terminated"]["message"]
        == "The container could not be located when the pod was terminated"
    )
    assert final["phase"] == "Failed"


def test_transition_time_kept_when_status_unchanged():
    first = status_of(pod(), runtime(rec("main", "running")))
    p = pod(
        status={
            **first,
            "conditions": [{**c, "lastTransitionTime": "2025-01-01T00:00:00Z"} for c in first["conditions"]],
        }
    )
    again = status_of(p, runtime(rec("main", "running")))
    assert all(c["lastTransitionTime"] == "2025-01-01T00:00:00Z" for c in again["conditions"])


def test_phase_missing_status_counts_unknown():
    assert pod_phase(pod(), [{"name": "main", "state": {}, "lastState": {}}], False) == "Pending"


def test_succeeded_pod_with_init_is_initialized_pod_completed():
    rt = runtime(rec("i1", "exited", 0, kind="init"), rec("main", "exited", 0))
    st = status_of(pod(restart="Never", init=("i1",)), rt)
    init = {c["type"]: c for c in st["conditions"]}["Initialized"]
    assert (st["phase"], init["status"], init["reason"]) == ("Succeeded", "True", "PodCompleted")


def test_failure_forces_failed_with_reason_and_keeps_it():
    st = status_of(
        pod(),
        runtime(rec("main", "exited", 137)),
        terminal=True,
        failure=("DeadlineExceeded", "Pod was active on the node longer than the specified deadline"),
    )
    assert (st["phase"], st["reason"]) == ("Failed", "DeadlineExceeded")
    again = status_of(pod(status=st), runtime(rec("main", "exited", 137)), terminal=True)
    assert (again["phase"], again["reason"], again["message"]) == (
        "Failed",
        "DeadlineExceeded",
        st["message"],
    )


def test_active_deadline_left():
    from datetime import UTC, datetime

    from agent.pods.sync import active_deadline_left

    p = pod(status={"startTime": "2026-01-01T00:00:00Z"})
    assert active_deadline_left(p) is None
    p["spec"]["activeDeadlineSeconds"] = 30
    assert active_deadline_left(p, datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)) == 20


def test_readiness_gates_and_foreign_conditions_kept():
    p = pod()
    p["spec"]["readinessGates"] = [{"conditionType": "example.com/lb"}]
    st = status_of(p, runtime(rec("main", "running")))
    ready = {c["type"]: c for c in st["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "ReadinessGatesNotReady")
    assert (
        ready["message"] == 'corresponding condition of pod readiness gate "example.com/lb" does not exist.'
    )
    gate = {"type": "example.com/lb", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    p["status"] = {"conditions": [gate]}
    st = status_of(p, runtime(rec("main", "running")))
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Ready"]["status"] == "True" and conds["example.com/lb"] == gate


def test_sidecar_running_initializes_and_counts_for_readiness():
    p = pod(init=("side",))
    p["spec"]["initContainers"][0]["restartPolicy"] = "Always"
    st = status_of(p, runtime(rec("side", "running", kind="init")))
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Initialized"]["status"] == "True"
    # With init containers, an app container not yet created waits with PodInitializing (upstream's default).
    assert st["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    st = status_of(p, runtime(rec("side", "exited", 1, kind="init"), rec("main", "running")))
    assert st["phase"] == "Running"
    ready = {c["type"]: c for c in st["conditions"]}["ContainersReady"]
    assert ready["status"] == "False" and ready["message"] == "containers with unready status: [side]"


def test_never_pod_with_sidecar_stays_running_until_the_sidecar_stops():
    """upstream's getPhase counts a running sidecar as running: the pod is Running after its app
    container exited, and Succeeded only once the sidecar has been stopped too."""
    p = pod(restart="Never", init=("side",))
    p["spec"]["initContainers"][0]["restartPolicy"] = "Always"
    st = status_of(p, runtime(rec("side", "running", kind="init"), rec("main", "exited", 0)))
    assert st["phase"] == "Running"
    st = status_of(p, runtime(rec("side", "exited", 137, kind="init"), rec("main", "exited", 0)))
    assert st["phase"] == "Succeeded"


@pytest.mark.parametrize(
    ("restart", "exit_code", "shows_waiting"),
    [("Always", 0, True), ("OnFailure", 137, True), ("OnFailure", 0, False), ("Never", 137, False)],
)
def test_start_failure_reason_shows_only_when_the_container_will_start_again(
    restart, exit_code, shows_waiting
):
    """upstream's reason cache: PostStartHookError (or CrashLoopBackOff) replaces the terminated state
    only for a container that will be started again; under Never it stays terminated."""
    st = status_of(
        pod(restart=restart),
        runtime(rec("main", "exited", exit_code=exit_code)),
        waiting={"main": ("PostStartHookError", "hook failed")},
    )
    cs = st["containerStatuses"][0]
    if shows_waiting:
        assert cs["state"] == {"waiting": {"reason": "PostStartHookError", "message": "hook failed"}}
        assert cs["lastState"]["terminated"]["exitCode"] == exit_code
    else:
        assert cs["state"]["terminated"]["exitCode"] == exit_code and cs["lastState"] == {}


def test_probe_verdicts_in_container_status():
    st = status_of(
        pod(containers=("a", "b", "c")),
        runtime(rec("a", "running"), rec("b", "running"), rec("c", "running")),
        started={"b": False},
        readiness={"a": True, "b": True, "c": False},
    )
    by_name = {cs["name"]: cs for cs in st["containerStatuses"]}
    assert (by_name["a"]["started"], by_name["a"]["ready"]) == (True, True)
    assert (by_name["b"]["started"], by_name["b"]["ready"]) == (False, False)  # not started: never ready
    assert (by_name["c"]["started"], by_name["c"]["ready"]) == (True, False)
    ready = {c["type"]: c for c in st["conditions"]}["Ready"]
    assert ready["message"] == "containers with unready status: [b c]"


def test_regular_init_container_is_ready_once_it_exited_zero():
    st = status_of(pod(init=("setup",)), runtime(rec("setup", "exited", kind="init"), rec("main", "running")))
    assert st["initContainerStatuses"][0]["ready"] is True
    st = status_of(pod(init=("setup",)), runtime(rec("setup", "running", kind="init")))
    assert st["initContainerStatuses"][0]["ready"] is False


def _exited(tmp_path, log: bytes, message_file: bytes | None, policy: str, exit_code: int):
    from agent.cri import pb
    from agent.pods import labels as L

    (tmp_path / "0.log").write_bytes(log)
    st = pb.ContainerStatus(
        id="c1", state=pb.CONTAINER_EXITED, exit_code=exit_code, log_path=str(tmp_path / "0.log")
    )
    st.annotations[L.TERMINATION_MESSAGE_PATH] = "/dev/termination-log"
    st.annotations[L.TERMINATION_MESSAGE_POLICY] = policy
    if message_file is not None:
        (tmp_path / "msg").write_bytes(message_file)
        st.mounts.append(pb.Mount(container_path="/dev/termination-log", host_path=str(tmp_path / "msg")))
    return st, rec("main", "exited", exit_code=exit_code)


@pytest.mark.parametrize(
    ("log", "message_file", "policy", "exit_code", "expected"),
    [
        (
            b"2016-10-06T00:17:09Z stdout F started\n2016-10-06T00:17:10Z stdout P DONE\n",
            b"",
            "FallbackToLogsOnError",
            1,
            "started\nDONE",
        ),
        (
            b"2016-10-06T00:17:09Z stdout F started\n",
            b"",
            "FallbackToLogsOnError",
            0,
            "",
        ),  # only after a failure
        (b"2016-10-06T00:17:09Z stdout F started\n", b"", "File", 1, ""),
        (b"2016-10-06T00:17:09Z stdout F started\n", b"written", "FallbackToLogsOnError", 1, "written"),
        (b"", b"x" * 5000 + b"END", "File", 0, "x" * 4093 + "END"),  # the file's last 4096 bytes
        (
            b"".join(b"2016-10-06T00:17:09Z stderr F %d\n" % i for i in range(100)),
            None,
            "FallbackToLogsOnError",
            2,
            "".join(f"{i}\n" for i in range(20, 100)),
        ),  # the last 80 records
        (
            b"2016-10-06T00:17:09Z stdout F " + b"a" * 3000 + b"\n",
            None,
            "FallbackToLogsOnError",
            2,
            "a" * 2047 + "\n",
        ),
    ],
    ids=[
        "partial-last-line",
        "success",
        "policy-file",
        "file-first",
        "file-tail",
        "80-records",
        "2048-bytes",
    ],
)
def test_termination_message_as_upstream_reads_it(tmp_path, log, message_file, policy, exit_code, expected):
    from agent.pods.runtime import termination_message

    assert termination_message(*_exited(tmp_path, log, message_file, policy, exit_code)) == expected


def conditions_of(st):
    return {c["type"]: c for c in st["conditions"]}


def test_app_containers_wait_with_pod_initializing_whenever_the_pod_has_init_containers():
    """upstream's default waiting state: PodInitializing for every pod with init containers, also once
    they are done and the app container is being created."""
    st = status_of(pod(init=("setup",)), runtime(rec("setup", "exited", 0, kind="init")))
    assert st["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}


def test_container_statuses_are_sorted_by_name():
    st = status_of(
        pod(containers=("zeta", "alpha", "mid")), runtime(rec("zeta", "running"), rec("alpha", "running"))
    )
    assert [cs["name"] for cs in st["containerStatuses"]] == ["alpha", "mid", "zeta"]
    st = status_of(pod(init=("z1", "a2")), runtime())
    assert [cs["name"] for cs in st["initContainerStatuses"]] == ["z1", "a2"]  # init ones keep spec order


def test_init_containers_running_again_in_a_new_sandbox_make_the_pod_pending():
    rt = runtime(
        rec("setup", "running", kind="init", sandbox="sb2", restarts=1),
        rec("main", "exited", 137, sandbox="sb1"),
    )
    rt.sandboxes = [SandboxRecord("sb2", 1, True, 2, "10.0.0.6", (), False), *rt.sandboxes]
    st = status_of(pod(init=("setup",)), rt)
    assert st["phase"] == "Pending"


def test_sidecar_is_not_initialized_before_its_startup_probe_passed():
    p = pod(init=("side",))
    p["spec"]["initContainers"][0]["restartPolicy"] = "Always"
    st = status_of(p, runtime(rec("side", "running", kind="init")), started={"side": False})
    init = conditions_of(st)["Initialized"]
    assert (init["status"], init["message"]) == ("False", "containers with incomplete status: [side]")
    assert st["phase"] == "Pending"
    st = status_of(p, runtime(rec("side", "running", kind="init")), started={"side": True})
    assert conditions_of(st)["Initialized"]["status"] == "True"


def test_container_the_runtime_lost_counts_as_ended_and_restarted():
    previous = status_of(pod(), runtime(rec("main", "running")))
    st = status_of(
        pod(status=previous), PodRuntime("u1", [SandboxRecord("sb1", 0, True, 1, "10.0.0.5", (), False)])
    )
    cs = st["containerStatuses"][0]
    assert cs["lastState"]["terminated"]["reason"] == "ContainerStatusUnknown"
    assert cs["lastState"]["terminated"]["exitCode"] == 137
    assert cs["restartCount"] == 1
    assert st["phase"] != "Pending"


def test_container_in_unknown_state_that_was_running_is_terminated_unknown():
    previous = status_of(pod(), runtime(rec("main", "running")))
    st = status_of(pod(status=previous), runtime(rec("main", "unknown")))
    cs = st["containerStatuses"][0]
    assert cs["state"]["terminated"]["reason"] == "ContainerStatusUnknown"
    assert (
        cs["state"]["terminated"]["message"]
        == "The container could not be located when the pod was terminated"
    )
    assert cs["restartCount"] == 1


def test_failed_pod_is_not_ready_with_reason_pod_failed():
    st = status_of(pod(restart="Never"), runtime(rec("main", "exited", 1)))
    assert st["phase"] == "Failed"
    ready = conditions_of(st)["Ready"]
    assert (ready["status"], ready.get("reason"), ready.get("message")) == ("False", "PodFailed", None)


def test_volume_mounts_in_container_statuses():
    p = pod()
    p["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "data", "mountPath": "/data"},
        {"name": "cfg", "mountPath": "/etc/cfg", "readOnly": True},
    ]
    waiting = status_of(p, runtime())
    expected = [
        {"name": "data", "mountPath": "/data"},
        {"name": "cfg", "mountPath": "/etc/cfg", "readOnly": True, "recursiveReadOnly": "Disabled"},
    ]
    assert waiting["containerStatuses"][0]["volumeMounts"] == expected
    running = status_of(pod(status=waiting) | {"spec": p["spec"]}, runtime(rec("main", "running")))
    assert running["containerStatuses"][0]["volumeMounts"] == expected


def test_final_status_of_a_deleted_pod_that_never_started_is_failed():
    p = pod()
    p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    st = status_of(p, runtime(), waiting={"main": ("ErrImagePull", "not found")}, terminal=True)
    assert st["phase"] == "Pending"
    final = terminate_pod(p, st)
    assert final["phase"] == "Failed"
    assert final["containerStatuses"][0]["state"]["terminated"]["reason"] == "ContainerStatusUnknown"


def test_final_status_marks_init_containers_that_had_started():
    p = pod(init=("a", "b", "c"))
    st = status_of(
        p, runtime(rec("a", "exited", 0, kind="init"), rec("b", "running", kind="init")), terminal=True
    )
    final = terminate_pod(p, st)
    states = [cs["state"] for cs in final["initContainerStatuses"]]
    assert "terminated" in states[0] and states[1]["terminated"]["reason"] == "ContainerStatusUnknown"
    assert states[2] == {"waiting": {"reason": "PodInitializing"}}  # never tried to start: left waiting
    assert final["containerStatuses"][0]["state"] == {
        "waiting": {"reason": "PodInitializing"}
    }  # not initialized


def test_termination_messages_share_twelve_kib_per_pod():
    from agent.pods.status_patch import normalize

    p = pod(containers=("a", "b", "c", "d"))
    st = {
        "containerStatuses": [
            {
                "name": n,
                "state": {"terminated": {"exitCode": 0, "message": "x" * 4000 + "END"}},
                "lastState": {},
            }
            for n in ("d", "c", "b", "a")
        ]
    }
    out = normalize(p, st)
    assert [cs["name"] for cs in out["containerStatuses"]] == ["a", "b", "c", "d"]
    assert all(len(cs["state"]["terminated"]["message"]) == 3072 for cs in out["containerStatuses"])
    # the status handed in stays as it was (the worker keeps it as its last computed status)
    assert [cs["name"] for cs in st["containerStatuses"]] == ["d", "c", "b", "a"]
    assert all(len(cs["state"]["terminated"]["message"]) == 4003 for cs in st["containerStatuses"])
    one = normalize(
        pod(), {"containerStatuses": [{"name": "main", "state": {"terminated": {"message": "y" * 4096}}}]}
    )
    assert len(one["containerStatuses"][0]["state"]["terminated"]["message"]) == 4096


def test_status_patch_merges_conditions_by_type_and_holds_terminal_phases():
    from agent.pods.status_patch import merge, same, status_patch

    api = {
        "phase": "Running",
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "ContainersNotReady",
                "message": "containers with unready status: [main]",
            },
            {"type": "example.com/gate", "status": "True"},
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
        ],
        "nominatedNodeName": "n1",
    }
    ours = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None}]}
    merged = merge(api, ours, could_have_running=True)
    assert [c["type"] for c in merged["conditions"]] == ["example.com/gate", "DisruptionTarget", "Ready"]
    patch = status_patch(api, merged)
    # Only our condition, by type, with the reason and message that no longer apply removed; nothing
    # another writer owns (their conditions, nominatedNodeName) is named.
    assert patch == {
        "conditions": [
            {"type": "Ready", "status": "True", "lastProbeTime": None, "reason": None, "message": None}
        ]
    }
    held = merge(api, {**ours, "phase": "Succeeded"}, could_have_running=True)
    assert held["phase"] == "Running"
    assert merge(api, {**ours, "phase": "Succeeded"}, could_have_running=False)["phase"] == "Succeeded"
    assert same(api, merge(api, {"phase": "Running", "conditions": [api["conditions"][0]]}, True))
