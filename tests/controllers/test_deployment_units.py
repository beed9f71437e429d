"""The Deployment controller's rollout arithmetic against upstream's worked examples (their cases, in
deployment_util_test.go, rolling_test.go, sync_test.go and progress_test.go, ported as tables; the
code is ours). Pure: no API server, no event loop."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.controllers.deployment import conditions as cond
from controlplane.controllers.deployment import util
from controlplane.controllers.deployment.hashing import ALPHANUMS, compute_hash, fnv32a, safe_encode
from controlplane.controllers.deployment.ownwrites import OwnWrites
from controlplane.controllers.deployment.progress import recheck_in, rollout_status
from controlplane.controllers.deployment.recreate import old_pods_running
from controlplane.controllers.deployment.rolling import (
    cleanup_unhealthy,
    new_rs_target,
    old_scale_down_plan,
    scale_down_old,
)
from controlplane.controllers.deployment.sync import (
    calculate_status,
    cleanup_victims,
    new_replica_set_body,
    scale_plan,
)

Obj = dict[str, Any]
NOW = datetime(2016, 5, 20, 3, 0, 0, tzinfo=UTC)
NEW_TS = "2016-05-20T02:00:00Z"
OLD_TS = "2016-05-20T01:00:00Z"
OLDER_TS = "2016-05-20T00:00:00Z"


def dep(
    replicas: int,
    surge: Any = 0,
    unavailable: Any = 0,
    kind: str = "RollingUpdate",
    history: int | None = None,
    pds: int | None = None,
    status: Obj | None = None,
    labels: dict | None = None,
) -> Obj:
    """upstream's newDeployment: maxSurge and maxUnavailable 0 unless given."""
    labels = labels or {"foo": "bar"}
    strategy: Obj = {"type": kind}
    if kind == "RollingUpdate":
        strategy["rollingUpdate"] = {"maxSurge": surge, "maxUnavailable": unavailable}
    d: Obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "foo",
            "namespace": "default",
            "uid": "d-uid",
            "generation": 1,
            "annotations": {},
        },
        "spec": {
            "replicas": replicas,
            "strategy": strategy,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {"containers": [{"name": "c", "image": "foo/bar"}]},
            },
        },
        "status": status or {},
    }
    if history is not None:
        d["spec"]["revisionHistoryLimit"] = history
    if pds is not None:
        d["spec"]["progressDeadlineSeconds"] = pds
    return d


def rs(
    name: str,
    replicas: int,
    created: str = "",
    available: int = 0,
    actual: int | None = None,
    annotations: dict | None = None,
    template: Obj | None = None,
) -> Obj:
    obj: Obj = {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "annotations": dict(annotations or {}),
        },
        "spec": {"replicas": replicas, "template": template or {}},
        "status": {"replicas": replicas if actual is None else actual, "availableReplicas": available},
    }
    if created:
        obj["metadata"]["creationTimestamp"] = created
    return obj


# --- deployment_util_test.go ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("surge", "unavailable", "desired", "expected"),
    [
        ("0%", "0%", 0, (0, 1)),
        ("39%", "39%", 10, (4, 3)),
        (None, "39%", 10, (0, 3)),
        ("39%", None, 10, (4, 0)),
        (None, None, 10, (0, 1)),
    ],
)
def test_resolve_fenceposts(surge, unavailable, desired, expected):
    assert util.resolve_fenceposts(surge, unavailable, desired) == expected


@pytest.mark.parametrize(("surge", "unavailable"), [("oops", "39%"), ("55%", "urg")])
def test_resolve_fenceposts_rejects_what_is_no_percentage(surge, unavailable):
    with pytest.raises(util.InvalidIntOrPercent, match="not a percentage"):
        util.resolve_fenceposts(surge, unavailable, 10)


def test_surge_rounds_up_and_unavailable_rounds_down():
    assert util.max_surge(dep(10, "25%", "25%")) == 3
    assert util.max_unavailable(dep(10, "25%", "25%")) == 2
    assert util.max_surge(dep(3, "25%", "25%")) == 1 and util.max_unavailable(dep(3, "25%", "25%")) == 0


@pytest.mark.parametrize(
    ("name", "strategy", "dep_replicas", "new_replicas", "surge", "expected"),
    [
        ("can not scale up - to newRSReplicas", "RollingUpdate", 1, 5, 1, 5),
        ("scale up - to depReplicas", "RollingUpdate", 6, 2, 10, 6),
        ("recreate - to depReplicas", "Recreate", 3, 1, 1, 3),
    ],
)
def test_new_rs_new_replicas(name, strategy, dep_replicas, new_replicas, surge, expected):
    d = dep(dep_replicas, surge, 1)
    d["spec"]["strategy"]["type"] = strategy
    rs5 = rs("rs5", 5)
    assert util.new_rs_new_replicas(d, [rs5], rs("new", new_replicas)) == expected, name


@pytest.mark.parametrize(
    ("replicas", "unavailable", "expected"),
    [
        (10, 5, 5),
        (10, 10, 10),
        (5, 10, 5),
        (0, 10, 0),
        (10, "50%", 5),
        (10, "100%", 10),
        (5, "100%", 5),
    ],
)
def test_max_unavailable(replicas, unavailable, expected):
    assert util.max_unavailable(dep(replicas, 1, unavailable)) == expected


def test_max_unavailable_and_min_available_of_recreate_are_zero():
    d = dep(10, kind="Recreate")
    assert util.max_unavailable(d) == 0 and util.min_available(d) == 0 and util.max_surge(d) == 0


@pytest.mark.parametrize(
    ("replicas", "unavailable", "expected"),
    [
        (10, 5, 5),
        (10, 10, 0),
        (5, 10, 0),
        (0, 10, 0),
        (10, "60%", 4),
        (10, "100%", 0),
        (5, "100%", 0),
    ],
)
def test_min_available(replicas, unavailable, expected):
    assert util.min_available(dep(replicas, 1, unavailable)) == expected


def test_replica_counts():
    rs1, rs2, rs3 = rs("rs1", 1, actual=2), rs("rs2", 2, actual=3), rs("rs3", 3, actual=0)
    assert (util.total_replicas([rs1]), util.actual_replicas([rs1])) == (1, 2)
    assert (util.total_replicas([rs1, rs2]), util.actual_replicas([rs1, rs2])) == (3, 5)
    assert (util.total_replicas([rs3]), util.actual_replicas([rs3])) == (3, 0)
    assert (util.total_replicas([rs1, rs2, rs3, None]), util.actual_replicas([rs1, rs2, rs3, None])) == (6, 5)


@pytest.mark.parametrize(
    ("desired", "current", "updated", "available", "unavailable", "surge", "expected"),
    [
        (5, 5, 5, 4, 1, 0, False),  # min but not all pods available
        (5, 5, 5, 3, 1, 0, False),  # min availability not honored
        (5, 5, 5, 5, 0, 0, True),
        (5, 5, 4, 5, 0, 0, False),  # all available but not updated
        (1, 2, 1, 1, 0, 1, False),  # still running old pods
        (1, 1, 1, 0, 1, 1, False),  # one replica never comes up
    ],
)
def test_deployment_complete(desired, current, updated, available, unavailable, surge, expected):
    st = {"replicas": current, "updatedReplicas": updated, "availableReplicas": available}
    d = dep(desired, surge, unavailable, status=st)
    d["metadata"]["generation"] = 0
    assert util.complete(d, st) is expected


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ((10, 4, 4, 4), (10, 6, 4, 4), True),  # updated pods
        ((10, 4, 4, 4), (10, 4, 4, 4), False),
        ((10, 4, 6, 6), (8, 4, 6, 6), True),  # old pods removed
        ((10, 7, 3, 3), (10, 6, 3, 3), False),  # fewer new pods
        ((10, 4, 7, 7), (8, 8, 5, 5), True),  # fewer overall but more new
        ((10, 10, 9, 8), (10, 10, 10, 8), True),  # more ready
        ((10, 10, 10, 9), (10, 10, 10, 10), True),  # more available
    ],
)
def test_deployment_progressing(old, new, expected):
    keys = ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")
    d = dep(10, status=dict(zip(keys, old, strict=True)))
    assert util.progressing(d, dict(zip(keys, new, strict=True))) is expected


def _timed(pds: int | None, reason: str, since: str) -> Obj:
    return dep(
        3,
        pds=pds,
        status={
            "conditions": [
                {"type": "Progressing", "status": "True", "reason": reason, "lastUpdateTime": since}
            ]
        },
    )


@pytest.mark.parametrize(
    ("pds", "reason", "since", "now", "expected"),
    [
        (None, "", "2016-01-01T00:01:09Z", "2016-01-01T00:01:20Z", False),
        (util.MAX_INT32, "", "2016-01-01T00:01:09Z", "2016-01-01T00:01:20Z", False),
        (10, "", "2016-01-01T00:01:09Z", "2016-01-01T00:01:20Z", True),  # 11 s
        (10, "", "2016-01-01T00:01:11Z", "2016-01-01T00:01:20Z", False),  # 9 s
        (
            10,
            cond.NEW_RS_AVAILABLE,
            "2016-01-01T00:00:00Z",
            "2016-01-01T00:01:20Z",
            False,
        ),  # previous rollout done
    ],
)
def test_deployment_timed_out(pds, reason, since, now, expected):
    d = _timed(pds, reason, since)
    assert util.timed_out(d, d["status"], datetime.fromisoformat(now.replace("Z", "+00:00"))) is expected


@pytest.mark.parametrize(
    ("d_replicas", "d_status_replicas", "surge", "rs_replicas", "notes", "expected"),
    [
        (0, 0, 0, 10, {}, -10),  # an empty deployment always scales to 0
        (10, 0, 0, 5, {}, 0),  # unsynced, annotation removed: no scaling
        (10, 0, 0, 5, {util.MAX_REPLICAS: "0"}, 0),  # unsynced, annotation zeroed
        (120, 100, 0, 50, {}, 10),  # by 1/5, annotation missing: the status stands in
        (120, 100, 0, 50, {util.MAX_REPLICAS: "0"}, 10),
        (120, 0, 0, 50, {util.MAX_REPLICAS: "100"}, 10),
        (120, 0, 10, 50, {util.MAX_REPLICAS: "110"}, 9),  # surge pods scale too
        (10, 0, 0, 6, {util.MAX_REPLICAS: "12"}, -1),  # down by 1/6
        (100, 0, 10, 50, {util.MAX_REPLICAS: "130"}, -8),
    ],
)
def test_replica_set_fraction(d_replicas, d_status_replicas, surge, rs_replicas, notes, expected):
    d = dep(d_replicas, surge, 1, status={"replicas": d_status_replicas})
    assert util.replica_set_fraction(rs("x", rs_replicas, annotations=notes), d) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("invalid", None),
        ("-1", None),
        ("0", 0),
        ("13", 13),
        (str(util.MAX_INT32), util.MAX_INT32),
        (str(util.MAX_INT32 + 1), None),
        (str(2**32), None),
    ],
)
def test_non_negative_int32_annotation(value, expected):
    notes = {} if value is None else {"test": value, "foo": "2"}
    assert util.annotation_int(rs("x", 1, annotations=notes), "test") == expected


def test_revision_history_is_kept_within_its_length_limit():
    """TestAnnotationUtils: revisions 11..20 onto one ReplicaSet with a 5 character history limit."""
    d = dep(1)
    d["metadata"]["annotations"][util.REVISION] = "1"
    target = rs("x", 0)
    for i in range(10, 20):
        util.set_new_rs_annotations(d, target, str(i + 1), exists=True, history_limit=5)
        if i >= 12:
            assert target["metadata"]["annotations"][util.REVISION_HISTORY] == f"{i - 1},{i}"
        assert target["metadata"]["annotations"][util.REVISION] == str(i + 1)
    assert util.set_replicas_annotations(target, 10, 11)
    assert (
        target["metadata"]["annotations"][util.DESIRED_REPLICAS],
        target["metadata"]["annotations"][util.MAX_REPLICAS],
    ) == ("10", "11")
    target["metadata"]["annotations"][util.DESIRED_REPLICAS] = "1"
    target["spec"]["replicas"] = 1
    target["status"]["availableReplicas"] = 1
    assert util.is_saturated(d, target)


def test_deployment_annotations_are_copied_but_not_the_skipped_ones():
    d = dep(1)
    d["metadata"]["annotations"] = {
        "kubernetes.io/change-cause": "v2",
        util.LAST_APPLIED: "{}",
        util.REVISION: "7",
    }
    target = rs("x", 0)
    assert util.set_new_rs_annotations(d, target, "3", exists=False)
    assert target["metadata"]["annotations"] == {
        "kubernetes.io/change-cause": "v2",
        util.REVISION: "3",
        util.DESIRED_REPLICAS: "1",
        util.MAX_REPLICAS: "1",
    }
    assert not util.set_new_rs_annotations(d, target, "3", exists=True)  # nothing new


@pytest.mark.parametrize(
    ("notes", "expected"),
    [
        ({}, True),
        ({util.DESIRED_REPLICAS: "8", util.MAX_REPLICAS: "20"}, True),
        ({util.DESIRED_REPLICAS: "10", util.MAX_REPLICAS: "16"}, True),
        ({util.DESIRED_REPLICAS: "10", util.MAX_REPLICAS: "20"}, False),
    ],
)
def test_replicas_annotations_need_update(notes, expected):
    assert util.replicas_annotations_need_update(rs("hello", 1, annotations=notes), 10, 20) is expected


def _template(
    labels: dict, annotations: dict | None = None, node: str = "foo-node", name: str = "foo"
) -> Obj:
    return {
        "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
        "spec": {"nodeName": node},
    }


H = util.UNIQUE_LABEL_KEY


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (
            _template({H: "value-1", "something": "else"}),
            _template({H: "value-1", "something": "else"}),
            True,
        ),
        (
            _template({H: "value-1", "something": "else"}),
            _template({H: "value-2", "something": "else"}),
            True,
        ),
        (_template({"something": "else"}), _template({H: "value-2", "something": "else"}), True),
        (_template({"something": "else"}), _template({H: "value-2"}), False),
        (_template({H: "value-1"}), _template({"something": "else"}), False),
        (_template({H: "value-1"}), _template({H: "value-1", "something": "else"}), False),
        (
            _template({H: "value-1", "something": "else"}, {"former": "value"}),
            _template({H: "value-1", "something": "else"}, {"latter": "value"}),
            False,
        ),
        (
            _template({H: "value-1", "something": "else"}, name="foo-1"),
            _template({H: "value-2", "something": "else"}, name="foo-2"),
            False,
        ),
        (
            _template({"something": "else"}, node="foo-node-1"),
            _template({"nothing": "else"}, node="foo-node-2"),
            False,
        ),
    ],
)
def test_equal_ignore_hash(a, b, expected):
    before = copy.deepcopy((a, b))
    assert util.equal_ignore_hash(a, b) is expected
    assert util.equal_ignore_hash(b, a) is expected
    assert (a, b) == before  # neither side is changed


def test_equal_ignore_hash_treats_null_and_empty_as_absent():
    """A template round-tripped through a Go client (kubectl rollout undo) carries creationTimestamp: null."""
    stored = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "resources": {}}]},
    }
    via_go = {
        "metadata": {"labels": {"app": "web", H: "abc"}, "creationTimestamp": None},
        "spec": {"containers": [{"name": "c", "resources": {}}], "volumes": []},
    }
    assert util.equal_ignore_hash(stored, via_go)


def test_find_new_and_old_replica_sets():
    d = dep(1)
    template = d["spec"]["template"]
    new = rs("new", 1, created="2016-05-20T00:01:00Z", template=copy.deepcopy(template))
    new["spec"]["template"]["metadata"]["labels"][H] = "hash"
    dup = rs("dup", 0, created="2016-05-20T00:00:00Z", template=copy.deepcopy(template))
    dup["spec"]["template"]["metadata"]["labels"][H] = "different-hash"
    old_template = copy.deepcopy(template)
    old_template["spec"]["containers"][0]["name"] = "nginx-old-1"
    old = rs("old", 0, created="2016-05-19T23:59:00Z", template=old_template)
    assert util.find_new(d, [new, old]) is new
    assert util.find_new(d, [new, old, dup]) is dup  # the oldest of the two with the same template
    assert util.find_new(d, [old]) is None
    assert util.find_old(d, [new, old]) == ([], [old])
    assert util.find_old(d, [old]) == ([], [old])
    with_replicas, everything = util.find_old(d, [old, new, dup])
    assert with_replicas == [new] and {x["metadata"]["name"] for x in everything} == {"old", "new"}
    assert util.find_old(d, [new]) == ([], [])


# --- rolling_test.go -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("d_replicas", "surge", "old", "new", "expected"),
    [
        (10, 0, 10, 0, 0),  # should not scale up (stays at 0)
        (10, 2, 10, 0, 2),
        (10, 2, 5, 0, 7),
        (10, 2, 10, 2, 2),  # at maxSurge already
        (10, 2, 2, 11, 10),  # scales down to spec.replicas
    ],
)
def test_reconcile_new_replica_set(d_replicas, surge, old, new, expected):
    d = dep(d_replicas, surge, 0)
    new_rs, old_rs = rs("foo-v2", new), rs("foo-v1", old)
    assert new_rs_target(d, [new_rs, old_rs], new_rs) == expected


def test_reconcile_new_replica_set_at_spec_replicas_does_nothing():
    assert new_rs_target(dep(3, 1, 0), [rs("a", 3)], rs("a", 3)) is None


@pytest.mark.parametrize(
    ("d_replicas", "unavailable", "old", "new", "ready_old", "ready_new", "scaled", "expected_old"),
    [
        (10, 0, 10, 0, 10, 0, True, 9),
        (10, 2, 10, 0, 10, 0, True, 8),
        (10, 2, 10, 0, 8, 0, True, 8),  # the unhealthy old replicas go
        (10, 2, 10, 0, 9, 0, True, 8),  # one unhealthy and one ready old replica go
        (10, 2, 8, 2, 8, 0, False, 8),  # the new RS's unavailable pods hold the old ones back
    ],
)
def test_reconcile_old_replica_sets(
    d_replicas, unavailable, old, new, ready_old, ready_new, scaled, expected_old
):
    d = dep(d_replicas, 0, unavailable)
    new_rs, old_rs = rs("foo-new", new, available=ready_new), rs("foo-old", old, available=ready_old)
    steps, whole = old_scale_down_plan([old_rs, new_rs], [old_rs], new_rs, d)
    assert whole
    assert bool(steps) is scaled
    assert (steps[-1].replicas if steps else old) == expected_old


@pytest.mark.parametrize(
    ("old", "ready", "most", "expected"), [(10, 8, 1, 1), (10, 8, 3, 2), (10, 8, 0, 0), (10, 10, 3, 0)]
)
def test_cleanup_unhealthy_replicas(old, ready, most, expected):
    _, _, cleaned = cleanup_unhealthy([rs("foo-v2", old, available=ready)], most)
    assert cleaned == expected


@pytest.mark.parametrize(
    ("d_replicas", "unavailable", "ready", "old", "expected"),
    [
        (10, 0, 10, 10, 9),
        (10, 2, 10, 10, 8),
        (10, 2, 8, 10, None),
        (10, 2, 10, 0, None),
        (10, 2, 1, 10, None),
    ],
)
def test_scale_down_old_replica_sets_for_rolling_update(d_replicas, unavailable, ready, old, expected):
    old_rs = rs("foo-v2", old, available=ready)
    steps, total = scale_down_old([old_rs], [old_rs], dep(d_replicas, 0, unavailable))
    if expected is None:
        assert (steps, total) == ([], 0)
    else:
        assert [s.replicas for s in steps] == [expected]


# --- sync_test.go: proportional scaling ----------------------------------------------------------------


def _annotated(rss: list[Obj | None], old_d: Obj, desired: dict[str, int]) -> None:
    for r in rss:
        if r is not None:
            want = desired.get(r["metadata"]["name"], old_d["spec"]["replicas"])
            util.set_replicas_annotations(r, want, want + util.max_surge(old_d))


SCALE_CASES = [
    # name, deployment, old deployment, new rs, old rss, expected new, expected olds, desired-replicas overrides
    ("normal scaling event: 10 -> 12", dep(12), dep(10), rs("foo-v1", 10, NEW_TS), [], 12, [], {}),
    ("normal scaling event: 10 -> 5", dep(5), dep(10), rs("foo-v1", 10, NEW_TS), [], 5, [], {}),
    (
        "proportional scaling: 5 -> 10",
        dep(10),
        dep(5),
        rs("foo-v2", 2, NEW_TS),
        [rs("foo-v1", 3, OLD_TS)],
        4,
        [6],
        {},
    ),
    (
        "proportional scaling: 5 -> 3",
        dep(3),
        dep(5),
        rs("foo-v2", 2, NEW_TS),
        [rs("foo-v1", 3, OLD_TS)],
        1,
        [2],
        {},
    ),
    (
        "proportional scaling: 9 -> 4",
        dep(4),
        dep(9),
        rs("foo-v2", 8, NEW_TS),
        [rs("foo-v1", 1, OLD_TS)],
        4,
        [0],
        {},
    ),
    (
        "proportional scaling: 7 -> 10",
        dep(10),
        dep(7),
        rs("foo-v3", 2, NEW_TS),
        [rs("foo-v2", 3, OLD_TS), rs("foo-v1", 2, OLDER_TS)],
        3,
        [4, 3],
        {},
    ),
    (
        "proportional scaling: 13 -> 8",
        dep(8),
        dep(13),
        rs("foo-v3", 2, NEW_TS),
        [rs("foo-v2", 8, OLD_TS), rs("foo-v1", 3, OLDER_TS)],
        1,
        [5, 2],
        {},
    ),
    (
        "leftover distribution: 3 -> 4",
        dep(4),
        dep(3),
        rs("foo-v3", 1, NEW_TS),
        [rs("foo-v2", 1, OLD_TS), rs("foo-v1", 1, OLDER_TS)],
        2,
        [1, 1],
        {},
    ),
    (
        "leftover distribution: 3 -> 2",
        dep(2),
        dep(3),
        rs("foo-v3", 1, NEW_TS),
        [rs("foo-v2", 1, OLD_TS), rs("foo-v1", 1, OLDER_TS)],
        1,
        [1, 0],
        {},
    ),
    (
        "proportional scaling (no new rs): 4 -> 5",
        dep(5),
        dep(4),
        None,
        [rs("foo-v2", 2, OLD_TS), rs("foo-v1", 2, OLDER_TS)],
        None,
        [3, 2],
        {},
    ),
    (
        "proportional scaling: 6 -> 0",
        dep(0),
        dep(6),
        rs("foo-v3", 3, NEW_TS),
        [rs("foo-v2", 2, OLD_TS), rs("foo-v1", 1, OLDER_TS)],
        0,
        [0, 0],
        {},
    ),
    (
        "proportional scaling: 0 -> 6",
        dep(6),
        dep(6),
        rs("foo-v3", 0, NEW_TS),
        [rs("foo-v2", 0, OLD_TS), rs("foo-v1", 0, OLDER_TS)],
        6,
        [0, 0],
        {},
    ),
    # foo-v2 was sized for 3 (a failed update left it behind): only it grows.
    (
        "failed rs update",
        dep(5),
        dep(5),
        rs("foo-v3", 2, NEW_TS),
        [rs("foo-v2", 1, OLD_TS), rs("foo-v1", 1, OLDER_TS)],
        2,
        [2, 1],
        {"foo-v2": 3},
    ),
    (
        "deployment with surge pods",
        dep(20, 2),
        dep(10, 2),
        rs("foo-v2", 6, NEW_TS),
        [rs("foo-v1", 6, OLD_TS)],
        11,
        [11],
        {},
    ),
    (
        "change both surge and size",
        dep(50, 6),
        dep(10, 3),
        rs("foo-v2", 5, NEW_TS),
        [rs("foo-v1", 8, OLD_TS)],
        22,
        [34],
        {},
    ),
    (
        "saturated but broken new replica set does not affect old pods",
        dep(2, 1, 1),
        dep(2, 1, 1),
        rs("foo-v2", 2, NEW_TS, available=0),
        [rs("foo-v1", 1, OLD_TS)],
        2,
        [1],
        {},
    ),
]


@pytest.mark.parametrize(
    ("name", "d", "old_d", "new", "olds", "expected_new", "expected_olds", "desired"),
    SCALE_CASES,
    ids=[c[0] for c in SCALE_CASES],
)
def test_proportional_scaling(name, d, old_d, new, olds, expected_new, expected_olds, desired):
    _annotated([new, *olds], old_d, desired)
    sizes = {r["metadata"]["name"]: r["spec"]["replicas"] for r in [new, *olds] if r is not None}
    for step in scale_plan(d, new, olds):
        sizes[step.name] = step.replicas
    if new is not None:
        assert sizes[new["metadata"]["name"]] == expected_new
    assert [sizes[r["metadata"]["name"]] for r in olds] == expected_olds


def test_scaling_with_a_changed_template_and_no_new_replica_set_yet():
    """upstream's "change both size and template": 10 -> 14 while the template changed."""
    d, old_d = dep(14), dep(10)
    d["spec"]["template"]["metadata"]["labels"]["another"] = "label"
    olds = [rs("foo-v2", 7, NEW_TS), rs("foo-v1", 3, OLD_TS)]
    _annotated(olds, old_d, {})
    sizes = {s.name: s.replicas for s in scale_plan(d, None, olds)}
    assert (sizes["foo-v2"], sizes["foo-v1"]) == (10, 4)


def _history(
    name: str, spec_replicas: int, status_replicas: int, created: str = "", revision: str = ""
) -> Obj:
    r = rs(
        name,
        spec_replicas,
        created,
        actual=status_replicas,
        annotations={util.REVISION: revision} if revision else {},
    )
    return r


@pytest.mark.parametrize(
    ("olds", "limit", "expected"),
    [
        ([_history("foo-1", 0, 0), _history("foo-2", 0, 0), _history("foo-3", 0, 0)], 1, 2),
        (
            [
                _history("foo-1", 0, 0),
                _history("foo-2", 0, 1),
                _history("foo-3", 1, 0),
                _history("foo-4", 1, 1),
            ],
            0,
            1,
        ),
        ([_history("foo-1", 0, 0), _history("foo-2", 0, 0)], 0, 2),
        ([_history("foo-1", 1, 1), _history("foo-2", 1, 1)], 0, 0),
        ([_history("foo-1", 0, 0), _history("foo-2", 0, 0), _history("foo-3", 0, 0)], util.MAX_INT32, 0),
    ],
)
def test_cleanup_deployment(olds, limit, expected):
    assert len(cleanup_victims(dep(1, history=limit), olds)) == expected


def test_cleanup_never_deletes_a_replica_set_being_deleted():
    gone = _history("foo-1", 0, 0)
    gone["metadata"]["deletionTimestamp"] = "2016-05-20T00:00:00Z"
    assert cleanup_victims(dep(1, history=0), [gone]) == []


T0, T1, T2, T3 = (
    "2016-05-20T00:00:00Z",
    "2016-05-20T00:01:00Z",
    "2016-05-20T00:02:00Z",
    "2016-05-20T00:03:00Z",
)


@pytest.mark.parametrize(
    ("olds", "limit", "expected"),
    [
        ([_history("foo-1", 0, 0, T0, "1"), _history("foo-2", 0, 0, T1, "2")], 1, {"foo-1"}),
        ([_history("foo-1", 0, 0, T0, "2"), _history("foo-2", 0, 0, T1, "1")], 1, {"foo-2"}),
        ([_history("foo-1", 0, 0, T0, "1"), _history("foo-2", 0, 0, T1, "")], 1, {"foo-2"}),
        ([_history("foo-1", 0, 0, T0, ""), _history("foo-2", 0, 0, T1, "2")], 1, {"foo-1"}),
        (
            [
                _history("foo-1", 1, 1, T0, "1"),
                _history("foo-2", 0, 0, T1, "2"),
                _history("foo-3", 0, 0, T2, "3"),
            ],
            1,
            {"foo-2"},
        ),
        (
            [
                _history("foo-1", 1, 1, T0, "1"),
                _history("foo-2", 1, 1, T1, "2"),
                _history("foo-3", 0, 0, T2, "3"),
            ],
            1,
            set(),
        ),
        (
            [
                _history("foo-1", 0, 0, T0, "3"),
                _history("foo-2", 0, 0, T1, "1"),
                _history("foo-3", 0, 0, T2, "4"),
                _history("foo-4", 0, 0, T3, "2"),
            ],
            2,
            {"foo-2", "foo-4"},
        ),
    ],
)
def test_cleanup_deployment_order(olds, limit, expected):
    assert {r["metadata"]["name"] for r in cleanup_victims(dep(1, history=limit), olds)} == expected


# --- progress_test.go ----------------------------------------------------------------------------------

STUCK_AT = "2017-02-15T18:49:00Z"


def _current(
    pds: int | None,
    replicas: int,
    status_replicas: int,
    updated: int,
    available: int,
    conditions: list[Obj] | None = None,
) -> Obj:
    d = dep(
        replicas,
        kind="Recreate",
        pds=pds,
        status={"replicas": status_replicas, "updatedReplicas": updated, "availableReplicas": available},
    )
    d["metadata"]["name"] = "progress-test"
    d["metadata"]["generation"] = 0
    if conditions is not None:
        d["status"]["conditions"] = conditions
    return d


FAILED = [{"type": "Progressing", "status": "False", "reason": cond.TIMED_OUT}]
STUCK = [{"type": "Progressing", "status": "True", "lastUpdateTime": STUCK_AT}]


def _at(stamp: str, micro: int = 0) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) + timedelta(microseconds=micro)


@pytest.mark.parametrize(
    ("d", "new_status", "now", "expected"),
    [
        (_current(None, 4, 3, 3, 2), (3, 3, 2), None, None),
        (_current(util.MAX_INT32, 4, 3, 3, 2), (3, 3, 2), None, None),
        (_current(60, 4, 3, 3, 2), (3, 3, 2), None, None),  # no Progressing condition
        (_current(60, 3, 3, 3, 3), (3, 3, 3), None, None),  # complete
        (_current(60, 3, 3, 3, 0, FAILED), (3, 3, 0), None, None),  # already failed
        (_current(60, 3, 3, 3, 1, STUCK), (3, 3, 1), _at("2017-02-15T18:49:30Z"), 30.0),
        (_current(60, 3, 3, 3, 1, STUCK), (3, 3, 1), _at("2017-02-15T18:49:59Z"), 1.0),
        (
            _current(60, 3, 3, 3, 1, STUCK),
            (3, 3, 1),
            _at("2017-02-15T18:49:59Z", 1),
            0.0,
        ),  # under a second: now
        (_current(60, 3, 3, 3, 1, STUCK), (3, 3, 1), _at("2017-02-15T18:50:00Z"), 0.0),
        (_current(60, 3, 3, 3, 1, STUCK), (3, 3, 1), _at("2017-02-15T18:50:01Z"), 0.0),
        (_current(60, 3, 3, 3, 1, STUCK), (3, 3, 1), _at("2017-02-15T18:51:00Z"), 0.0),
    ],
)
def test_requeue_stuck_deployment(d, new_status, now, expected):
    st = dict(zip(("replicas", "updatedReplicas", "availableReplicas"), new_status, strict=True))
    assert recheck_in(d, st, now or NOW) == expected


TEST_TIME = "2017-02-15T18:49:00Z"
TIMED_OUT_COND = {
    "type": "Progressing",
    "status": "False",
    "reason": cond.TIMED_OUT,
    "lastUpdateTime": TEST_TIME,
    "lastTransitionTime": TEST_TIME,
}
LATER = datetime(2017, 2, 15, 19, 0, 0, tzinfo=UTC)  # past TEST_TIME + 60 s
NEW_RS_AVAILABLE_COND = {
    "type": "Progressing",
    "status": "True",
    "reason": cond.NEW_RS_AVAILABLE,
    "lastUpdateTime": TEST_TIME,
    "lastTransitionTime": TEST_TIME,
}
RS_UPDATED_COND = {
    "type": "Progressing",
    "status": "True",
    "reason": cond.RS_UPDATED,
    "lastUpdateTime": TEST_TIME,
    "lastTransitionTime": TEST_TIME,
}


def _avail(name: str, spec_replicas: int, status_replicas: int, available: int) -> Obj:
    return rs(name, spec_replicas, actual=status_replicas, available=available)


# name, deployment, other rss, new rs, (status, reason) or None, lastUpdate kept, lastTransition kept
ROLLOUT_CASES = [
    (
        "no progress deadline: Progressing removed",
        _current(None, 3, 2, 2, 2, [RS_UPDATED_COND]),
        [_avail("bar", 0, 1, 1)],
        _avail("foo", 3, 2, 2),
        None,
        False,
        False,
    ),
    (
        "only one active ReplicaSet: no estimate",
        _current(60, 3, 3, 3, 3, [NEW_RS_AVAILABLE_COND]),
        [_avail("bar", 3, 3, 3)],
        None,
        ("True", cond.NEW_RS_AVAILABLE),
        True,
        True,
    ),
    (
        "progressing keeps lastTransitionTime of Progressing=True",
        _current(60, 3, 2, 2, 2, [RS_UPDATED_COND]),
        [_avail("bar", 0, 1, 1)],
        _avail("foo", 3, 2, 2),
        ("True", cond.RS_UPDATED),
        False,
        True,
    ),
    (
        "progressing after Progressing=False updates everything",
        _current(60, 3, 2, 2, 2, [TIMED_OUT_COND]),
        [_avail("bar", 0, 1, 1)],
        _avail("foo", 3, 2, 2),
        ("True", cond.RS_UPDATED),
        False,
        False,
    ),
    (
        "progressing creates the condition",
        _current(60, 3, 2, 2, 2, []),
        [_avail("bar", 0, 1, 1)],
        _avail("foo", 3, 2, 2),
        ("True", cond.RS_UPDATED),
        False,
        False,
    ),
    (
        "complete keeps lastTransitionTime of Progressing=True",
        _current(60, 3, 3, 3, 3, [RS_UPDATED_COND]),
        [],
        _avail("foo", 3, 3, 3),
        ("True", cond.NEW_RS_AVAILABLE),
        False,
        True,
    ),
    (
        "complete after Progressing=False",
        _current(60, 3, 3, 3, 3, [TIMED_OUT_COND]),
        [],
        _avail("foo", 3, 3, 3),
        ("True", cond.NEW_RS_AVAILABLE),
        False,
        False,
    ),
    (
        "complete creates the condition",
        _current(60, 3, 3, 3, 3, []),
        [],
        _avail("foo", 3, 3, 3),
        ("True", cond.NEW_RS_AVAILABLE),
        False,
        False,
    ),
    (
        "complete without a new ReplicaSet",
        _current(60, 0, 3, 3, 3, [RS_UPDATED_COND]),
        [_avail("foo", 0, 0, 0)],
        None,
        ("True", cond.NEW_RS_AVAILABLE),
        False,
        False,
    ),
    (
        "out of time",
        _current(60, 3, 2, 2, 2, [RS_UPDATED_COND]),
        [],
        _avail("foo", 3, 2, 2),
        ("False", cond.TIMED_OUT),
        False,
        False,
    ),
    (
        "already out of time: unchanged",
        _current(60, 3, 2, 2, 2, [TIMED_OUT_COND]),
        [],
        _avail("foo", 3, 2, 2),
        ("False", cond.TIMED_OUT),
        True,
        True,
    ),
]


@pytest.mark.parametrize(
    ("name", "d", "others", "new", "expected", "same_update", "same_transition"),
    ROLLOUT_CASES,
    ids=[c[0] for c in ROLLOUT_CASES],
)
def test_sync_rollout_status(name, d, others, new, expected, same_update, same_transition):
    before = cond.get_condition(d["status"], cond.PROGRESSING)
    st = rollout_status(d, [*others, *([new] if new else [])], new, LATER)
    after = cond.get_condition(st, cond.PROGRESSING)
    if expected is None:
        assert after is None
        return
    assert (after["status"], after["reason"]) == expected
    if same_update:
        assert after.get("lastUpdateTime") == before.get("lastUpdateTime")
    if same_transition:
        assert after["lastTransitionTime"] == before["lastTransitionTime"] == TEST_TIME
    if not same_update:
        assert after["lastUpdateTime"] == cond.timestamp(LATER)


def test_progress_messages_name_the_new_replica_set():
    new = _avail("foo", 3, 2, 2)
    st = rollout_status(_current(60, 3, 2, 2, 2, []), [_avail("bar", 0, 1, 1), new], new, LATER)
    assert cond.get_condition(st, cond.PROGRESSING)["message"] == 'ReplicaSet "foo" is progressing.'
    st = rollout_status(_current(60, 3, 2, 2, 2, [RS_UPDATED_COND]), [new], new, LATER)
    assert (
        cond.get_condition(st, cond.PROGRESSING)["message"] == 'ReplicaSet "foo" has timed out progressing.'
    )


def test_replica_failures_are_copied_from_the_new_replica_set_first():
    failure = {
        "type": "ReplicaFailure",
        "status": "True",
        "reason": "FailedCreate",
        "message": "quota",
        "lastTransitionTime": TEST_TIME,
    }
    other = {**failure, "message": "other"}
    new, old = _avail("foo", 3, 2, 2), _avail("bar", 1, 1, 1)
    new["status"]["conditions"], old["status"]["conditions"] = [failure], [other]
    st = rollout_status(_current(60, 3, 3, 2, 3, []), [old, new], new, NOW)
    assert cond.get_condition(st, cond.REPLICA_FAILURE)["message"] == "quota"
    new["status"]["conditions"] = []
    st = rollout_status(_current(60, 3, 3, 2, 3, []), [old, new], new, NOW)
    assert cond.get_condition(st, cond.REPLICA_FAILURE)["message"] == "other"


def test_status_counts_and_the_available_condition():
    d = dep(4, 1, 1)
    d["metadata"]["generation"] = 3
    old = rs("old", 1, actual=2, available=2)
    old["status"]["readyReplicas"] = 2
    new = rs("new", 3, actual=2, available=1)
    new["status"]["readyReplicas"] = 1
    st = calculate_status([old, new], new, d, NOW)
    assert {k: v for k, v in st.items() if k != "conditions"} == {
        "observedGeneration": 3,
        "replicas": 4,
        "updatedReplicas": 2,
        "readyReplicas": 3,
        "availableReplicas": 3,
        "unavailableReplicas": 1,
    }
    available = cond.get_condition(st, cond.AVAILABLE)
    assert (available["status"], available["reason"]) == ("True", cond.MIN_AVAILABLE)
    new["status"]["availableReplicas"] = 0
    available = cond.get_condition(calculate_status([old, new], new, d, NOW), cond.AVAILABLE)
    assert (available["status"], available["reason"], available["message"]) == (
        "False",
        cond.MIN_UNAVAILABLE,
        "Deployment does not have minimum availability.",
    )


def test_conditions_keep_their_transition_time_when_only_the_reason_changes():
    st: Obj = {}
    cond.set_condition(st, cond.new_condition("Progressing", "True", "A", "a", NOW))
    later = NOW + timedelta(minutes=1)
    cond.set_condition(st, cond.new_condition("Progressing", "True", "A", "again", later))
    assert st["conditions"][0]["message"] == "a"  # same status and reason: unchanged
    cond.set_condition(st, cond.new_condition("Progressing", "True", "B", "b", later))
    assert st["conditions"][0]["lastTransitionTime"] == cond.timestamp(NOW)
    assert st["conditions"][0]["lastUpdateTime"] == cond.timestamp(later)
    cond.set_condition(st, cond.new_condition("Available", "False", "C", "c", later))
    assert [c["type"] for c in st["conditions"]] == ["Progressing", "Available"]
    cond.remove_condition(st, "Progressing")
    cond.remove_condition(st, "Available")
    assert st == {}


# --- recreate_test.go ----------------------------------------------------------------------------------


def _pod(phase: str) -> Obj:
    return {"metadata": {"name": phase}, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("olds", "pod_map", "expected"),
    [
        ([], {}, False),
        ([rs("old", 0, actual=1)], {}, True),  # an old ReplicaSet still reports a pod
        ([rs("old", 0, actual=0)], {"uid-old": [_pod("Running")]}, True),
        ([rs("old", 0, actual=0)], {"uid-old": [_pod("Failed"), _pod("Succeeded")]}, False),
        ([rs("old", 0, actual=0)], {"uid-old": [_pod("Unknown")]}, True),
        ([rs("old", 0, actual=0)], {"uid-old": [_pod("Pending")]}, True),
        ([rs("old", 0, actual=0)], {"uid-new": [_pod("Running")]}, False),  # the new ReplicaSet's own pods
    ],
)
def test_old_pods_running(olds, pod_map, expected):
    assert old_pods_running(rs("new", 3), olds, pod_map) is expected


# --- the pod-template-hash -----------------------------------------------------------------------------


def test_fnv32a_matches_the_reference_vectors():
    assert fnv32a(b"") == 0x811C9DC5
    assert fnv32a(b"a") == 0xE40C292C
    assert fnv32a(b"foobar") == 0xBF9CF968


def test_safe_encode_uses_upstreams_alphabet():
    assert ALPHANUMS == "bcdfghjklmnpqrstvwxz2456789"
    assert safe_encode("0123456789") == "456789bcdf"  # '0' is 48, 48 % 27 = 21 -> "4"; '6' is 54 -> "b"


def test_template_hash_is_stable_and_moved_by_collision_count():
    template = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    reordered = {
        "spec": {"containers": [{"image": "busybox", "name": "c"}]},
        "metadata": {"labels": {"app": "web"}},
    }
    first = compute_hash(template, None)
    assert first == compute_hash(reordered, None)  # key order does not matter
    assert set(first) <= set(ALPHANUMS) and 1 <= len(first) <= 10
    assert compute_hash(template, 0) != first  # a collisionCount, even 0, is hashed in
    assert len({first, compute_hash(template, 0), compute_hash(template, 1), compute_hash(template, 2)}) == 4
    other = copy.deepcopy(template)
    other["spec"]["containers"][0]["image"] = "busybox:2"
    assert compute_hash(other, None) != first


def test_new_replica_set_body():
    d = dep(3, 1, 0)
    d["metadata"]["annotations"] = {"kubernetes.io/change-cause": "first", util.LAST_APPLIED: "{}"}
    d["spec"]["minReadySeconds"] = 5
    body = new_replica_set_body(d, [rs("old", 2, annotations={util.REVISION: "4"})])
    pod_hash = compute_hash(d["spec"]["template"], None)
    assert body["metadata"]["name"] == f"foo-{pod_hash}"
    assert body["metadata"]["labels"] == {"foo": "bar", H: pod_hash}
    assert body["spec"]["selector"] == {"matchLabels": {"foo": "bar", H: pod_hash}}
    assert body["spec"]["template"]["metadata"]["labels"] == {"foo": "bar", H: pod_hash}
    assert body["spec"]["minReadySeconds"] == 5
    assert body["spec"]["replicas"] == 2  # 3 + maxSurge 1 - the old one's 2
    assert body["metadata"]["annotations"] == {
        "kubernetes.io/change-cause": "first",
        util.REVISION: "5",
        util.DESIRED_REPLICAS: "3",
        util.MAX_REPLICAS: "4",
    }
    assert body["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "foo",
            "uid": "d-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert (
        "pod-template-hash" not in d["spec"]["template"]["metadata"]["labels"]
    )  # the Deployment is untouched


# --- read your own writes ------------------------------------------------------------------------------


def test_own_writes_win_until_the_cache_moves_on():
    clock = [0.0]
    own = OwnWrites(ttl=60, clock=lambda: clock[0])
    v1, v2, v3 = ({"metadata": {"name": "x", "resourceVersion": rv}} for rv in ("1", "2", "3"))
    own.wrote("ns/x", "1", v2)
    assert own.view("ns/x", v1) is v2  # the cache has not seen our write
    own.wrote("ns/x", "2", v3)
    assert own.view("ns/x", v2) is v3  # nor the second
    assert own.view("ns/x", v3) is v3 and len(own) == 0  # caught up: forgotten
    other = {"metadata": {"name": "x", "resourceVersion": "9"}}
    own.wrote("ns/x", "1", v2)
    assert own.view("ns/x", other) is other  # someone wrote after us: the cache is right
    created = {"metadata": {"name": "y", "resourceVersion": "5"}}
    own.created("ns/y", created)
    assert own.unseen_created("ns/", set()) == [created]
    assert own.unseen_created("ns/", {"ns/y"}) == []
    clock[0] = 61
    assert own.view("ns/y", None) is None  # expired
