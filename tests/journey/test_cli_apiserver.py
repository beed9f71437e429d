"""`pykubelet trace` and `pykubelet diagnose` as a user runs them, against the real API server alone
(no agent, no scheduler: this test writes what they would): the JSON of a pod's journey, --follow
printing a step as it happens and ending on Ctrl-C, and the request-side boundaries (the API unreachable,
credentials refused, RBAC forbidding the reads, the object missing) with their exit statuses."""

from __future__ import annotations

import datetime as dt
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.process import free_port

pytestmark = pytest.mark.integration
NS = "default"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("journey-api")) as api:
        yield api


def cmd(kubeconfig: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "pykubelet.cli", *args, "--kubeconfig", str(kubeconfig), "-n", NS]


def run(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd(kubeconfig, *args), capture_output=True, text=True, timeout=60, env=env)


def make_pod(server: ApiServer, name: str) -> None:
    from kubernetes import client

    with server.api_client() as api:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }
        client.CoreV1Api(api).create_namespaced_pod(NS, body, field_manager="kubectl-create")


def mark_ready(server: ApiServer, name: str) -> None:
    from kubernetes import client

    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with server.api_client() as api:
        v1 = client.CoreV1Api(api)
        v1.create_namespaced_binding(
            NS,
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name},
                "target": {"kind": "Node", "name": "n1"},
            },
            _preload_content=False,
        )
        v1.patch_namespaced_pod_status(
            name,
            NS,
            {
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
                }
            },
            field_manager="kubelet",
        )


def test_trace_json_of_a_pod(server: ApiServer) -> None:
    make_pod(server, "solo")
    done = run(server.kubeconfig, "trace", "pod/solo", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    created = out["steps"][0]
    assert (created["object"], created["what"], created["writer"], created["manager"]) == (
        "Pod solo",
        "created",
        "user",
        "kubectl-create",
    )
    assert created["exact"] is False and "approximate" in out["approximate"]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_follow_prints_new_steps_until_interrupted(server: ApiServer, inherited: str) -> None:
    """Ctrl-C ends --follow, also when the command was started with SIGINT ignored (as a shell starts a
    background job): kubectl, a Go program, hears SIGINT whatever it inherited."""
    name = f"followed-{inherited}"
    make_pod(server, name)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        cmd(server.kubeconfig, "trace", f"pod/{name}", "--follow"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_ignore_sigint if inherited == "ignored" else None,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    try:
        first = lines.get(timeout=30)
        assert f"Pod {name} created by user" in first
        while "approximate" not in lines.get(timeout=30):  # the initial timeline ends with its note
            pass
        mark_ready(server, name)
        seen = []
        while not any("Ready=True" in s for s in seen):
            seen.append(lines.get(timeout=30))
        assert any(f"Pod {name} Ready=True by kubelet" in s for s in seen), seen
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()  # never left behind for the session's leak check to blame on a later test
            proc.wait()
            raise
    assert code == 130, proc.stderr.read() if proc.stderr else ""


def test_errors_and_request_side_boundaries(server: ApiServer, tmp_path: Path) -> None:
    done = run(server.kubeconfig, "trace", "gizmo/x")
    assert done.returncode == 2 and 'unknown kind "gizmo"' in done.stderr
    done = run(server.kubeconfig, "diagnose", "deploy/missing")
    assert (done.returncode, done.stdout.strip()) == (
        2,
        "cannot tell: deployments.apps missing not found in namespace default",
    )

    doc = yaml.safe_load(server.kubeconfig.read_text())
    doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    (tmp_path / "down.kubeconfig").write_text(yaml.safe_dump(doc))
    done = run(tmp_path / "down.kubeconfig", "diagnose", "pod/solo")
    assert done.returncode == 1 and done.stdout.startswith("stalled at: api - cannot reach"), done.stdout

    doc = yaml.safe_load(server.kubeconfig.read_text())
    doc["users"][0]["user"] = {"token": "not-a-token"}
    (tmp_path / "bad.kubeconfig").write_text(yaml.safe_dump(doc))
    done = run(tmp_path / "bad.kubeconfig", "diagnose", "pod/solo")
    assert done.returncode == 1 and done.stdout.startswith("stalled at: authentication"), done.stdout

    nobody = server.client_kubeconfig("journey-nobody", (), tmp_path / "nobody.kubeconfig")
    done = run(nobody, "diagnose", "pod/solo", "--json")
    verdict = json.loads(done.stdout)
    assert done.returncode == 1 and verdict["boundary"] == "authorization", verdict
    assert verdict["summary"] == "stalled at: authorization - journey-nobody may not get pods/solo -n default"


def test_trace_reaches_a_cluster_through_an_exec_plugin_and_a_kubeconfig_list(
    server: ApiServer, tmp_path: Path
) -> None:
    """As on EKS, GKE or AKS: no --kubeconfig, $KUBECONFIG lists two files (the exec user and its context,
    then the cluster), and the user's token comes from a credential plugin."""
    import asyncio

    from tests.kubeclient.execplugin import credential, plugin_kubeconfig, service_account_token

    make_pod(server, "cloud")
    token = asyncio.run(service_account_token(server, "journey-exec", cluster_role="cluster-admin"))
    listed = plugin_kubeconfig(tmp_path, server.kubeconfig)
    credential(tmp_path / "state", token)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KUBECONFIG": listed}
    command = [sys.executable, "-m", "pykubelet.cli", "trace", "pod/cloud", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["steps"][0]["object"] == "Pod cloud"
    assert int((tmp_path / "state" / "runs").read_text()) == 1


def test_diagnose_names_a_pods_network_policies_and_an_ingress_without_a_class(server: ApiServer) -> None:
    """Through the API only: the NetworkPolicies selecting a pod, each direction's isolation; an Ingress
    whose IngressClass does not exist stalls at routes (no controller would serve it)."""
    from kubernetes import client

    make_pod(server, "policed")
    mark_ready(server, "policed")
    deny = {
        "metadata": {"name": "deny-policed"},
        "spec": {"podSelector": {"matchLabels": {"app": "policed"}}},
    }
    route = {
        "metadata": {"name": "classless"},
        "spec": {
            "ingressClassName": "no-such-class",
            "defaultBackend": {"service": {"name": "policed", "port": {"number": 80}}},
        },
    }
    with server.api_client() as api:
        net = client.NetworkingV1Api(api)
        net.create_namespaced_network_policy(NS, deny)
        net.create_namespaced_ingress(NS, route)
    done = run(server.kubeconfig, "diagnose", "pod/policed", "--json", "--no-dataplane")
    verdict = json.loads(done.stdout)
    [found] = [f for f in verdict["findings"] if f["boundary"] == "network policy"]
    assert found["message"] == (
        "pod policed: selected by NetworkPolicy deny-policed; ingress default deny (deny-policed), "
        "egress not isolated"
    ), verdict
    done = run(server.kubeconfig, "diagnose", "ingress/classless", "--no-dataplane")
    assert (done.returncode, done.stdout.splitlines()[0]) == (
        1,
        "stalled at: routes - Ingress classless: IngressClass no-such-class does not exist",
    ), done.stdout + done.stderr
