"""The kind table (kindtable.py) and the REST parts it attaches (kindparts.py): each server's table is its
own, the REST layer's subresources and plugins land on the kinds that declare them, and attaching twice
changes nothing."""

from __future__ import annotations

from controlplane.apiserver.kindparts import builtin_table
from controlplane.apiserver.kinds import BUILT_IN, pod, webhookconfiguration
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.kindtable import KindTable


class Widget(Kind):
    group = "example.com"
    kind = "Widget"
    plural = "widgets"


def test_a_table_serves_the_built_in_kinds_in_their_order() -> None:
    table = builtin_table()
    assert list(table) == list(BUILT_IN)
    assert table.by_path("", "v1", "pods") is pod.KIND
    assert table.by_kind("apps/v1", "Deployment") is table.by_path("apps", "v1", "deployments")
    assert table.groups()[0] == ("apiregistration.k8s.io", "v1")


def test_custom_resources_join_one_table_only() -> None:
    first, second = builtin_table(), builtin_table()
    widget = Widget()
    first.add(widget)
    assert first.by_path("example.com", "v1", "widgets") is widget
    assert second.by_path("example.com", "v1", "widgets") is None
    assert ("example.com", "v1") in first.groups() and ("example.com", "v1") not in second.groups()
    assert first.generation() == 1 and second.generation() == 0
    first.remove(widget)
    assert first.by_path("example.com", "v1", "widgets") is None
    assert first.generation() == 2


def test_the_rest_layer_parts_replace_the_declared_subresources() -> None:
    builtin_table()
    names = [s.name for s in pod.KIND.subresources]
    assert names == [
        "status",
        "binding",
        "eviction",
        "log",
        "ephemeralcontainers",
        "exec",
        "attach",
        "portforward",
        "proxy",
    ]
    log = pod.KIND.subresource("log")
    assert log is not None and log.handles("get")
    for name in ("exec", "attach", "portforward", "proxy"):
        sub = pod.KIND.subresource(name)
        assert sub is not None and sub.connects and callable(getattr(sub, "connect", None)), name


def test_attaching_again_changes_nothing() -> None:
    builtin_table()
    subresources = pod.KIND.subresources
    plugins = webhookconfiguration.MUTATING.admission
    builtin_table()
    assert [type(s) for s in pod.KIND.subresources] == [type(s) for s in subresources]
    assert len(webhookconfiguration.MUTATING.admission) == len(plugins) == 1


def test_the_webhook_plugins_run_last_in_the_chain() -> None:
    names = builtin_table().known_plugins()
    assert names[-3:] == [
        "MutatingAdmissionWebhook",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionWebhook",
    ]


def test_a_namespace_is_swept_once_per_storage_bucket() -> None:
    sweep = KindTable(BUILT_IN).sweepable()
    buckets = [k.bucket for k in sweep]
    assert len(buckets) == len(set(buckets))
    assert "events" in buckets and "pods" in buckets
    assert all(k.namespaced and k.stored for k in sweep)
