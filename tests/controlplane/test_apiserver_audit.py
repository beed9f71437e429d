"""The audit log on the real API server (`pykubelet server --audit-policy-file --audit-log-path`): every
request of a scenario (create, get, list, watch, patch, delete, a 403, a 404, impersonation, a failed
authentication, a non-resource path) appears with the level and stages the policy gives it, a Secret's
data never appears at Metadata level, omitStages holds, the log rotates at maxsize keeping maxbackup
files, nothing buffered is lost on a clean stop, and a bad policy stops the start with a clear message."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import urllib3
from kubernetes import client

from pykubelet.rig.apiserver import ApiServer, api_client

pytestmark = pytest.mark.integration

POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*"]
- level: Metadata
  resources: [{group: "", resources: [secrets]}]
- level: RequestResponse
  resources: [{group: "", resources: [configmaps]}]
  omitStages: [RequestReceived]
  omitManagedFields: true
- level: Request
  resources: [{group: "", resources: [pods]}]
- level: Metadata
"""
MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(
    path: Path, ids: list[str], stage: str = "ResponseComplete", timeout: float = 10.0
) -> dict[str, list[dict[str, Any]]]:
    """The events of each audit ID, once each has its `stage` (the writer is asynchronous)."""
    deadline = time.monotonic() + timeout
    while True:
        found: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
        if path.exists():
            for ev in events(path):
                if ev["auditID"] in found:
                    found[ev["auditID"]].append(ev)
        if all(any(e["stage"] == stage for e in evs) for evs in found.values()):
            return found
        if time.monotonic() > deadline:
            missing = [i for i, evs in found.items() if not any(e["stage"] == stage for e in evs)]
            pytest.fail(f"no {stage} event for {missing} in {path}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    d = tmp_path_factory.mktemp("audited")
    (d / "policy.yaml").write_text(POLICY)
    server = ApiServer(
        d / "server",
        extra_args=[
            "--audit-policy-file",
            str(d / "policy.yaml"),
            "--audit-log-path",
            str(d / "log" / "audit.log"),
        ],
    )
    server.start()
    yield server
    server.stop()


def log_path(server: ApiServer) -> Path:
    return server.data_dir.parent / "log" / "audit.log"


def call(
    api: client.ApiClient,
    method: str,
    path: str,
    audit_id: str,
    body: Any = None,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
    query: list[tuple[str, str]] | None = None,
) -> tuple[int, dict[str, str]]:
    """One raw request with our own Audit-ID; its status and response headers."""
    hdrs = {
        "Accept": "application/json",
        "Content-Type": content_type,
        "Audit-ID": audit_id,
        **(headers or {}),
    }
    url = api.configuration.host + path + ("?" + urlencode(query) if query else "")
    data = None if body is None else json.dumps(body)
    resp = api.rest_client.pool_manager.request(method, url, body=data, headers=hdrs, preload_content=True)
    return resp.status, dict(resp.headers)


def test_scenario_appears_at_its_levels_and_stages(audited: ApiServer, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    ns = f"audit-{tag}"
    secret_value = f"s3cr3t-{tag}-value"
    ids: dict[str, str] = {}

    def aid(step: str) -> str:
        ids[step] = f"{tag}-{step}"
        return ids[step]

    with audited.api_client() as api:
        status, headers = call(api, "POST", "/api/v1/namespaces", aid("ns"), {"metadata": {"name": ns}})
        assert status == 201 and headers["Audit-Id"] == ids["ns"]  # an incoming Audit-ID is honoured
        cm = {"metadata": {"name": "cm"}, "data": {"k": "v1"}}
        assert call(api, "POST", f"/api/v1/namespaces/{ns}/configmaps", aid("create"), cm)[0] == 201
        assert call(api, "GET", f"/api/v1/namespaces/{ns}/configmaps/cm", aid("get"))[0] == 200
        assert call(api, "GET", f"/api/v1/namespaces/{ns}/configmaps", aid("list"))[0] == 200
        watch_query = [("watch", "true"), ("timeoutSeconds", "1")]
        assert (
            call(api, "GET", f"/api/v1/namespaces/{ns}/configmaps", aid("watch"), query=watch_query)[0] == 200
        )
        patch = {"data": {"k": "v2"}}
        assert call(api, "PATCH", f"/api/v1/namespaces/{ns}/configmaps/cm", aid("patch"), patch,
                    "application/merge-patch+json")[0] == 200  # fmt: skip
        assert call(api, "DELETE", f"/api/v1/namespaces/{ns}/configmaps/cm", aid("delete"))[0] == 200
        assert call(api, "GET", f"/api/v1/namespaces/{ns}/configmaps/missing", aid("404"))[0] == 404
        secret = {"metadata": {"name": "s"}, "stringData": {"password": secret_value}}
        assert call(api, "POST", f"/api/v1/namespaces/{ns}/secrets", aid("secret"), secret)[0] == 201
        assert call(api, "GET", f"/api/v1/namespaces/{ns}/secrets/s", aid("secret-get"))[0] == 200
        pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        assert call(api, "POST", f"/api/v1/namespaces/{ns}/pods", aid("pod"), pod)[0] == 201
        imp = {"Impersonate-User": "alice", "Impersonate-Group": "devs"}
        assert call(api, "GET", f"/api/v1/namespaces/{ns}/pods", aid("impersonated"), headers=imp)[0] == 403
        assert call(api, "GET", "/version", aid("version"))[0] == 200
    nobody = audited.client_kubeconfig("nobody", (), tmp_path / "nobody.kubeconfig")
    with api_client(nobody) as api:
        assert call(api, "GET", f"/api/v1/namespaces/{ns}/secrets", aid("403"))[0] == 403
    anonymous = urllib3.PoolManager(ca_certs=str(audited.ca_cert))
    resp = anonymous.request(
        "GET",
        f"{audited.url}/api/v1/namespaces",
        headers={"Authorization": "Bearer nope", "Audit-ID": aid("401")},
    )
    assert resp.status == 401

    path = log_path(audited)
    found = wait_for(path, [v for k, v in ids.items() if k != "401"])
    found |= wait_for(path, [ids["401"]], stage="ResponseStarted")
    for evs in found.values():
        for ev in evs:
            assert ev["kind"] == "Event" and ev["apiVersion"] == "audit.k8s.io/v1"
            assert MICRO.match(ev["requestReceivedTimestamp"]) and MICRO.match(ev["stageTimestamp"])
            assert ev["requestReceivedTimestamp"] <= ev["stageTimestamp"]
            assert ev["sourceIPs"] == ["127.0.0.1"] and ev["userAgent"]

    def only(step: str, stages: list[str], level: str) -> dict[str, Any]:
        evs = found[ids[step]]
        assert [e["stage"] for e in evs] == stages, (step, evs)
        assert {e["level"] for e in evs} == {level}, step
        return evs[-1]

    created = only("create", ["ResponseComplete"], "RequestResponse")  # RequestReceived omitted by the rule
    assert created["verb"] == "create" and created["requestURI"] == f"/api/v1/namespaces/{ns}/configmaps"
    assert created["user"]["username"] == "kubernetes-admin" or "system:masters" in created["user"]["groups"]
    assert created["objectRef"] == {
        "resource": "configmaps",
        "namespace": ns,
        "name": "cm",
        "apiVersion": "v1",
    }
    assert created["responseStatus"] == {"metadata": {}, "code": 201}
    assert created["requestObject"]["data"] == {"k": "v1"}
    assert (
        created["responseObject"]["metadata"]["uid"]
        and "managedFields" not in created["responseObject"]["metadata"]
    )
    assert created["annotations"]["authorization.k8s.io/decision"] == "allow"
    # system:masters is allowed before RBAC is asked, as upstream's privileged-group authorizer: no reason.
    assert created["annotations"]["authorization.k8s.io/reason"] == ""
    got = only("get", ["ResponseComplete"], "RequestResponse")
    assert (
        got["verb"] == "get" and got["responseObject"]["data"] == {"k": "v1"} and "requestObject" not in got
    )
    assert only("list", ["ResponseComplete"], "RequestResponse")["responseObject"]["kind"] == "ConfigMapList"
    watched = found[ids["watch"]]
    assert [e["stage"] for e in watched] == ["ResponseStarted", "ResponseComplete"] and watched[0][
        "verb"
    ] == "watch"
    assert watched[0]["responseStatus"]["code"] == 200
    patched = only("patch", ["ResponseComplete"], "RequestResponse")
    assert patched["requestObject"] == {"data": {"k": "v2"}} and patched["responseObject"]["data"] == {
        "k": "v2"
    }
    assert only("delete", ["ResponseComplete"], "RequestResponse")["verb"] == "delete"
    missing = only("404", ["ResponseComplete"], "RequestResponse")
    assert missing["responseStatus"]["code"] == 404 and missing["responseStatus"]["reason"] == "NotFound"
    assert missing["responseStatus"]["status"] == "Failure" and missing["objectRef"]["name"] == "missing"

    # Secrets at Metadata: both stages, the name known, no body either way.
    for step in ("secret", "secret-get"):
        ev = only(step, ["RequestReceived", "ResponseComplete"], "Metadata")
        assert "requestObject" not in ev and "responseObject" not in ev
        assert ev["objectRef"]["resource"] == "secrets" and ev["objectRef"]["name"] == "s"
    text = path.read_text()
    encoded = base64.b64encode(secret_value.encode()).decode()
    assert secret_value not in text and encoded not in text

    pod_ev = only("pod", ["RequestReceived", "ResponseComplete"], "Request")
    assert (
        pod_ev["requestObject"]["spec"]["containers"][0]["image"] == "busybox"
        and "responseObject" not in pod_ev
    )
    assert "requestObject" not in found[ids["pod"]][0]  # RequestReceived comes before the body is read

    imp_ev = only("impersonated", ["RequestReceived", "ResponseComplete"], "Request")
    assert imp_ev["impersonatedUser"] == {"username": "alice", "groups": ["devs", "system:authenticated"]}
    assert imp_ev["user"]["username"] != "alice" and imp_ev["responseStatus"]["code"] == 403
    assert imp_ev["annotations"]["authorization.k8s.io/decision"] == "forbid"

    forbidden = only("403", ["RequestReceived", "ResponseComplete"], "Metadata")
    assert forbidden["user"]["username"] == "nobody" and forbidden["verb"] == "list"
    assert forbidden["responseStatus"]["code"] == 403 and forbidden["responseStatus"]["reason"] == "Forbidden"
    assert forbidden["annotations"]["authorization.k8s.io/decision"] == "forbid"

    version = only("version", ["RequestReceived", "ResponseComplete"], "Metadata")
    assert "objectRef" not in version and version["verb"] == "get" and version["requestURI"] == "/version"

    unauth = only("401", ["ResponseStarted"], "Metadata")  # upstream's failed-authentication event
    assert unauth["user"] == {} and unauth["responseStatus"]["code"] == 401
    assert not any(
        e["requestURI"].startswith("/healthz") or e["requestURI"].startswith("/readyz") for e in events(path)
    )

    # upstream's audit metrics: every event written was counted, none dropped, levels per request.
    written = len(events(path))
    with audited.api_client() as api:
        url = api.configuration.host + "/metrics"
        text = api.rest_client.pool_manager.request("GET", url, preload_content=True).data.decode()
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("apiserver_audit_")
    }
    assert samples["apiserver_audit_event_total"] >= written
    assert samples['apiserver_audit_error_total{plugin="buffered"}'] == 0
    assert samples['apiserver_audit_level_total{level="RequestResponse"}'] >= 7
    assert samples['apiserver_audit_level_total{level="None"}'] >= 1  # the readiness checks


def test_an_audit_policy_action_annotates_the_event_and_admits(audited: ApiServer) -> None:
    """A ValidatingAdmissionPolicy bound with validationActions [Audit]: the write goes through, and its
    audit event carries upstream's `validation.policy.admission.k8s.io/validation_failure` annotation
    naming the policy, the binding, the failed expression's index and the message."""
    tag = uuid.uuid4().hex[:8]
    ns, policy, binding = f"vap-{tag}", f"audited-{tag}", f"audited-{tag}-binding"
    base = "/apis/admissionregistration.k8s.io/v1"
    with audited.api_client() as api:
        assert call(api, "POST", "/api/v1/namespaces", f"ns-{tag}", {"metadata": {"name": ns}})[0] == 201
        spec = {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["configmaps"],
                    }
                ]
            },
            "validations": [
                {"expression": "true"},
                {"expression": "object.metadata.name.startsWith('ok-')", "message": "names start with ok-"},
            ],
        }
        made = call(
            api,
            "POST",
            f"{base}/validatingadmissionpolicies",
            f"p-{tag}",
            {"metadata": {"name": policy}, "spec": spec},
        )
        assert made[0] == 201, made
        bound = {
            "policyName": policy,
            "validationActions": ["Audit"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}},
        }
        made = call(
            api,
            "POST",
            f"{base}/validatingadmissionpolicybindings",
            f"b-{tag}",
            {"metadata": {"name": binding}, "spec": bound},
        )
        assert made[0] == 201, made
        try:
            passing = call(
                api,
                "POST",
                f"/api/v1/namespaces/{ns}/configmaps",
                f"ok-{tag}",
                {"metadata": {"name": "ok-1"}},
            )
            failing = call(
                api,
                "POST",
                f"/api/v1/namespaces/{ns}/configmaps",
                f"bad-{tag}",
                {"metadata": {"name": "bad"}},
            )
            assert passing[0] == 201 and failing[0] == 201  # Audit never refuses
            found = wait_for(log_path(audited), [f"ok-{tag}", f"bad-{tag}"])
        finally:
            call(api, "DELETE", f"{base}/validatingadmissionpolicybindings/{binding}", f"db-{tag}")
            call(api, "DELETE", f"{base}/validatingadmissionpolicies/{policy}", f"dp-{tag}")
    key = "validation.policy.admission.k8s.io/validation_failure"
    done = next(e for e in found[f"bad-{tag}"] if e["stage"] == "ResponseComplete")
    assert json.loads(done["annotations"][key]) == [
        {
            "message": "names start with ok-",
            "policy": policy,
            "binding": binding,
            "expressionIndex": 1,
            "validationActions": ["Audit"],
        }
    ]
    ok = next(e for e in found[f"ok-{tag}"] if e["stage"] == "ResponseComplete")
    assert key not in (ok.get("annotations") or {})


def test_rotation_keeps_maxbackup_files_and_a_clean_stop_loses_nothing(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n"
        "- level: RequestResponse\n  resources: [{group: '', resources: [configmaps]}]\n  verbs: [create]\n"
    )
    log = tmp_path / "log" / "audit.log"
    args = ["--audit-policy-file", str(tmp_path / "policy.yaml"), "--audit-log-path", str(log),
            "--audit-log-maxsize", "1", "--audit-log-maxbackup", "2"]  # fmt: skip
    server = ApiServer(tmp_path / "server", extra_args=args).start()
    try:
        with server.api_client() as api:
            v1 = client.CoreV1Api(api)
            blob = "x" * (300 * 1024)  # each create's event carries it twice (request and response)
            for i in range(10):
                v1.create_namespaced_config_map(
                    "default",
                    client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"big-{i}"), data={"b": blob}),
                )
    finally:
        server.stop()
    backups = sorted(p for p in log.parent.iterdir() if p != log)
    assert len(backups) == 2, [p.name for p in backups]
    assert all(re.fullmatch(r"audit-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}\.log", p.name) for p in backups)
    for p in [*backups, log]:
        assert p.stat().st_size <= 1024 * 1024
    # The last create was answered just before the stop: its event was written on the way out.
    names = [e["objectRef"]["name"] for e in events(log)]
    assert names[-1] == "big-9"


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (None, 'loading audit policy file: failed to read file path "{path}": No such file or directory'),
        (
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n",
            'loading audit policy file: rules[0].level: Unsupported value: "Loud": supported values: "None", '
            '"Metadata", "Request", "RequestResponse": from file {path}',
        ),
    ],
)
def test_a_bad_policy_file_stops_the_start_with_a_clear_message(
    tmp_path: Path, policy: str | None, message: str
) -> None:
    path = tmp_path / "policy.yaml"
    if policy is not None:
        path.write_text(policy)
    proc = subprocess.run(
        [sys.executable, "-m", "pykubelet", "server", "--data-dir", str(tmp_path / "d"), "--port", "0",
         "--audit-policy-file", str(path), "--audit-log-path", str(tmp_path / "audit.log")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == "pykubelet server: " + message.format(path=path)
    assert not (tmp_path / "audit.log").exists()


def test_an_audit_log_that_cannot_be_made_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]\n"
    )
    (tmp_path / "file").write_text("not a directory")
    log = tmp_path / "file" / "audit.log"
    proc = subprocess.run(
        [sys.executable, "-m", "pykubelet", "server", "--data-dir", str(tmp_path / "d"), "--port", "0",
         "--audit-policy-file", str(tmp_path / "policy.yaml"), "--audit-log-path", str(log)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0
    assert (
        proc.stderr.strip().splitlines()[-1] == f"pykubelet server: --audit-log-path {log}: File exists"
    )  # its directory is a file


def test_the_webhook_backend_receives_event_lists(tmp_path: Path) -> None:
    """--audit-webhook-config-file: the events go to the webhook as audit.k8s.io/v1 EventLists."""
    import asyncio
    import base64

    import yaml
    from aiohttp import web

    from tests.controlplane.webhookserver import serving_in_thread

    class Receiver:
        def __init__(self, ca_pem: bytes) -> None:
            self.ca_pem = ca_pem
            self.port = 0
            self._stop: asyncio.Event | None = None
            self.lists: list[dict[str, Any]] = []

        async def _handle(self, request: web.Request) -> web.StreamResponse:
            self.lists.append(await request.json())
            return web.json_response({})

    (tmp_path / "policy.yaml").write_text(POLICY)
    with serving_in_thread(Receiver, tmp_path, "127.0.0.1", (), "audit webhook") as receiver:
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "w",
                    "cluster": {
                        "server": f"https://127.0.0.1:{receiver.port}/audit",
                        "certificate-authority-data": base64.b64encode(receiver.ca_pem).decode(),
                    },
                }
            ],
            "users": [{"name": "w", "user": {}}],
            "contexts": [{"name": "w", "context": {"cluster": "w", "user": "w"}}],
            "current-context": "w",
        }
        (tmp_path / "webhook.kubeconfig").write_text(yaml.safe_dump(kubeconfig))
        args = [
            "--audit-policy-file",
            str(tmp_path / "policy.yaml"),
            "--audit-webhook-config-file",
            str(tmp_path / "webhook.kubeconfig"),
        ]
        with ApiServer(tmp_path / "api", extra_args=args) as server, server.api_client() as api:
            from kubernetes import client

            client.CoreV1Api(api).create_namespaced_config_map("default", {"metadata": {"name": "hooked"}})
            deadline = time.monotonic() + 30
            while True:
                events = [e for lst in receiver.lists for e in lst["items"]]
                found = [
                    e
                    for e in events
                    if (e.get("objectRef") or {}).get("name") == "hooked" and e["stage"] == "ResponseComplete"
                ]
                if found:
                    break
                assert time.monotonic() < deadline, "no event reached the webhook"
                time.sleep(0.1)
        assert all(
            lst["kind"] == "EventList" and lst["apiVersion"] == "audit.k8s.io/v1" for lst in receiver.lists
        )
        assert found[0]["verb"] == "create" and found[0]["responseStatus"]["code"] == 201
