"""The delete path's decisions without a server (deletion.py, options.py): which finalizers a DELETE
leaves, in upstream's order of precedence, and which step it takes for graceful and other kinds."""

from __future__ import annotations

import pytest
from multidict import MultiDict

from controlplane.apiserver import deletion
from controlplane.apiserver.deletion import Step
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.kinds import configmap, event, namespace, pod, replicationcontroller
from controlplane.apiserver.options import DeleteOptions

FG, OR = deletion.FOREGROUND_FINALIZER, deletion.ORPHAN_FINALIZER


@pytest.mark.parametrize(
    ("finalizers", "options", "policy", "expected"),
    [
        ([], DeleteOptions(), deletion.DELETE_DEPENDENTS, None),
        ([], DeleteOptions(), deletion.ORPHAN_DEPENDENTS, [OR]),
        ([], DeleteOptions(propagation="Foreground"), deletion.ORPHAN_DEPENDENTS, [FG]),
        ([], DeleteOptions(propagation="Orphan"), deletion.UNSUPPORTED, None),
        (["x"], DeleteOptions(propagation="Orphan"), deletion.DELETE_DEPENDENTS, ["x", OR]),
        (
            [FG],
            DeleteOptions(),
            deletion.ORPHAN_DEPENDENTS,
            None,
        ),  # the object's own finalizer beats the default
        ([FG], DeleteOptions(propagation="Orphan"), deletion.DELETE_DEPENDENTS, [OR]),
        ([FG, "x"], DeleteOptions(propagation="Background"), deletion.DELETE_DEPENDENTS, ["x"]),
        (
            [OR],
            DeleteOptions(orphan_dependents=False),
            deletion.DELETE_DEPENDENTS,
            [],
        ),  # neither, in the generic store
        ([FG], DeleteOptions(orphan_dependents=True), deletion.DELETE_DEPENDENTS, [OR]),
    ],
)
def test_gc_finalizers(finalizers, options, policy, expected):
    assert deletion.gc_finalizers(finalizers, options, policy) == expected


def obj(**meta: object) -> dict:
    return {"metadata": {"name": "x", "uid": "u", "resourceVersion": "7", **meta}, "spec": {}}


def test_plain_kinds_go_now_or_are_marked_when_held():
    cm = configmap.KIND
    assert deletion.plan(cm, obj(), DeleteOptions()) is Step.NOW
    held = obj(finalizers=["x"], generation=3)
    assert deletion.plan(cm, held, DeleteOptions(propagation="Foreground")) is Step.MARK
    meta = held["metadata"]
    assert (
        meta["finalizers"] == ["x", FG]
        and meta["deletionGracePeriodSeconds"] == 0
        and meta["generation"] == 4
    )
    stamp = meta["deletionTimestamp"]
    # Marked already: the timestamp and generation stay, the GC finalizer follows the new request.
    assert deletion.plan(cm, held, DeleteOptions(propagation="Orphan")) is Step.MARK
    assert (meta["deletionTimestamp"], meta["generation"], meta["finalizers"]) == (stamp, 4, ["x", OR])
    only_gc = obj(finalizers=[FG], deletionTimestamp=stamp, deletionGracePeriodSeconds=0)
    assert deletion.plan(cm, only_gc, DeleteOptions(propagation="Background")) is Step.NOW


def test_the_kinds_defaults():
    assert deletion.plan(replicationcontroller.KIND, obj(), DeleteOptions()) is Step.MARK
    assert deletion.plan(event.KIND, obj(), DeleteOptions(propagation="Foreground")) is Step.NOW


def bound_pod(**meta: object) -> dict:
    body = obj(**meta)
    body["spec"] = {"nodeName": "n1", "terminationGracePeriodSeconds": 30}
    return body


def test_graceful_pods():
    p = pod.KIND
    fresh = bound_pod()
    assert deletion.plan(p, fresh, DeleteOptions()) is Step.MARK
    assert fresh["metadata"]["deletionGracePeriodSeconds"] == 30
    # Pending: nothing changes, not even the finalizers the request asks for.
    assert deletion.plan(p, fresh, DeleteOptions(propagation="Orphan")) is Step.PENDING
    assert "finalizers" not in fresh["metadata"]
    assert deletion.plan(p, fresh, DeleteOptions(grace_period=30)) is Step.PENDING
    assert deletion.plan(p, fresh, DeleteOptions(grace_period=-3)) is Step.MARK  # counts as 1 s
    assert fresh["metadata"]["deletionGracePeriodSeconds"] == 1
    assert deletion.plan(p, fresh, DeleteOptions(grace_period=0)) is Step.NOW
    unbound = obj()
    unbound["spec"] = {}
    assert deletion.plan(p, unbound, DeleteOptions()) is Step.NOW
    held = bound_pod(finalizers=["x"])
    assert (
        deletion.plan(p, held, DeleteOptions(grace_period=0)) is Step.MARK
    )  # grace 0, held by its finalizer


def test_namespace_rules():
    ns = namespace.KIND
    first = obj()
    first["spec"] = {"finalizers": ["kubernetes"]}
    assert deletion.plan(ns, first, DeleteOptions(orphan_dependents=False)) is Step.MARK
    assert first["metadata"]["finalizers"] == [FG] and first["status"]["phase"] == "Terminating"
    assert deletion.plan(ns, first, DeleteOptions(propagation="Orphan")) is Step.MARK
    assert first["metadata"]["finalizers"] == [FG]  # being emptied: unchanged
    with pytest.raises(ApiError) as err:
        ns.check_delete_preconditions(first, DeleteOptions(uid="v"))
    assert (
        err.value.message
        == 'Operation cannot be fulfilled on namespaces "x": Precondition failed: UID in precondition: v, UID in object meta: u'
    )


def test_preconditions_name_the_kind():
    with pytest.raises(ApiError) as err:
        replicationcontroller.KIND.check_delete_preconditions(obj(), DeleteOptions(resource_version="6"))
    assert err.value.code == 409 and err.value.message.startswith(
        'Operation cannot be fulfilled on ReplicationController "x": the ResourceVersion in the precondition (6)'
    )


def test_options_come_from_the_body_or_else_the_query():
    query = MultiDict([("propagationPolicy", "Orphan"), ("gracePeriodSeconds", "5"), ("dryRun", "All")])
    from_query = DeleteOptions.parse(None, query)
    assert (from_query.propagation, from_query.grace_period, from_query.dry_run) == ("Orphan", 5, True)
    from_body = DeleteOptions.parse({"propagationPolicy": "Foreground"}, query)
    assert (from_body.propagation, from_body.grace_period, from_body.dry_run) == ("Foreground", None, False)
    assert DeleteOptions.parse(None, MultiDict([("orphanDependents", "t")])).orphan_dependents is True
    with pytest.raises(ApiError):
        DeleteOptions.parse(None, MultiDict([("orphanDependents", "yes")]))


def test_option_problems():
    assert DeleteOptions(propagation="Orphan").problems() == []
    both = DeleteOptions(propagation="Orphan", orphan_dependents=False).problems()
    assert [(p.field, p.detail) for p in both] == [
        (
            "propagationPolicy",
            'Invalid value: "Orphan": orphanDependents and deletionPropagation cannot be both set',
        )
    ]
    assert [p.type for p in DeleteOptions(propagation="x", dry_run_values=["All", "x"]).problems()] == [
        "FieldValueNotSupported",
        "FieldValueNotSupported",
    ]
