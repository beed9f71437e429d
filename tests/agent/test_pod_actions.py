"""What a pod needs done (agent/pods/actions.py, upstream's computePodActions), one rule at a time, with
no runtime at all: the spec, what the runtime would report, the prober's verdicts."""

from __future__ import annotations

from agent.pods import labels as L
from agent.pods.actions import FAILURE, SUCCESS, NoVerdicts, compute_pod_actions
from agent.pods.runtime import ContainerRecord, PodRuntime, SandboxRecord
from tests.agent.fakeruntime import make_pod


def rec(name, state="running", code=0, created=1, sandbox="sb1", image="busybox:1.36", cid=None):
    return ContainerRecord(
        cid or f"{name}-{created}",
        name,
        "app",
        sandbox,
        0,
        L.container_hash({"name": name, "image": image}),
        state,
        created,
        created,
        created + 1 if state == "exited" else 0,
        code,
        "",
        "",
        image,
        "",
        "",
    )


def runtime(*records, ready=True, ip="10.0.0.5", sandboxes=None):
    rt = PodRuntime("u1", sandboxes or [SandboxRecord("sb1", 0, ready, 1, ip, (), False)])
    for r in sorted(records, key=lambda r: r.created_at, reverse=True):
        rt.containers.setdefault(r.name, []).append(r)
    return rt


class Verdicts:
    def __init__(self, liveness=None, startup=None):
        self.live = liveness or {}
        self.start = startup or {}

    def liveness(self, cid):
        return self.live.get(cid)

    def startup(self, cid):
        return self.start.get(cid)


def test_new_pod_gets_a_sandbox_then_its_first_init_container():
    actions = compute_pod_actions(make_pod(init=("a", "b")), PodRuntime("u1"), NoVerdicts())
    assert (actions.create_sandbox, actions.sandbox_id, actions.attempt) == (True, "", 0)
    assert actions.init_to_start == [0] and actions.containers_to_start == []


def test_sandbox_without_ip_is_replaced_with_the_next_attempt():
    actions = compute_pod_actions(make_pod(), runtime(rec("main"), ip=""), NoVerdicts())
    assert (actions.create_sandbox, actions.kill_pod, actions.attempt, actions.sandbox_id) == (
        True,
        True,
        1,
        "sb1",
    )


def test_on_failure_new_sandbox_starts_only_what_did_not_succeed():
    pod = make_pod(restart="OnFailure", containers=("ok", "bad"))
    rt = runtime(rec("ok", "exited", 0), rec("bad", "exited", 1, created=2), ready=False)
    actions = compute_pod_actions(pod, rt, NoVerdicts())
    assert actions.create_sandbox and actions.containers_to_start == [1]
    done = runtime(rec("ok", "exited", 0), ready=False)
    nothing = compute_pod_actions(make_pod(restart="OnFailure", containers=("ok",)), done, NoVerdicts())
    assert (nothing.create_sandbox, nothing.kill_pod) == (False, True)


def test_never_pod_that_ran_gets_no_new_sandbox():
    rt = runtime(rec("main", "exited", 137), ready=False)
    actions = compute_pod_actions(make_pod(restart="Never"), rt, NoVerdicts())
    assert (actions.create_sandbox, actions.kill_pod) == (False, True)


def test_failed_liveness_kills_and_restarts_by_policy():
    rt = runtime(rec("main", cid="c1"))
    actions = compute_pod_actions(make_pod(), rt, Verdicts(liveness={"c1": FAILURE}))
    assert (
        actions.containers_to_kill["c1"].message == "Container main failed liveness probe, will be restarted"
    )
    assert actions.containers_to_start == [0]
    never = compute_pod_actions(make_pod(restart="Never"), rt, Verdicts(liveness={"c1": FAILURE}))
    assert never.containers_to_kill["c1"].message == "Container main failed liveness probe"
    assert never.containers_to_start == []


def test_changed_image_restarts_even_under_never():
    rt = runtime(rec("main", cid="c1", image="busybox:1.35"))
    actions = compute_pod_actions(make_pod(restart="Never"), rt, NoVerdicts())
    assert actions.containers_to_kill["c1"].message == "Container main definition changed, will be restarted"


def test_sidecar_failing_liveness_is_restarted_with_upstreams_init_container_text():
    pod = make_pod(init=("side",), sidecars=("side",))
    pod["spec"]["initContainers"][0]["livenessProbe"] = {"exec": {"command": ["true"]}}
    rt = runtime(rec("side", cid="s1"), rec("main", created=2))
    actions = compute_pod_actions(pod, rt, Verdicts(liveness={"s1": FAILURE}))
    assert actions.containers_to_kill["s1"].message == "Init container side failed liveness probe"
    assert actions.init_to_start == [0]


def test_next_init_container_waits_for_the_sidecars_startup_probe():
    pod = make_pod(init=("side", "setup"), sidecars=("side",))
    pod["spec"]["initContainers"][0]["startupProbe"] = {"exec": {"command": ["true"]}}
    rt = runtime(rec("side", cid="s1"))
    assert compute_pod_actions(pod, rt, NoVerdicts()).init_to_start == []  # no verdict yet: wait
    started = compute_pod_actions(pod, rt, Verdicts(startup={"s1": SUCCESS}))
    assert started.init_to_start == [1]
    failed = compute_pod_actions(pod, rt, Verdicts(startup={"s1": FAILURE}))
    assert failed.containers_to_kill["s1"].message == "Init container side failed startup probe"


def test_failed_init_container_under_never_ends_the_pod():
    pod = make_pod(restart="Never", init=("setup",))
    rt = runtime(rec("setup", "exited", 3))
    actions = compute_pod_actions(pod, rt, NoVerdicts())
    assert actions.kill_pod and actions.init_to_start == [] and actions.containers_to_start == []
    again = compute_pod_actions(make_pod(init=("setup",)), rt, NoVerdicts())
    assert again.init_to_start == [0] and not again.kill_pod


def test_nothing_left_to_run_kills_the_pod_and_starts_no_sidecar():
    pod = make_pod(restart="Never", init=("side",), sidecars=("side",))
    rt = runtime(rec("side", cid="s1"), rec("main", "exited", 0, created=2))
    actions = compute_pod_actions(pod, rt, NoVerdicts())
    assert actions.kill_pod and actions.init_to_start == [] and actions.containers_to_start == []


def test_created_and_unknown_containers_start_again():
    rt = runtime(rec("main", "unknown", cid="u1"))
    actions = compute_pod_actions(make_pod(), rt, NoVerdicts())
    assert actions.containers_to_start == [0]
    assert (
        actions.containers_to_kill["u1"].message
        == 'Container is in "unknown" state, try killing it before restart'
    )
    created = compute_pod_actions(make_pod(restart="Never"), runtime(rec("main", "created")), NoVerdicts())
    assert created.containers_to_start == [0]


def test_a_deleted_pod_starts_nothing():
    pod = make_pod()
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    actions = compute_pod_actions(pod, runtime(rec("main", "exited", 1)), NoVerdicts())
    assert actions.containers_to_start == []


def test_hash_covers_name_and_image_only():
    """upstream hashes name and image since 1.31: a field the API server defaults later (or one that may
    change in place) does not restart the container."""
    c = {"name": "main", "image": "busybox:1.36"}
    defaulted = {
        **c,
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePolicy": "File",
        "resources": {"limits": {"cpu": "1"}},
        "env": [{"name": "A", "value": "b"}],
    }
    assert L.container_hash(c) == L.container_hash(defaulted)
    assert L.container_hash(c) != L.container_hash({**c, "image": "busybox:1.37"})
    assert L.container_hash(c) != L.container_hash({**c, "name": "other"})
