"""The metrics server's pure parts: reading the kubelet's /metrics/resource text (upstream's format,
from fixtures), the store's rates and restarts, the served shapes and quantities, requestheader users."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict
from prometheus_client.parser import text_string_to_metric_families

from kubeclient.delegatedauth import RequestHeaderConfig, from_headers
from metricsserver.points import ParseError, parse
from metricsserver.shapes import cpu_quantity, go_duration, memory_quantity, node_metrics, pod_metrics
from metricsserver.storage import MetricsStore

# As the kubelet's /metrics/resource answers (upstream's resource metrics endpoint), two scrapes apart.
FIRST = """\
# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="web",namespace="default",pod="web-1"} 10.5 1700000000000
container_cpu_usage_seconds_total{container="side",namespace="default",pod="web-1"} 1 1700000000000
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="web",namespace="default",pod="web-1"} 1.6297984e+07 1700000000000
container_memory_working_set_bytes{container="side",namespace="default",pod="web-1"} 1024 1700000000000
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="web",namespace="default",pod="web-1"} 1.6999e+09 1700000000000
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 1000 1700000000000
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 2.147483648e+09 1700000000000
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="default",pod="web-1"} 11.5 1700000000000
# HELP scrape_error [ALPHA] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE scrape_error gauge
scrape_error 0
"""
SECOND = (
    FIRST.replace("10.5 1700000000000", "12 1700000015000")
    .replace("} 1 1700000000000", "} 1.15 1700000015000")
    .replace("1700000000000", "1700000015000")
    .replace("node_cpu_usage_seconds_total 1000", "node_cpu_usage_seconds_total 1015")
)


def test_parse_reads_node_and_container_points() -> None:
    sample = parse(FIRST)
    assert (
        sample.node.cpu == 1000 and sample.node.memory == 2147483648 and sample.node.cpu_time == 1700000000.0
    )
    web = sample.containers[("default", "web-1", "web")]
    assert (web.cpu, web.memory, web.start_time) == (10.5, 16297984.0, 1.6999e9)
    assert set(sample.containers) == {("default", "web-1", "web"), ("default", "web-1", "side")}


def test_label_values_are_unescaped_in_one_pass_as_prometheus_reads_them() -> None:
    # `\\n` is an escaped backslash before an n (not a newline), `\\"` an escaped backslash before an
    # escaped quote; prometheus_client's parser (the format's reference in Python) reads them the same.
    text = (
        'container_cpu_usage_seconds_total{container="a\\\\nb",namespace="n\\"s\\\\",pod="p\\nq\\t"} 1 1700000000000\n'
        'container_memory_working_set_bytes{container="a\\\\nb",namespace="n\\"s\\\\",pod="p\\nq\\t"} 2 1700000000000\n'
    )
    key = ('n"s\\', "p\nq\\t", "a\\nb")
    assert set(parse(text).containers) == {key}
    reference = [s.labels for f in text_string_to_metric_families(text) for s in f.samples][0]
    assert (reference["namespace"], reference["pod"], reference["container"]) == key


def test_parse_refuses_garbage() -> None:
    with pytest.raises(ParseError):
        parse("node_cpu_usage_seconds_total{ 12")


def test_one_scrape_gives_no_rate_two_give_it() -> None:
    store = MetricsStore()
    store.store({"n1": parse(FIRST)})
    assert store.node("n1") is None and store.pods() == {}
    store.store({"n1": parse(SECOND)})
    node = store.node("n1")
    assert node is not None
    assert node.cpu_cores == pytest.approx(1.0) and node.window == pytest.approx(15.0)
    assert node.memory_bytes == 2147483648 and node.timestamp == 1700000015.0
    pods = store.pods()
    by_name = {c.name: c.usage for c in pods[("default", "web-1")]}
    assert by_name["web"].cpu_cores == pytest.approx(0.1)
    assert by_name["side"].cpu_cores == pytest.approx(0.01)


def test_the_same_sample_again_keeps_the_rate() -> None:
    store = MetricsStore()
    for text in (FIRST, SECOND, SECOND):
        store.store({"n1": parse(text)})
    usage = store.node("n1")
    assert usage is not None and usage.cpu_cores == pytest.approx(1.0)


def test_a_restarted_container_starts_over() -> None:
    store = MetricsStore()
    store.store({"n1": parse(FIRST)})
    restarted = SECOND.replace("1.6999e+09", "1.7e+09").replace("} 12 1700000015000", "} 0.2 1700000015000")
    store.store({"n1": parse(restarted)})
    assert ("default", "web-1") not in store.pods()  # web has one point only: the pod is left out


def test_a_node_missing_from_a_round_has_no_metrics() -> None:
    store = MetricsStore()
    store.store({"n1": parse(FIRST)})
    store.store({"n1": parse(SECOND)})
    store.store({})
    assert store.node("n1") is None and store.pods() == {}


def test_quantities_as_upstream_writes_them() -> None:
    assert cpu_quantity(0.1) == "100m"
    assert cpu_quantity(0.123456789) == "123456789n"
    assert memory_quantity(16297984) == "15916Ki"
    assert memory_quantity(2147483648) == "2Gi"
    assert memory_quantity(1000) == "1000"
    assert memory_quantity(0) == "0"


def test_go_durations() -> None:
    assert go_duration(15.0) == "15s"
    assert go_duration(20.052) == "20.052s"
    assert go_duration(65.5) == "1m5.5s"
    assert go_duration(0.5) == "500ms"


def test_served_shapes() -> None:
    store = MetricsStore()
    store.store({"n1": parse(FIRST)})
    store.store({"n1": parse(SECOND)})
    node = {"metadata": {"name": "n1", "labels": {"a": "b"}}}
    usage = store.node("n1")
    assert usage is not None
    doc = node_metrics(node, usage)
    assert doc["kind"] == "NodeMetrics" and doc["apiVersion"] == "metrics.k8s.io/v1beta1"
    assert doc["metadata"]["name"] == "n1" and doc["metadata"]["labels"] == {"a": "b"}
    assert doc["timestamp"] == "2023-11-14T22:13:35Z" and doc["window"] == "15s"
    assert doc["usage"] == {"cpu": "1", "memory": "2Gi"}
    pod = {"metadata": {"name": "web-1", "namespace": "default"}}
    pdoc = pod_metrics(pod, store.pods()[("default", "web-1")])
    assert [c["name"] for c in pdoc["containers"]] == ["side", "web"]
    assert pdoc["containers"][1]["usage"] == {"cpu": "100m", "memory": "15916Ki"}


def test_requestheader_user() -> None:
    headers = CIMultiDict(
        [
            ("X-Remote-User", "alice"),
            ("X-Remote-Group", "dev"),
            ("X-Remote-Group", "system:authenticated"),
            ("X-Remote-Extra-Scopes", "a"),
            ("X-Remote-Extra-Example.com%2fteam", "x"),
        ]
    )
    user = from_headers(headers, RequestHeaderConfig(client_ca=""))
    assert user is not None
    assert user.name == "alice" and user.groups == ("dev", "system:authenticated")
    assert dict(user.extra) == {"example.com/team": ("x",), "scopes": ("a",)}
    assert from_headers(CIMultiDict([("X-Remote-Group", "g")]), RequestHeaderConfig(client_ca="")) is None
