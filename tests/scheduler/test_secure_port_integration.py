"""The scheduler's secure port as kube-scheduler serves it (10259 upstream; a free one here): HTTPS,
/healthz /livez /readyz open to anonymous callers, /metrics only for callers the API server authorizes
for a nonResourceURL `get` on it (401 anonymous, 403 with upstream's message for a user without the
permission, whether known by client certificate or by bearer token), and scheduler_* series with
upstream's names and labels counting what it did."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.waiting import wait_for
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.process import free_port

pytestmark = pytest.mark.integration


def get(url: str, cert: tuple[Path, Path] | None = None, token: str = "") -> tuple[int, str]:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(*cert)
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


@pytest.fixture
def scheduler_port(apiserver: ApiServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "pykubelet",
        "scheduler",
        "--kubeconfig",
        str(apiserver.scheduler_kubeconfig),
        "--secure-port",
        str(port),
        "--bind-address",
        "127.0.0.1",
        "--cert-dir",
        str(tmp_path / "pki"),
        "--client-ca-file",
        str(apiserver.ca_cert),
    ]
    log = tmp_path / "scheduler.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        print(log.read_text(errors="replace")[-4000:])


def test_health_is_open_and_metrics_are_authorized(apiserver, scheduler_port, cluster, v1, tmp_path) -> None:
    base = f"https://127.0.0.1:{scheduler_port}"
    wait_for(lambda: get(f"{base}/healthz")[0] == 200, what="healthz", timeout=30, interval=0.1)
    for path in ("/healthz", "/livez", "/readyz"):
        assert get(base + path) == (200, "ok")

    assert get(f"{base}/metrics")[0] == 401
    nobody = apiserver.client_kubeconfig("nobody", (), tmp_path / "nobody.kubeconfig")
    status, body = get(f"{base}/metrics", (nobody.parent / "nobody.crt", nobody.parent / "nobody.key"))
    assert status == 403
    assert json.loads(body)["message"] == 'forbidden: User "nobody" cannot get path "/metrics"'
    # A bearer token is reviewed by the API server (TokenReview): a service account without the permission.
    v1.create_namespaced_service_account(cluster.namespace, {"metadata": {"name": "reader"}})
    token = v1.create_namespaced_service_account_token(
        "reader", cluster.namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token
    status, body = get(f"{base}/metrics", token=token)
    assert status == 403
    assert json.loads(body)["message"] == (
        f'forbidden: User "system:serviceaccount:{cluster.namespace}:reader" cannot get path "/metrics"'
    )

    node = cluster.add_node("metrics")
    cluster.create(cluster.pod("fits"))
    cluster.create(cluster.pod("too-big", cpu="64"))
    assert cluster.wait_bound("fits") == node
    cluster.wait_unschedulable("too-big")
    admin = (apiserver.data_dir / "pki" / "admin.crt", apiserver.data_dir / "pki" / "admin.key")

    def families() -> dict:  # type: ignore[type-arg]
        status, text = get(f"{base}/metrics", admin)
        assert status == 200
        return {f.name: f for f in text_string_to_metric_families(text)}

    def value(family: str, sample: str, **labels: str) -> float:
        return sum(
            s.value
            for s in families()[family].samples
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
        )

    profile = {"profile": "default-scheduler"}
    wait_for(
        lambda: (
            value(
                "scheduler_schedule_attempts",
                "scheduler_schedule_attempts_total",
                result="scheduled",
                **profile,
            )
            >= 1
            and value(
                "scheduler_schedule_attempts",
                "scheduler_schedule_attempts_total",
                result="unschedulable",
                **profile,
            )
            >= 1
        ),
        what="attempts counted",
        timeout=30,
        interval=0.2,
    )
    got = families()
    assert (
        value(
            "scheduler_scheduling_attempt_duration_seconds",
            "scheduler_scheduling_attempt_duration_seconds_count",
            result="scheduled",
            **profile,
        )
        >= 1
    )
    assert (
        value(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "scheduler_pod_scheduling_sli_duration_seconds_count",
            attempts="1",
        )
        >= 1
    )
    assert value("scheduler_pending_pods", "scheduler_pending_pods", queue="unschedulable") >= 1
    assert {s.labels["queue"] for s in got["scheduler_pending_pods"].samples} == {
        "active",
        "backoff",
        "unschedulable",
        "gated",
    }
    # Extension points every cycle, by profile; plugin durations in the sampled cycles, the first
    # ("fits", popped first) among them.
    points = "scheduler_framework_extension_point_duration_seconds"
    assert value(points, f"{points}_count", extension_point="PreFilter", status="Success", **profile) >= 2
    assert value(points, f"{points}_count", extension_point="Bind", status="Success", **profile) >= 1
    assert (
        value(points, f"{points}_count", extension_point="PostFilter", status="Unschedulable", **profile) >= 1
    )
    assert not any(s.labels.get("extension_point") == "Filter" for s in got[points].samples)  # per node
    plugins = "scheduler_plugin_execution_duration_seconds"
    fit = {"plugin": "NodeResourcesFit", "extension_point": "Filter", "status": "Success"}
    assert value(plugins, f"{plugins}_count", **fit) >= 1
    assert (
        value(plugins, f"{plugins}_count", plugin="DefaultBinder", extension_point="Bind", status="Success")
        >= 1
    )
    assert not any(s.name.endswith("_created") for f in got.values() for s in f.samples)
