"""Pure functions of the API server: patches, selectors, defaulting, validation, tables, apply."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.apiserver import fieldselect, ssa, tables
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.kinds.deployment import KIND as DEPLOYMENT
from controlplane.apiserver.kinds.event import KIND as EVENT
from controlplane.apiserver.kinds.pod import KIND as PODS
from controlplane.apiserver.kinds.priorityclass import resolve_pod_priority
from controlplane.apiserver.meta import human_duration, new_uid, timestamp
from controlplane.apiserver.patch import json_patch, merge_patch, strategic_merge

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "labels": {"app": "a"}, "finalizers": ["x/y"]},
    "spec": {
        "containers": [
            {
                "name": "a",
                "image": "img:1",
                "env": [{"name": "E1", "value": "1"}],
                "ports": [{"containerPort": 80}],
            },
            {"name": "b", "image": "img:2"},
        ]
    },
    "status": {
        "conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]
    },
}


def test_strategic_merge_uses_upstream_merge_keys() -> None:
    patch = {
        "metadata": {"finalizers": ["z/w"]},
        "spec": {
            "containers": [
                {"name": "b", "image": "img:3", "env": [{"name": "E2", "value": "2"}]},
                {"name": "c", "image": "new"},
            ]
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    out = strategic_merge(POD, patch, PODS.smp)
    containers = out["spec"]["containers"]
    assert [c["name"] for c in containers] == ["a", "b", "c"]
    assert containers[0] == POD["spec"]["containers"][0]
    assert containers[1] == {"name": "b", "image": "img:3", "env": [{"name": "E2", "value": "2"}]}
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
    ]
    # Upstream's normalizeElementOrder: an item the patch adds goes before the live items it meets.
    assert out["metadata"]["finalizers"] == ["z/w", "x/y"]
    assert POD["spec"]["containers"][1]["image"] == "img:2", "the original must not change"


def test_strategic_merge_puts_added_items_where_upstream_does() -> None:
    """A container a patch adds comes first (two conformance tests read containers[0]); items the patch
    names keep the patch's order and the live object's others keep theirs, interleaved."""
    added = strategic_merge(POD, {"spec": {"containers": [{"name": "c", "image": "new"}]}}, PODS.smp)
    assert [c["name"] for c in added["spec"]["containers"]] == ["c", "a", "b"]
    both = strategic_merge(
        POD, {"spec": {"containers": [{"name": "c", "image": "new"}, {"name": "b", "image": "x"}]}}, PODS.smp
    )
    assert [c["name"] for c in both["spec"]["containers"]] == ["c", "a", "b"]
    ordered = strategic_merge(
        POD,
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "b"}, {"name": "c"}, {"name": "a"}],
                "containers": [{"name": "c", "image": "new"}],
            }
        },
        PODS.smp,
    )
    assert [c["name"] for c in ordered["spec"]["containers"]] == ["b", "c", "a"]
    # A live item the order leaves out goes before a listed one it stood before.
    partial = strategic_merge(
        POD,
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "b"}, {"name": "c"}],
                "containers": [{"name": "c", "image": "new"}],
            }
        },
        PODS.smp,
    )
    assert [c["name"] for c in partial["spec"]["containers"]] == ["a", "b", "c"]


def test_strategic_merge_directives() -> None:
    patch = {
        "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
        "spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
            "containers": [{"name": "a", "$patch": "delete"}],
        },
        "metadata": {"labels": {"app": None}, "$deleteFromPrimitiveList/finalizers": ["x/y"]},
    }
    out = strategic_merge(POD, patch, PODS.smp)
    assert [c["name"] for c in out["spec"]["containers"]] == ["b"]
    assert out["metadata"]["labels"] == {} and out["metadata"]["finalizers"] == []
    replaced = strategic_merge(
        POD, {"spec": {"containers": [{"name": "z", "image": "i"}, {"$patch": "replace"}]}}, PODS.smp
    )
    assert replaced["spec"]["containers"] == [{"name": "z", "image": "i"}]
    # Lists without a merge key (tolerations) are replaced whole.
    tol = strategic_merge(
        {"spec": {"tolerations": [{"key": "a"}]}}, {"spec": {"tolerations": [{"key": "b"}]}}, PODS.smp
    )
    assert tol["spec"]["tolerations"] == [{"key": "b"}]


def test_merge_patch_and_json_patch() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None, "d": 3}, "l": [2]}) == {
        "a": {"c": 2, "d": 3},
        "l": [2],
    }
    doc = {"metadata": {"labels": {"a/b": "1"}}, "items": [1, 2]}
    out = json_patch(
        doc,
        [
            {"op": "add", "path": "/items/-", "value": 3},
            {"op": "replace", "path": "/metadata/labels/a~1b", "value": "2"},
            {"op": "copy", "from": "/items/0", "path": "/first"},
            {"op": "move", "from": "/first", "path": "/moved"},
            {"op": "remove", "path": "/items/1"},
            {"op": "test", "path": "/moved", "value": 1},
        ],
    )
    assert out == {"metadata": {"labels": {"a/b": "2"}}, "items": [1, 3], "moved": 1}
    with pytest.raises(ApiError) as err:
        json_patch(doc, [{"op": "test", "path": "/items/0", "value": 9}])
    assert err.value.code == 422
    with pytest.raises(ApiError):
        json_patch(doc, [{"op": "remove", "path": "/nope"}])


def test_label_selectors() -> None:
    labels = {"app": "web", "tier": "front", "n": "5"}
    cases = {
        "app=web": True,
        "app==web": True,
        "app!=web": False,
        "app in (web,api)": True,
        "app notin (web)": False,
        "tier": True,
        "!tier": False,
        "missing": False,
        "!missing": True,
        "app=web,tier in (back)": False,
        "n>4": True,
        "n<4": False,
        "": True,
    }
    for text, expected in cases.items():
        pred, _ = fieldselect.predicate(PODS, text, "")
        result = True if pred is None else pred({"metadata": {"labels": labels}})
        assert result is expected, text


def test_field_selectors() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "n"},
        "spec": {"nodeName": "node1"},
        "status": {"phase": "Running"},
    }
    pred, _ = fieldselect.predicate(PODS, "", "spec.nodeName=node1,status.phase!=Failed")
    assert pred is not None and pred(pod)
    pred, _ = fieldselect.predicate(PODS, "", "spec.nodeName=")
    assert pred is not None and not pred(pod)
    with pytest.raises(ApiError) as err:
        fieldselect.predicate(PODS, "", "spec.bogus=1")
    assert err.value.code == 400


def test_pod_defaults_match_upstream() -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {
                    "name": "a",
                    "image": "busybox",
                    "ports": [{"containerPort": 80}],
                    "livenessProbe": {"httpGet": {"port": 80}},
                },
                {
                    "name": "b",
                    "image": "reg:5000/busybox:1.36",
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                },
                {"name": "c", "image": "busybox:latest"},
            ]
        },
    }
    # Defaulting, the status a new pod gets, and the Priority admission plugin with no classes.
    PODS.default(pod, True)
    PODS.prepare_for_create(pod)
    resolve_pod_priority(pod, [])
    spec = pod["spec"]
    assert (spec["restartPolicy"], spec["terminationGracePeriodSeconds"], spec["dnsPolicy"]) == (
        "Always",
        30,
        "ClusterFirst",
    )
    assert (
        spec["schedulerName"],
        spec["serviceAccountName"],
        spec["enableServiceLinks"],
        spec["priority"],
    ) == ("default-scheduler", "default", True, 0)
    a, b, c = spec["containers"]
    assert [a["imagePullPolicy"], b["imagePullPolicy"], c["imagePullPolicy"]] == [
        "Always",
        "IfNotPresent",
        "Always",
    ]
    assert a["terminationMessagePath"] == "/dev/termination-log" and a["terminationMessagePolicy"] == "File"
    assert a["ports"][0]["protocol"] == "TCP"
    assert a["livenessProbe"] == {
        "httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    assert b["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert pod["status"] == {"phase": "Pending", "qosClass": "Burstable"}


def test_validation_causes() -> None:
    pod = {
        "metadata": {"name": "Bad_Name"},
        "spec": {"containers": [{"name": "c"}, {"name": "c", "image": "x"}], "restartPolicy": "Sometimes"},
    }
    errors = {(e.field, e.type) for e in PODS.validate(pod)}
    assert ("metadata.name", "FieldValueInvalid") in errors
    assert ("spec.containers[0].image", "FieldValueRequired") in errors
    assert ("spec.containers[1].name", "FieldValueDuplicate") in errors
    assert ("spec.restartPolicy", "FieldValueNotSupported") in errors
    deploy = {
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {
                "metadata": {"labels": {"app": "y"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        },
    }
    assert [e.field for e in DEPLOYMENT.validate(deploy)] == ["spec.template.metadata.labels"]


def test_pod_table_status_column() -> None:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    pod = {
        "metadata": {"name": "p", "creationTimestamp": now},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.5",
            "containerStatuses": [
                {"name": "a", "ready": True, "restartCount": 2, "state": {"running": {}}},
                {
                    "name": "b",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                },
            ],
        },
    }
    table = tables.table(PODS, [pod])
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
        "IP",
        "Node",
        "Nominated Node",
        "Readiness Gates",
    ]
    assert table["rows"][0]["cells"][:4] == ["p", "1/2", "CrashLoopBackOff", "2"]
    assert table["rows"][0]["cells"][5:7] == ["10.0.0.5", "n1"]
    pod["metadata"]["deletionTimestamp"] = now
    assert tables.table(PODS, [pod])["rows"][0]["cells"][2] == "Terminating"


def test_human_duration() -> None:
    assert [human_duration(dt.timedelta(seconds=s)) for s in (5, 150, 600, 4000, 30000, 200000)] == [
        "5s",
        "2m30s",
        "10m",
        "66m",
        "8h",
        "2d7h",
    ]


def test_server_side_apply_removes_fields_the_manager_dropped() -> None:
    first = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": {"a": "1", "b": "2"}},
        "data": {"x": "1", "y": "2"},
    }
    live = ssa.apply(None, first, "mgr")
    live["data"]["other"] = "kept"  # written by someone else
    second = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": {"a": "1"}},
        "data": {"x": "9"},
    }
    out = ssa.apply(live, second, "mgr")
    assert out["data"] == {"x": "9", "other": "kept"}
    assert out["metadata"]["labels"] == {"a": "1"}
    entry = out["metadata"]["managedFields"][0]
    assert entry["manager"] == "mgr" and entry["operation"] == "Apply"
    assert entry["fieldsV1"] == {"f:data": {"f:x": {}}, "f:metadata": {"f:labels": {"f:a": {}}}}


async def test_idle_events_expire(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from controlplane.apiserver.eventttl import expire_events
    from controlplane.apiserver.server import ApiServer, ServerConfig

    server = ApiServer(ServerConfig(tmp_path / "d", port=0, insecure_http=True))
    await server.start()
    try:
        events = EVENT
        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
        recent = (later - dt.timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
        for name, last in (("old", None), ("fresh", recent)):
            body = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name},
                "involvedObject": {"kind": "Pod", "name": "p"},
                "reason": "R",
                "message": "m",
            }
            if last:
                body["lastTimestamp"] = last
                body["firstTimestamp"] = last
            await server.registry.create(events, "default", body)
        # Two hours on: the event last seen at creation has expired, the one seen 30 minutes ago has not.
        assert await expire_events(server.registry, events, dt.timedelta(hours=1), at=later) == 1
        assert [c.key for c in server.cache.list(events.bucket, events.prefix("default"))] == [
            "/events/default/fresh"
        ]
    finally:
        await server.stop()


async def test_the_event_sweep_decodes_only_events_written_since_its_last_round_and_yields(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Tens of thousands of events at scale: a sweep judges an event again only when it was written since
    the last round, and lets the event loop run while it walks them (the ticker below moves)."""
    import asyncio

    from controlplane.apiserver import eventttl
    from controlplane.apiserver.server import ApiServer, ServerConfig

    server = ApiServer(ServerConfig(tmp_path / "d", port=0, insecure_http=True))
    await server.start()
    try:
        for name in ("a", "b", "c"):
            body = {"metadata": {"name": name}, "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "R"}
            await server.registry.create(EVENT, "default", {"apiVersion": "v1", "kind": "Event", **body})
        seen: eventttl.Seen = {}
        assert await eventttl.expire_events(server.registry, EVENT, dt.timedelta(hours=1), seen=seen) == 0
        assert sorted(seen) == [f"/events/default/{n}" for n in ("a", "b", "c")]
        changed = server.cache.get("/events/default/b")
        assert changed is not None
        again = changed.obj
        again["message"] = "seen again"
        await server.registry.update(EVENT, "default", "b", again)
        judged: list[str] = []
        original = eventttl.last_activity

        def counted(event):  # type: ignore[no-untyped-def]
            judged.append(event["metadata"]["name"])
            return original(event)

        monkeypatch.setattr(eventttl, "last_activity", counted)
        monkeypatch.setattr(eventttl, "SLICE", -1.0)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        assert await eventttl.expire_events(server.registry, EVENT, dt.timedelta(hours=1), seen=seen) == 0
        task.cancel()
        assert judged == ["b"] and ticks > before
        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
        swept = await eventttl.expire_events(
            server.registry, EVENT, dt.timedelta(hours=1), at=later, seen=seen
        )
        assert swept == 3 and server.cache.list(EVENT.bucket, EVENT.prefix("default")) == []
    finally:
        await server.stop()


def test_new_uid_is_a_version_4_uuid_as_uuid4_writes_it() -> None:
    uids = {new_uid() for _ in range(2000)}
    assert len(uids) == 2000
    for text in uids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_timestamp_is_now_to_the_second_and_formats_a_given_time() -> None:
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    stamp = timestamp()
    after = dt.datetime.now(dt.UTC).replace(microsecond=0)
    assert before <= dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC) <= after
    assert timestamp(dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)) == "2026-01-02T03:04:05Z"


_small = st.none() | st.booleans() | st.integers(0, 3) | st.sampled_from(["a", "b"])
_container = st.fixed_dictionaries(
    {"name": st.sampled_from(["c1", "c2", "c3"])},
    optional={
        "image": st.sampled_from(["i1", "i2"]),
        "ports": st.lists(
            st.fixed_dictionaries(
                {"containerPort": st.sampled_from([80, 81])}, optional={"protocol": st.sampled_from(["TCP"])}
            ),
            max_size=2,
        ),
        "args": st.lists(st.sampled_from(["x", "y"]), max_size=2),
    },
)
_pod = st.fixed_dictionaries(
    {"apiVersion": st.just("v1"), "kind": st.just("Pod")},
    optional={
        "metadata": st.fixed_dictionaries(
            {}, optional={"labels": st.dictionaries(st.sampled_from(["a", "b"]), _small, max_size=2)}
        ),
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "containers": st.lists(_container, max_size=3),
                "nodeName": st.sampled_from(["n1", "n2"]),
                "tolerations": st.lists(
                    st.dictionaries(st.sampled_from(["key", "effect"]), _small), max_size=2
                ),
            },
        ),
        "status": st.dictionaries(st.sampled_from(["phase", "podIP"]), _small, max_size=2),
    },
)


@settings(max_examples=150, deadline=None)
@given(old=_pod, new=_pod)
def test_changed_fields_walk_agrees_with_looking_each_leaf_up_from_the_root(old: dict, new: dict) -> None:
    schema = PODS.apply_schema
    fields = ssa._object_fields(new, schema)
    old_paths = ssa.leaves(ssa._object_fields(old, schema))
    expected = {
        p for p in ssa.leaves(fields) if p not in old_paths or ssa.value_at(old, p) != ssa.value_at(new, p)
    }
    walked: set = set()
    ssa._changed(fields, old, new, (), old_paths, walked)
    assert walked == expected
