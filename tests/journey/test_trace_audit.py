"""`pykubelet trace` in audit-log mode against the real API server writing an audit log: every write
of a pod's journey (created by a user, bound by the scheduler's identity, two status writes by the
node's) is a step at the log's exact time with its writer; the two status writes both appear (managedFields
keep only the last); the Ready transition takes the time of the write that made it; the output says which
times are exact; the log beside the kubeconfig is found without --audit-log; bad input is refused."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from journey.auditlog import field_manager, parse_event
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.auditlog import STACK_POLICY

pytestmark = pytest.mark.integration
NS = "default"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    d = tmp_path_factory.mktemp("journey-audit")
    (d / "policy.yaml").write_text(STACK_POLICY)
    data = d / "server"
    args = ["--audit-policy-file", str(d / "policy.yaml"), "--audit-log-path", str(data / "audit.log")]
    with ApiServer(data, extra_args=args, service_account_admission=True) as api:
        from kubernetes import client

        with api.api_client() as c:  # no controllers run here: the accounts they would make
            v1 = client.CoreV1Api(c)
            v1.create_namespaced_service_account(NS, {"metadata": {"name": "default"}})
            v1.create_namespaced_service_account(
                "kube-system", {"metadata": {"name": "replicaset-controller"}}
            )
        yield api


def trace(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "pykubelet.cli", "trace", *args, "--kubeconfig", str(kubeconfig), "-n", NS]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)


def make_journey(server: ApiServer, name: str, tmp_path: Path) -> None:
    from kubernetes import client

    from pykubelet.rig.apiserver import api_client

    with server.api_client() as api:
        body = {"metadata": {"name": name}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
        client.CoreV1Api(api).create_namespaced_pod(NS, body, field_manager="kubectl-create")
    with api_client(server.scheduler_kubeconfig) as api:
        binding = {"metadata": {"name": name}, "target": {"kind": "Node", "name": "n1"}}
        client.CoreV1Api(api).create_namespaced_binding(NS, binding, _preload_content=False)
    node = server.client_kubeconfig("system:node:n1", ("system:nodes",), tmp_path / "node.kubeconfig")
    with api_client(node) as api:
        v1 = client.CoreV1Api(api)
        v1.patch_namespaced_pod_status(name, NS, {"status": {"phase": "Pending"}}, field_manager="kubelet")
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ready = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
        }
        v1.patch_namespaced_pod_status(name, NS, {"status": ready}, field_manager="kubelet")


def steps_of(server: ApiServer, name: str, *extra: str) -> dict:
    done = trace(server.kubeconfig, f"pod/{name}", "--json", *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_trace_reads_exact_times_and_writers_from_the_audit_log(server: ApiServer, tmp_path: Path) -> None:
    make_journey(server, "audited", tmp_path)
    log = server.data_dir / "audit.log"

    def complete() -> dict | None:
        out = steps_of(server, "audited")
        return out if sum(s["action"] == "status" for s in out["steps"]) == 2 else None

    out = None
    for _ in range(100):  # the log is written asynchronously: until both status writes are in it
        out = complete()
        if out is not None:
            break
    assert out is not None, steps_of(server, "audited")
    assert out["auditLog"] == str(log)  # found beside admin.kubeconfig without --audit-log
    steps = out["steps"]
    writes = [s for s in steps if s["action"] in ("created", "binding", "status")]
    assert [(s["action"], s["writer"], s["manager"], s["user"]) for s in writes] == [
        ("created", "user", "kubectl-create", "kubernetes-admin"),
        ("binding", "kube-scheduler", "OpenAPI-Generator", "system:kube-scheduler"),
        ("status", "kubelet", "kubelet", "system:node:n1"),
        ("status", "kubelet", "kubelet", "system:node:n1"),
    ], writes
    assert all(s["exact"] and "." in s["time"] for s in writes)
    assert all("rv " in s["detail"] for s in writes if s["action"] != "binding")
    times = [dt.datetime.fromisoformat(s["time"].replace("Z", "+00:00")) for s in writes]
    assert times == sorted(times)
    ready = next(s for s in steps if s["what"] == "Ready=True")
    assert ready["exact"] and ready["time"] == writes[-1]["time"]  # the write that made the transition
    assert "exact" in out["approximate"] and str(log) in out["approximate"]

    # The same log named explicitly; the API alone with a log that is not there is refused.
    assert steps_of(server, "audited", "--audit-log", str(log))["steps"] == steps
    missing = trace(server.kubeconfig, "pod/audited", "--audit-log", str(tmp_path / "none.log"))
    assert missing.returncode == 2 and f"--audit-log {tmp_path / 'none.log'}: no such file" in missing.stderr

    text = trace(server.kubeconfig, "pod/audited").stdout
    assert "Pod audited bound (binding) by kube-scheduler" in text and "audit log" in text, text


def diagnose(server: ApiServer, target: str) -> tuple[int, dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [
        sys.executable,
        "-m",
        "pykubelet.cli",
        "diagnose",
        target,
        "--json",
        "--kubeconfig",
        str(server.kubeconfig),
        "-n",
        NS,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode in (0, 1, 2), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_diagnose_names_an_admission_refusal_from_the_audit_log(server: ApiServer) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    body = {
        "metadata": {"name": "refused"},
        "spec": {"serviceAccountName": "nope", "containers": [{"name": "main", "image": "busybox"}]},
    }
    with server.api_client() as api:
        with pytest.raises(ApiException) as err:
            client.CoreV1Api(api).create_namespaced_pod(NS, body)
    assert err.value.status == 403
    verdict: dict = {}
    for _ in range(100):  # until the writer has put the refusal in the log
        code, verdict = diagnose(server, "pod/refused")
        if code == 1:
            break
    assert verdict["boundary"] == "admission", verdict
    assert (
        'error looking up service account default/nope: serviceaccount "nope" not found' in verdict["summary"]
    )
    assert "create pods/refused by kubernetes-admin refused (403)" in verdict["summary"]


def test_diagnose_checks_what_the_owning_controllers_identity_needs(server: ApiServer) -> None:
    from kubernetes import client

    labels = {"app": "rs1"}
    rs = {
        "metadata": {"name": "rs1"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    binding = "system:controller:replicaset-controller"
    with server.api_client() as api:
        client.AppsV1Api(api).create_namespaced_replica_set(NS, rs)
        code, verdict = diagnose(server, "rs/rs1")
        authz = next(f for f in verdict["findings"] if f["boundary"] == "authorization")
        assert authz["state"] == "ok", verdict
        user = "system:serviceaccount:kube-system:replicaset-controller"
        assert f"{user} may do what the journey needs" in authz["evidence"]
        rbac = client.RbacAuthorizationV1Api(api)
        saved = api.sanitize_for_serialization(rbac.read_cluster_role_binding(binding))
        rbac.delete_cluster_role_binding(binding)
        try:
            code, verdict = diagnose(server, "rs/rs1")
        finally:
            for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
                saved["metadata"].pop(key, None)
            rbac.create_cluster_role_binding(saved)
    assert code == 1 and verdict["boundary"] == "authorization", verdict
    assert verdict["summary"] == f"stalled at: authorization - {user} may not create pods -n {NS}"


def test_audit_events_a_write_becomes() -> None:
    ev = {
        "stage": "ResponseComplete",
        "verb": "create",
        "requestURI": "/api/v1/namespaces/d/pods?fieldManager=kubectl-create",
        "userAgent": "kubectl/v1.32.0 (linux/amd64)",
        "user": {"username": "alice"},
        "objectRef": {"resource": "pods", "namespace": "d", "apiVersion": "v1"},
        "responseStatus": {"code": 201},
        "responseObject": {"kind": "Pod", "metadata": {"name": "web-x", "uid": "u1", "resourceVersion": "7"}},
        "requestReceivedTimestamp": "2026-12-01T18:00:00.000100Z",
        "stageTimestamp": "2026-12-01T18:00:00.004200Z",
        "auditID": "a",
    }
    write = parse_event(ev)
    assert write is not None
    assert (write.name, write.uid, write.resource_version, write.manager, write.action) == (
        "web-x", "u1", "7", "kubectl-create", "created"
    )  # fmt: skip
    assert parse_event({**ev, "responseStatus": {"code": 409}}) is None
    assert parse_event({**ev, "stage": "RequestReceived"}) is None
    assert parse_event({**ev, "verb": "get"}) is None
    assert field_manager("/api/v1/pods", "kube-controller-manager/v1.32 (linux)") == "kube-controller-manager"
