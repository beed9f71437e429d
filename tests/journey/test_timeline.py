"""The timeline from recorded objects: causal order through shared seconds, writers, gaps, precision."""

from __future__ import annotations

from journey import graph
from journey.timeline import parse_time, render, timeline
from tests.journey import fixtures as fx


def steps_of():
    journey = graph.build(fx.deployment(), fx.pools())
    return journey, timeline(journey)


def index(steps, obj: str, what: str) -> int:
    return next(i for i, s in enumerate(steps) if s.obj == obj and s.what == what)


def test_build_follows_owners_down_and_services_across():
    journey = graph.build(fx.deployment(), fx.pools())
    assert [graph.label(o) for o in journey.objects] == [
        "Deployment web",
        "ReplicaSet web-7d9c",
        "Pod web-7d9c-a",
        "Service web",
        "EndpointSlice web-abc",
    ]
    assert len(journey.events) == 6


def test_build_leaves_out_what_is_not_the_journeys():
    other = fx.pod("other", "p9")
    other["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "uid": "r9", "controller": True}]
    other["metadata"]["labels"] = {"app": "other"}
    journey = graph.build(fx.deployment(), fx.pools(Pod=[fx.pod(), other]))
    assert "Pod other" not in [graph.label(o) for o in journey.objects]


def test_service_root_passes_through_the_pods_it_selects():
    journey = graph.build(fx.service(), fx.pools())
    assert [graph.label(o) for o in journey.objects] == [
        "Service web",
        "Pod web-7d9c-a",
        "EndpointSlice web-abc",
    ]


def test_causal_order_survives_shared_seconds():
    _, steps = steps_of()
    chain = [
        ("Deployment web", "created"),
        ("ReplicaSet web-7d9c", "created"),
        ("Pod web-7d9c-a", "created"),
        ("Pod web-7d9c-a", "Scheduled"),
        ("Pod web-7d9c-a", "Pulled"),
        ("Pod web-7d9c-a", "Created"),
        ("Pod web-7d9c-a", "Started"),
        ("Pod web-7d9c-a", "Ready=True"),
        ("EndpointSlice web-abc", "endpoints published (1/1 ready)"),
        ("Deployment web", "Available=True"),
    ]
    positions = [index(steps, o, w) for o, w in chain]
    assert positions == sorted(positions), [steps[p].what for p in positions]
    times = [s.time.replace(microsecond=0) for s in steps]
    assert times == sorted(times)


def test_writers_per_step():
    _, steps = steps_of()
    writer = {(s.obj, s.what): s.writer for s in steps}
    assert writer[("Deployment web", "created")] == "user"
    assert writer[("ReplicaSet web-7d9c", "created")] == "kube-controller-manager"
    assert writer[("Pod web-7d9c-a", "created")] == "kube-controller-manager"
    assert writer[("Pod web-7d9c-a", "Scheduled")] == "kube-scheduler"
    assert writer[("Pod web-7d9c-a", "PodScheduled=True")] == "kube-scheduler"
    assert writer[("Pod web-7d9c-a", "Started")] == "kubelet"
    assert writer[("Pod web-7d9c-a", "Ready=True")] == "kubelet"
    assert writer[("EndpointSlice web-abc", "endpoints published (1/1 ready)")] == "kube-controller-manager"
    manager = {(s.obj, s.what): s.manager for s in steps}
    assert manager[("Deployment web", "created")] == "kubectl-client-side-apply"


def test_gaps_name_the_cause_and_are_never_negative():
    _, steps = steps_of()
    rs = steps[index(steps, "ReplicaSet web-7d9c", "created")]
    assert steps[rs.cause].obj == "Deployment web" and steps[rs.cause].what == "created"
    assert rs.gap_ms == 0 and not rs.gap_exact  # both 1 s stamps of the same second
    ready = steps[index(steps, "Pod web-7d9c-a", "Ready=True")]
    assert steps[ready.cause].obj == "Pod web-7d9c-a"
    slice_update = steps[index(steps, "EndpointSlice web-abc", "endpoints published (1/1 ready)")]
    assert steps[slice_update.cause].what == "Ready=True"
    assert all(s.gap_ms is None or s.gap_ms >= 0 for s in steps)
    assert all(s.cause is None or s.cause < i for i, s in enumerate(steps))


def test_gap_in_milliseconds_when_both_times_are_exact():
    pools = fx.pools()
    pools["Event"].append(
        fx.event(
            "p1",
            "Pod",
            "web-7d9c-a",
            "Pulling",
            "kubelet",
            fx.T0,
            "Pulling image",
            event_time="2026-12-01T10:00:00.450000Z",
        )
    )
    steps = timeline(graph.build(fx.deployment(), pools))
    pulling = steps[index(steps, "Pod web-7d9c-a", "Pulling")]
    cause = steps[pulling.cause]
    assert cause.what == "Scheduled" and pulling.exact and cause.exact
    assert pulling.gap_exact and abs(pulling.gap_ms - 38.0) < 0.01
    assert "38 ms after Pod web-7d9c-a Scheduled" in render(steps)


def test_precision_is_reported():
    assert parse_time("2026-12-01T10:00:00Z")[1] is False
    assert parse_time("2026-12-01T10:00:00.412000Z")[1] is True
    _, steps = steps_of()
    text = render(steps)
    assert "approximate" in text and "< 1 s (1 s stamps) after Deployment web created" in text
    scheduled = steps[index(steps, "Pod web-7d9c-a", "Scheduled")]
    assert scheduled.exact and scheduled.to_dict()["time"] == "2026-12-01T10:00:00.412000Z"


def test_deletion_is_a_step():
    p = fx.pod()
    p["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:09Z"
    p["metadata"]["deletionGracePeriodSeconds"] = 30
    steps = timeline(graph.build(fx.deployment(), fx.pools(Pod=[p])))
    assert steps[-1].what == "deletion requested" and steps[-1].obj == "Pod web-7d9c-a"


def test_exact_times_keep_their_order_inside_a_second():
    """A back-off between two pulls (events.k8s.io eventTimes in one second): the stage order alone put
    BackOff after the later Pulling and read it as "0 ms after" that Pulling."""
    pools = fx.pools()
    for reason, at in (("Failed", "10:00:01.050"), ("BackOff", "10:00:01.100"), ("Pulling", "10:00:01.600")):
        pools["Event"].append(
            fx.event("p1", "Pod", "web-7d9c-a", reason, "kubelet", fx.T1, event_time=f"2026-12-01T{at}000Z")
        )
    steps = timeline(graph.build(fx.deployment(), pools))
    backoff, pulling = index(steps, "Pod web-7d9c-a", "BackOff"), index(steps, "Pod web-7d9c-a", "Pulling")
    assert backoff < pulling
    assert steps[steps[backoff].cause].what == "Failed" and steps[backoff].gap_ms == 50.0
    exact = [s.time for s in steps if s.exact]
    assert exact == sorted(exact)
    assert "0 ms after Pod web-7d9c-a Pulling" not in render(steps)


def test_resource_versions_order_writes_of_one_second():
    """The pod's last status patch (rv 140) came after the Deployment's last status write (rv 130) of
    the same second: each is its object's latest write, so the objects' resourceVersions say which was
    first, whatever the stages suggest."""
    deployment, pod = fx.deployment(), fx.pod()
    deployment["metadata"]["resourceVersion"] = "130"
    pod["metadata"]["resourceVersion"] = "140"
    pod["metadata"]["managedFields"][1]["time"] = (
        fx.T2
    )  # the kubelet's status patch, in the Deployment's second
    steps = timeline(graph.build(deployment, fx.pools(Pod=[pod])))
    rollout = index(steps, "Deployment web", "status (status.availableReplicas, status.conditions)")
    patch = index(steps, "Pod web-7d9c-a", "status (status.conditions)")
    assert rollout < patch and steps[patch].rv == 140 and steps[rollout].rv == 130
    # Without resourceVersions the stage order stands: the owner's status after its pods'.
    steps = timeline(graph.build(fx.deployment(), fx.pools(Pod=[fx.pod()])))
    assert index(steps, "Deployment web", "Available=True") > index(steps, "Pod web-7d9c-a", "Ready=True")


def test_among_many_pods_each_pods_steps_react_to_its_own():
    """Forty pods whose steps share the same seconds and interleave: every node-side step's cause is the
    latest earlier step of the same pod that its rule names, never another pod's (link looks only at the
    pod's own steps)."""
    n = 40
    pods = [fx.pod(f"web-7d9c-{i:02d}", f"p{i}") for i in range(n)]
    kubelet = (("Pulled", "already present"), ("Created", "Created container main"), ("Started", "Started"))
    pod_events = [
        fx.event(f"p{i}", "Pod", f"web-7d9c-{i:02d}", reason, "kubelet", fx.T1, message)
        for reason, message in kubelet
        for i in range(n)
    ] + [
        fx.event(f"p{i}", "Pod", f"web-7d9c-{i:02d}", "Scheduled", "default-scheduler", fx.T0, "assigned")
        for i in reversed(range(n))
    ]
    others = [e for e in fx.events() if e["involvedObject"]["kind"] != "Pod"]
    steps = timeline(graph.build(fx.deployment(), fx.pools(Pod=pods, Event=others + pod_events)))
    for i in range(n):
        name = f"Pod web-7d9c-{i:02d}"
        for what, reacts_to in (
            ("Scheduled", {"created"}),
            ("Pulled", {"Scheduled", "PodScheduled=True"}),
            ("Created", {"Pulled"}),
            ("Started", {"Created"}),
            ("Ready=True", {"ContainersReady=True"}),
        ):
            step = steps[index(steps, name, what)]
            cause = steps[step.cause]
            assert (cause.obj, cause.what in reacts_to) == (name, True), (what, cause.obj, cause.what)
        created = steps[index(steps, name, "created")]
        assert steps[created.cause].obj == "ReplicaSet web-7d9c"
    slice_update = steps[index(steps, "EndpointSlice web-abc", "endpoints published (1/1 ready)")]
    assert steps[slice_update.cause].kind == "Pod" and steps[slice_update.cause].what == "Ready=True"
