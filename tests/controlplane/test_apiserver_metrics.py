"""The API server's /metrics against the real server: apiserver_request_total and
apiserver_request_duration_seconds move for the requests a client makes, with upstream's labels and
buckets; a watch shows in apiserver_longrunning_requests while it is open; apiserver_storage_objects
counts what is stored; /metrics is for system:monitoring (and admins), refused to others as upstream
refuses it; requests refused by authorization are not counted, as upstream's instrumented routes do not
see them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families

from controlplane.apiserver.metrics import DURATION_BUCKETS, SLI_BUCKETS
from pykubelet.rig.apiserver import ApiServer, api_client

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("metrics-api")) as s:
        yield s


class Refused(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status}: {body}")
        self.status, self.body = status, body


def scrape(api: client.ApiClient) -> dict[str, Any]:
    resp = api.call_api("GET", api.configuration.host + "/metrics")
    body = resp.read().decode()
    if resp.status != 200:
        raise Refused(resp.status, body)
    return {f.name: f for f in text_string_to_metric_families(body)}


def value(families: dict[str, Any], name: str, sample: str, **labels: str) -> float:
    family = families.get(name)
    if family is None:
        return 0.0
    for s in family.samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return 0.0


CREATE = {
    "verb": "POST",
    "group": "",
    "version": "v1",
    "resource": "configmaps",
    "subresource": "",
    "scope": "resource",  # upstream's CleanScope: a create is a single-object call
    "component": "apiserver",
    "dry_run": "",
}


def test_request_counters_move_for_a_request(server: ApiServer) -> None:
    admin = server.api_client()
    v1 = client.CoreV1Api(admin)
    before = scrape(admin)
    v1.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="m1")))
    with pytest.raises(ApiException):
        v1.read_namespaced_config_map("absent", "default")
    after = scrape(admin)
    assert value(after, "apiserver_request", "apiserver_request_total", code="201", **CREATE) == (
        value(before, "apiserver_request", "apiserver_request_total", code="201", **CREATE) + 1
    )
    missing = {**CREATE, "verb": "GET", "code": "404"}
    assert value(after, "apiserver_request", "apiserver_request_total", **missing) >= 1
    # The duration and the SLI histograms count the call once each, in upstream's buckets; the SLI's
    # labels are the duration's without dry_run.
    sli = {k: v for k, v in CREATE.items() if k != "dry_run"}
    for family, labels, buckets in (
        ("apiserver_request_duration_seconds", CREATE, DURATION_BUCKETS),
        ("apiserver_request_sli_duration_seconds", sli, SLI_BUCKETS),
    ):
        count = f"{family}_count"
        assert value(after, family, count, **labels) == value(before, family, count, **labels) + 1
        bounds = [
            s.labels["le"]
            for s in after[family].samples
            if s.name.endswith("_bucket") and all(s.labels.get(k) == v for k, v in labels.items())
        ]
        assert [float(b) for b in bounds[:-1]] == list(buckets) and bounds[-1] == "+Inf"
    upstream = "0.05 0.1 0.2 0.4 0.6 0.8 1 1.25 1.5 2 3 4 5 6 8 10 15 20 30 45 60"
    assert SLI_BUCKETS == tuple(float(b) for b in upstream.split())
    # A server-side apply is APPLY; a dry run says so.
    v1.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="m2")), dry_run="All"
    )
    dry = scrape(admin)
    assert (
        value(dry, "apiserver_request", "apiserver_request_total", code="201", **{**CREATE, "dry_run": "All"})
        == 1
    )
    # Non-resource paths are counted by their path; upstream has no _created series.
    assert value(dry, "apiserver_request", "apiserver_request_total", verb="GET", subresource="/metrics") >= 2
    assert not any(s.name.endswith("_created") for f in dry.values() for s in f.samples)
    stored = value(dry, "apiserver_storage_objects", "apiserver_storage_objects", resource="configmaps")
    assert stored >= 1


def test_an_open_watch_is_a_long_running_request(server: ApiServer) -> None:
    admin = server.api_client()
    labels = {
        "verb": "WATCH",
        "group": "",
        "version": "v1",
        "resource": "configmaps",
        "scope": "namespace",
        "component": "apiserver",
        "subresource": "",
    }
    name = "apiserver_longrunning_requests"
    assert value(scrape(admin), name, name, **labels) == 0
    resp = client.CoreV1Api(admin).list_namespaced_config_map(
        "default", watch=True, timeout_seconds=60, _preload_content=False
    )
    try:
        deadline = time.monotonic() + 10
        while value(scrape(admin), name, name, **labels) != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert value(scrape(admin), name, name, **labels) == 1
    finally:
        resp.close()
        resp.release_conn()
    deadline = time.monotonic() + 20
    while value(scrape(admin), name, name, **labels) != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert value(scrape(admin), name, name, **labels) == 0
    ended = scrape(admin)
    assert value(ended, "apiserver_request", "apiserver_request_total", code="200", **labels) >= 1


def test_metrics_are_for_system_monitoring(server: ApiServer, tmp_path: Path) -> None:
    monitor = api_client(
        server.client_kubeconfig("prom", ("system:monitoring",), tmp_path / "prom.kubeconfig")
    )
    assert "apiserver_request_total" in {s.name for f in scrape(monitor).values() for s in f.samples}
    alice = api_client(server.client_kubeconfig("alice", (), tmp_path / "alice.kubeconfig"))
    with pytest.raises(Refused) as refusal:
        scrape(alice)
    assert refusal.value.status == 403
    assert json.loads(refusal.value.body)["message"] == 'forbidden: User "alice" cannot get path "/metrics"'
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(alice).list_namespaced_secret("default")
    assert err.value.status == 403
    after = scrape(server.api_client())
    refused = {"verb": "LIST", "resource": "secrets", "code": "403"}
    assert value(after, "apiserver_request", "apiserver_request_total", **refused) == 0


# Every family a dashboard reads, with upstream's label names (histograms: beside `le`).
REQUEST_LABELS = {"verb", "group", "version", "resource", "subresource", "scope", "component"}
FAMILIES = {
    "apiserver_request_total": REQUEST_LABELS | {"dry_run", "code"},
    "apiserver_request_duration_seconds_bucket": REQUEST_LABELS | {"dry_run", "le"},
    "apiserver_request_sli_duration_seconds_bucket": REQUEST_LABELS | {"le"},
    "apiserver_response_sizes_bucket": REQUEST_LABELS | {"le"},
    "apiserver_current_inflight_requests": {"request_kind"},
    "apiserver_longrunning_requests": REQUEST_LABELS,
    "apiserver_watch_events_total": {"group", "version", "kind"},
    "apiserver_watch_events_sizes_bucket": {"group", "version", "kind", "le"},
    "apiserver_storage_objects": {"resource"},
    "etcd_request_duration_seconds_bucket": {"operation", "type", "le"},
    "apiserver_admission_step_admission_duration_seconds_bucket": {"type", "operation", "rejected", "le"},
    "apiserver_admission_controller_admission_duration_seconds_bucket": {
        "name",
        "type",
        "operation",
        "rejected",
        "le",
    },
    "apiserver_admission_webhook_admission_duration_seconds_bucket": {
        "name",
        "type",
        "operation",
        "rejected",
        "le",
    },
    "apiserver_flowcontrol_dispatched_requests_total": {"priority_level", "flow_schema"},
    "apiserver_flowcontrol_current_executing_requests": {"priority_level", "flow_schema"},
    "apiserver_flowcontrol_current_executing_seats": {"priority_level", "flow_schema"},
    "apiserver_flowcontrol_request_execution_seconds_bucket": {"priority_level", "flow_schema", "type", "le"},
    "apiserver_flowcontrol_request_wait_duration_seconds_bucket": {
        "priority_level",
        "flow_schema",
        "execute",
        "le",
    },
    "apiserver_flowcontrol_nominal_limit_seats": {"priority_level"},
    "process_cpu_seconds_total": set(),
    "process_resident_memory_bytes": set(),
    "process_open_fds": set(),
    "process_start_time_seconds": set(),
}


def samples(families: dict[str, Any], metric: str, /, **labels: str) -> list[Any]:
    return [
        s
        for f in families.values()
        for s in f.samples
        if s.name == metric and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def total(families: dict[str, Any], metric: str, /, **labels: str) -> float:
    return sum(s.value for s in samples(families, metric, **labels))


WEBHOOK = "probe.metrics.example.com"


def test_every_standard_family_moves_with_upstreams_labels(server: ApiServer) -> None:
    """After real requests (a create that passes admission and a webhook whose call fails open, a get, a
    list, a watch), every family is served with upstream's label names and the values moved."""
    admin = server.api_client()
    v1 = client.CoreV1Api(admin)
    hooks = client.AdmissionregistrationV1Api(admin)
    hooks.create_validating_webhook_configuration(
        {
            "metadata": {"name": "metrics-probe"},
            "webhooks": [
                {
                    "name": WEBHOOK,
                    "clientConfig": {"url": "https://127.0.0.1:1/validate"},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ],
                    "failurePolicy": "Ignore",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 1,
                }
            ],
        }
    )
    try:
        before = scrape(admin)
        webhook = "apiserver_admission_webhook_admission_duration_seconds_count"
        called = {"name": WEBHOOK, "type": "validating", "operation": "CREATE", "rejected": "false"}
        deadline = time.monotonic() + 20
        n = 0
        while total(scrape(admin), webhook, **called) == 0 and time.monotonic() < deadline:
            n += 1
            v1.create_namespaced_config_map("default", {"metadata": {"name": f"family-{n}"}})
        v1.read_namespaced_config_map("family-1", "default")
        v1.list_namespaced_config_map("default")
        seen = 0
        stream = watch.Watch()
        for _ in stream.stream(v1.list_namespaced_config_map, "default", timeout_seconds=5):
            seen += 1
            stream.stop()
        assert seen == 1
        after = scrape(admin)
    finally:
        hooks.delete_validating_webhook_configuration("metrics-probe")
    for name, labels in FAMILIES.items():
        found = samples(after, name)
        assert found, f"{name} is missing"
        assert all(set(s.labels) == labels for s in found), (name, found[0].labels)
    assert total(after, webhook, **called) >= 1

    def grew(metric: str, /, **labels: str) -> bool:
        return total(after, metric, **labels) > total(before, metric, **labels)

    created = {"operation": "CREATE", "rejected": "false"}
    assert grew("apiserver_admission_step_admission_duration_seconds_count", type="admit", **created)
    assert grew("apiserver_admission_step_admission_duration_seconds_count", type="validate", **created)
    assert grew(
        "apiserver_admission_controller_admission_duration_seconds_count",
        name="NamespaceLifecycle",
        type="admit",
        **created,
    )
    assert grew("etcd_request_duration_seconds_count", operation="create", type="configmaps")
    reads = {"group": "", "version": "v1", "resource": "configmaps", "component": "apiserver"}
    assert grew("apiserver_response_sizes_count", verb="GET", scope="resource", **reads)
    assert grew("apiserver_response_sizes_count", verb="LIST", scope="namespace", **reads)
    assert total(after, "apiserver_response_sizes_sum", verb="LIST", scope="namespace", **reads) > 0
    assert grew("apiserver_watch_events_total", group="", version="v1", kind="ConfigMap")
    assert grew("apiserver_watch_events_sizes_count", group="", version="v1", kind="ConfigMap")
    assert grew("apiserver_flowcontrol_request_execution_seconds_count", type="regular")
    assert grew("apiserver_flowcontrol_request_execution_seconds_count", type="watch")
    # The scrape itself is a read in flight.
    assert total(after, "apiserver_current_inflight_requests", request_kind="readOnly") >= 1
    assert grew("process_cpu_seconds_total")
    sizes = sorted({float(s.labels["le"]) for s in samples(after, "apiserver_response_sizes_bucket")})
    assert sizes == [1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, float("inf")]
    watch_sizes = sorted(
        {float(s.labels["le"]) for s in samples(after, "apiserver_watch_events_sizes_bucket")}
    )
    assert watch_sizes == [1024.0 * 2**i for i in range(8)] + [float("inf")]


# -- the labelling rules, without a server ----------------------------------------------------------------


def _request(method: str, path: str, headers: dict[str, str] | None = None):
    from aiohttp.test_utils import make_mocked_request

    return make_mocked_request(method, path, headers=headers or {})


def _families(m) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(m.exposition().decode())}


async def test_labels_follow_upstreams_rules() -> None:
    from aiohttp import web

    from controlplane.apiserver.metrics import ApiServerMetrics, mark

    m = ApiServerMetrics()
    ok = web.Response(status=200)

    async def served(request, verb, ns="default", name="x", sub="", connects=False, status=200):
        async def handler(req):
            mark(req, verb, "apps", "v1", "deployments", sub, ns, name, connects)
            return web.Response(status=status)

        await m.middleware(request, handler)

    await served(
        _request(
            "PATCH",
            "/apis/apps/v1/namespaces/default/deployments/x?dryRun=All",
            {"Content-Type": "application/apply-patch+yaml"},
        ),
        "patch",
    )
    await served(_request("GET", "/apis/apps/v1/deployments"), "list", ns="", name="")
    await served(_request("GET", "/apis/apps/v1/deployments/x"), "get", ns="")
    await served(_request("GET", "/apis/apps/v1/namespaces/default/deployments"), "list", name="")
    await served(_request("POST", "/apis/apps/v1/namespaces/default/deployments"), "create", name="")
    await served(
        _request("POST", "/api/v1/namespaces/default/pods/x/exec"), "create", sub="exec", connects=True
    )

    async def plain(req):
        return ok

    async def missing(req):
        raise web.HTTPNotFound()

    await m.middleware(_request("GET", "/healthz"), plain)
    await m.middleware(_request("GET", "/apis/apps/v1"), plain)
    with pytest.raises(web.HTTPNotFound):
        await m.middleware(_request("GET", "/nothing-here"), missing)
    await m.middleware(
        _request("GET", "/api/v1/namespaces/default/pods/x"), plain
    )  # never marked: refused early
    totals = {
        (s.labels["verb"], s.labels["dry_run"], s.labels["scope"], s.labels["subresource"], s.labels["code"])
        for s in _families(m)["apiserver_request"].samples
    }
    assert totals == {
        ("APPLY", "All", "resource", "", "200"),
        ("LIST", "", "cluster", "", "200"),
        ("GET", "", "resource", "", "200"),
        ("LIST", "", "namespace", "", "200"),
        ("POST", "", "resource", "", "200"),  # a create is a single-object call, named or not
        ("CONNECT", "", "resource", "exec", "200"),
        ("GET", "", "", "/healthz", "200"),
        ("GET", "", "", "/apis/apps/v1", "200"),
    }


async def test_long_running_requests_are_counted_while_they_run() -> None:
    import asyncio

    from aiohttp import web

    from controlplane.apiserver.metrics import ApiServerMetrics, mark

    m = ApiServerMetrics()
    release = asyncio.Event()

    async def watch(req):
        mark(req, "watch", "", "v1", "pods", "", "default", "", False)
        await release.wait()
        return web.Response()

    task = asyncio.create_task(
        m.middleware(_request("GET", "/api/v1/namespaces/default/pods?watch=1"), watch)
    )
    while not m.inflight:
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    (sample,) = _families(m)["apiserver_longrunning_requests"].samples
    assert (sample.labels["verb"], sample.labels["resource"], sample.value) == ("WATCH", "pods", 1)
    release.set()
    await task
    (sample,) = _families(m)["apiserver_longrunning_requests"].samples
    assert sample.value == 0  # closed: the series stays, at 0, as a child of upstream's gauge vec


async def test_the_sli_leaves_out_webhooks_and_the_priority_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    """apiserver_request_sli_duration_seconds is the request's duration less its mutating webhooks (called
    in turn: summed), its validating webhooks (called in parallel: the longest) and its wait in a
    priority level's queue, as upstream's LatencyTrackers subtract them; the duration keeps them all."""
    import asyncio

    from aiohttp import web

    from controlplane.apiserver import latencytrackers, metrics
    from controlplane.apiserver.metrics import ApiServerMetrics, mark

    clock = [100.0]
    monkeypatch.setattr(metrics.time, "perf_counter", lambda: clock[0])
    m = ApiServerMetrics()

    async def validating(seconds: float) -> None:
        latencytrackers.webhook(False, seconds)

    async def handler(req):
        mark(req, "create", "", "v1", "configmaps", "", "default", "", False)
        latencytrackers.apf_wait(0.25)
        latencytrackers.webhook(True, 0.3)
        latencytrackers.webhook(True, 0.2)
        await asyncio.gather(validating(0.4), validating(0.7))  # each in its own task, as dispatched
        clock[0] += 2.0
        return web.Response(status=201)

    await m.middleware(_request("POST", "/api/v1/namespaces/default/configmaps"), handler)
    families = _families(m)
    labels = {"verb": "POST", "resource": "configmaps", "scope": "resource"}
    (duration,) = samples(families, "apiserver_request_duration_seconds_sum", **labels)
    (sli,) = samples(families, "apiserver_request_sli_duration_seconds_sum", **labels)
    assert duration.value == 2.0
    assert sli.value == pytest.approx(2.0 - 0.25 - (0.3 + 0.2) - 0.7)
    buckets = {
        s.labels["le"]: s.value for s in samples(families, "apiserver_request_sli_duration_seconds_bucket")
    }
    assert (buckets["0.4"], buckets["0.6"]) == (0.0, 1.0)  # 0.55 s
    assert "dry_run" not in sli.labels
    # Outside a request nothing is tracked, and nothing fails.
    latencytrackers.webhook(True, 1.0)
    latencytrackers.apf_wait(1.0)


def test_a_webhooks_time_is_out_of_the_sli_but_in_the_duration(server: ApiServer, tmp_path: Path) -> None:
    """Through the real server: a create whose validating webhook never answers (the call times out after
    its 1 s, failing open) lasts over a second, and the SLI leaves that second out."""
    from tests.controlplane.webhookserver import serving

    admin = server.api_client()
    v1 = client.CoreV1Api(admin)
    hooks = client.AdmissionregistrationV1Api(admin)
    labels = {"verb": "POST", "resource": "configmaps", "scope": "resource"}
    with serving(tmp_path) as hook_server:
        hooks.create_validating_webhook_configuration(
            {
                "metadata": {"name": "sli-hang"},
                "webhooks": [
                    {
                        "name": "hang.sli.example.com",
                        "clientConfig": {"url": hook_server.url("/hang"), "caBundle": hook_server.ca_bundle},
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["configmaps"],
                            }
                        ],
                        "objectSelector": {"matchLabels": {"sli": "hang"}},
                        "failurePolicy": "Ignore",
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 1,
                    }
                ],
            }
        )
        try:
            deadline = time.monotonic() + 20
            n = 0
            while not hook_server.got("/hang") and time.monotonic() < deadline:  # the webhook is in force
                n += 1
                before = scrape(admin)
                v1.create_namespaced_config_map(
                    "default", {"metadata": {"name": f"sli-hang-{n}", "labels": {"sli": "hang"}}}
                )
                after = scrape(admin)
        finally:
            hooks.delete_validating_webhook_configuration("sli-hang")
    assert hook_server.got("/hang")
    took = total(after, "apiserver_request_duration_seconds_sum", **labels) - total(
        before, "apiserver_request_duration_seconds_sum", **labels
    )
    sli = total(after, "apiserver_request_sli_duration_seconds_sum", **labels) - total(
        before, "apiserver_request_sli_duration_seconds_sum", **labels
    )
    assert took >= 1.0, took
    assert 0 <= sli <= took - 0.9, (sli, took)
