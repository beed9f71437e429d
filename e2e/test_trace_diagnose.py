"""`pykubelet trace` and `pykubelet diagnose` through the API only, so they run unchanged on a genuine
cluster: a 3-replica Deployment behind a Service applied with kubectl is traced hop by hop (Deployment ->
ReplicaSet -> 3 Pods scheduled, started, Ready -> EndpointSlice) in causal order with non-negative gaps
and the right writers, its SVG has one lane per component, and diagnose calls it healthy; then broken
workloads, one at a time, each stalled at its boundary: an unsatisfiable nodeSelector (scheduling), an
image that does not exist and a missing Secret (runtime), a failing readiness probe (probes), a Service
selecting nothing (endpoints), a Service whose pods do not listen on its targetPort (dataplane: tried from
inside a pod), a node whose agent stopped (node: its Lease stale), a user RBAC gives
nothing (authorization), a webhook that is down (admission).
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import manifests
from e2e.waiting import wait_for

pytestmark = pytest.mark.integration

SERVE = "mkdir -p /www && echo ok > /www/healthz && exec httpd -f -p 8080 -h /www"
SVG = "{http://www.w3.org/2000/svg}"


def kubectl_apply(kubeconfig: Path, namespace: str, *docs: dict[str, Any]) -> None:
    manifest = "\n---\n".join(yaml.safe_dump(d) for d in docs)
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace, "apply", "-f", "-"],
        input=manifest,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def pykubelet(kubeconfig: Path, namespace: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pykubelet.cli", *args, "--kubeconfig", str(kubeconfig), "-n", namespace],
        capture_output=True,
        text=True,
        timeout=60,
    )


def deployment(name: str, image: str, replicas: int = 1, **container: Any) -> dict[str, Any]:
    main = {
        "name": "main",
        "image": image,
        "command": ["sh", "-c", SERVE],
        "ports": [{"name": "http", "containerPort": 8080}],
        **container,
    }
    return manifests.deployment(name, [main], replicas)


def with_pod_spec(doc: dict[str, Any], **spec: Any) -> dict[str, Any]:
    doc["spec"]["template"]["spec"].update(spec)
    return doc


def service(name: str, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": selector, "ports": [{"port": 80, "targetPort": 8080}]},
    }


def diagnosis(kubeconfig: Path, namespace: str, target: str) -> tuple[int, dict[str, Any]]:
    done = pykubelet(kubeconfig, namespace, "diagnose", target, "--json")
    assert done.returncode in (0, 1, 2), done.stderr
    return done.returncode, json.loads(done.stdout)


def stalled_at(kubeconfig: Path, namespace: str, target: str, boundary: str, timeout: float = 120) -> dict:
    """diagnose's JSON once it reports `boundary` stalled (exit 1)."""

    def check() -> dict | None:
        code, verdict = diagnosis(kubeconfig, namespace, target)
        return verdict if code == 1 and verdict["boundary"] == boundary else None

    return wait_for(check, timeout=timeout, interval=1.0, what=f"diagnose {target} stalled at {boundary}")


def first(steps: list[dict], obj: str, what: str) -> int:
    return next(i for i, s in enumerate(steps) if s["object"] == obj and s["what"] == what)


def test_trace_and_diagnose_a_healthy_deployment(
    kubeconfig: Path, namespace: str, image: str, tmp_path: Path
):
    probe = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1}
    kubectl_apply(
        kubeconfig,
        namespace,
        deployment("web", image, 3, readinessProbe=probe),
        service("web", {"app": "web"}),
    )
    done = subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "-n",
            namespace,
            "rollout",
            "status",
            "deployment/web",
            "--timeout=150s",
        ],
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    seen: list[dict] = []

    def published() -> dict | None:
        done = pykubelet(
            kubeconfig, namespace, "trace", "deployment/web", "--json", "--svg", str(tmp_path / "t.svg")
        )
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        seen[:] = [out]
        steps = out["steps"]
        ready = [i for i, s in enumerate(steps) if s["kind"] == "Pod" and s["what"] == "Ready=True"]
        slices = [i for i, s in enumerate(steps) if s["kind"] == "EndpointSlice"]
        return out if len(ready) == 3 and slices and slices[-1] > max(ready) else None

    try:
        out = wait_for(
            published, timeout=60, interval=1.0, what="a trace with 3 Ready pods and the slice after them"
        )
    except AssertionError:
        lines = (
            [f"{s['time']} {s['object']} {s['what']} {s['writer']}" for s in seen[0]["steps"]] if seen else []
        )
        raise AssertionError("\n".join(lines)) from None
    steps = out["steps"]
    objects = list(dict.fromkeys(s["object"] for s in steps))
    replicasets = [o for o in objects if o.startswith("ReplicaSet web-")]
    pods = [o for o in objects if o.startswith("Pod web-")]
    assert len(replicasets) == 1 and len(pods) == 3, objects
    assert any(o.startswith("EndpointSlice web-") for o in objects), objects
    rs = replicasets[0]

    deploy_created = first(steps, "Deployment web", "created")
    rs_created = first(steps, rs, "created")
    assert deploy_created < rs_created
    assert steps[deploy_created]["writer"] == "user" and steps[deploy_created]["manager"].startswith(
        "kubectl"
    )
    assert steps[rs_created]["writer"] == "kube-controller-manager"
    assert steps[steps[rs_created]["cause"]]["object"] == "Deployment web"
    for pod in pods:
        created, scheduled = first(steps, pod, "created"), first(steps, pod, "Scheduled")
        started, ready = first(steps, pod, "Started"), first(steps, pod, "Ready=True")
        assert rs_created < created < scheduled < started < ready, (pod, created, scheduled, started, ready)
        assert steps[created]["writer"] == "kube-controller-manager"
        assert steps[scheduled]["writer"] == "kube-scheduler"
        assert steps[started]["writer"] == "kubelet" and steps[ready]["writer"] == "kubelet"
    slice_steps = [s for s in steps if s["kind"] == "EndpointSlice"]
    assert all(s["writer"] == "kube-controller-manager" for s in slice_steps)
    for i, step in enumerate(steps):
        assert step["gapMs"] is None or step["gapMs"] >= 0, step
        assert step["cause"] is None or step["cause"] < i, step
    assert "approximate" in out["approximate"]

    root = ET.parse(tmp_path / "t.svg").getroot()
    lanes = [g.get("data-lane") for g in root.iter(f"{SVG}g") if g.get("class") == "lane-group"]
    assert sorted(lanes) == sorted({s["writer"] for s in steps})
    assert {"user", "kube-controller-manager", "kube-scheduler", "kubelet"} <= set(lanes)
    assert len(lanes) == len(set(lanes))

    text = pykubelet(kubeconfig, namespace, "trace", "deployment/web")
    assert text.returncode == 0 and f"{rs} created by kube-controller-manager" in text.stdout

    code, verdict = diagnosis(kubeconfig, namespace, "deployment/web")
    assert (code, verdict["status"]) == (0, "healthy"), verdict
    code, verdict = diagnosis(kubeconfig, namespace, "svc/web")
    debug = subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "-n",
            namespace,
            "get",
            "endpointslices,svc",
            "-o",
            "yaml",
        ],
        capture_output=True,
        text=True,
    ).stdout
    assert (code, verdict["status"]) == (0, "healthy"), (
        verdict,
        debug,
        pykubelet(kubeconfig, namespace, "trace", "svc/web").stdout,
    )
    dataplane = verdict["findings"][-1]
    assert (dataplane["boundary"], dataplane["state"]) == ("dataplane", "ok"), verdict
    assert (
        dataplane["message"].startswith("traffic arrives: Service web (")
        and "answered from inside a pod" in (dataplane["message"])
    )
    short = pykubelet(kubeconfig, namespace, "diagnose", "deployment/web")
    assert short.returncode == 0 and short.stdout.startswith("healthy: Deployment web, 3/3 pods ready")


def test_unsatisfiable_node_selector_stalls_at_scheduling(kubeconfig: Path, namespace: str, image: str):
    kubectl_apply(
        kubeconfig, namespace, with_pod_spec(deployment("lost", image), nodeSelector={"journey": "nowhere"})
    )
    verdict = stalled_at(kubeconfig, namespace, "deployment/lost", "scheduling")
    assert "nodes are available" in verdict["summary"], verdict
    assert verdict["summary"].startswith("stalled at: scheduling - 0/")


def missing_image(image: str) -> str:
    registry, sep, _ = image.rpartition("/")
    return f"{registry}{sep}journey-no-such-image:v0"


def test_missing_image_stalls_at_runtime(kubeconfig: Path, namespace: str, image: str):
    kubectl_apply(kubeconfig, namespace, deployment("noimage", missing_image(image)))
    verdict = stalled_at(kubeconfig, namespace, "deployment/noimage", "runtime")
    assert "ImagePullBackOff" in verdict["summary"] or "ErrImagePull" in verdict["summary"], verdict


def test_missing_secret_stalls_at_runtime(kubeconfig: Path, namespace: str, image: str):
    env = [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "journey-absent", "key": "password"}}}]
    kubectl_apply(kubeconfig, namespace, deployment("nosecret", image, env=env))
    verdict = stalled_at(kubeconfig, namespace, "deployment/nosecret", "runtime")
    assert "CreateContainerConfigError" in verdict["summary"] and "journey-absent" in verdict["summary"], (
        verdict
    )


def test_failing_readiness_probe_stalls_at_probes(kubeconfig: Path, namespace: str, image: str):
    probe = {"exec": {"command": ["cat", "/tmp/journey-never"]}, "periodSeconds": 1}
    kubectl_apply(kubeconfig, namespace, deployment("unready", image, readinessProbe=probe))
    verdict = stalled_at(kubeconfig, namespace, "deployment/unready", "probes")
    assert "Readiness probe failed" in verdict["summary"], verdict


def test_service_selecting_nothing_stalls_at_endpoints(kubeconfig: Path, namespace: str):
    kubectl_apply(kubeconfig, namespace, service("orphan", {"app": "journey-nothing"}))
    code, verdict = diagnosis(kubeconfig, namespace, "svc/orphan")
    assert code == 1 and verdict["boundary"] == "endpoints", verdict
    assert (
        verdict["summary"]
        == "stalled at: endpoints - Service orphan: selector app=journey-nothing matches no pods"
    )


def test_service_whose_traffic_does_not_arrive_stalls_at_dataplane(
    kubeconfig: Path, namespace: str, image: str
):
    """Endpoints exist (the pod is Ready: no readiness probe) but the Service sends its traffic to a port
    nothing listens on: only trying a connection shows it, which diagnose does from inside the pod."""
    deaf = service("deaf", {"app": "deaf"})
    deaf["spec"]["ports"][0]["targetPort"] = 9090  # httpd listens on 8080
    kubectl_apply(kubeconfig, namespace, deployment("deaf", image), deaf)
    verdict = stalled_at(kubeconfig, namespace, "svc/deaf", "dataplane")
    assert verdict["summary"].startswith("stalled at: dataplane - Service deaf: neither "), verdict
    assert ":9090 accepts connections from pod deaf-" in verdict["summary"], verdict
    endpoints = next(f for f in verdict["findings"] if f["boundary"] == "endpoints")
    assert endpoints["state"] == "ok", verdict
    skipped = pykubelet(kubeconfig, namespace, "diagnose", "svc/deaf", "--no-dataplane")
    assert skipped.returncode == 0 and skipped.stdout.startswith("healthy: Service deaf"), skipped.stdout


def kubectl(kubeconfig: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_node_whose_agent_stopped_stalls_at_node(kubeconfig: Path, namespace: str, image: str):
    """A node as its kubelet left it when it stopped: registered, Ready when last heard from, its Lease
    renewed minutes ago and never since; a pod bound to it. (Through the API only, so any cluster runs it;
    the node lifecycle controller may mark it Unknown meanwhile, which is the same boundary.)"""
    name = f"journey-gone-{namespace[-6:]}"
    stale = "2026-01-01T00:00:00Z"
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": stale,
                    "lastTransitionTime": stale,
                }
            ]
        },
    }
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": 40,
            "renewTime": "2026-01-01T00:00:00.000000Z",
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "stranded"},
        "spec": {
            "nodeName": name,
            "containers": [{"name": "main", "image": image, "command": ["sleep", "3600"]}],
        },
    }
    try:
        for doc, ns in ((node, None), (lease, None), (pod, namespace)):
            done = kubectl(
                kubeconfig, *(["-n", ns] if ns else []), "create", "-f", "-", input=json.dumps(doc)
            )
            assert done.returncode == 0, done.stderr
        verdict = stalled_at(kubeconfig, namespace, "pod/stranded", "node", timeout=60)
        summary = verdict["summary"]
        assert summary.startswith(f"stalled at: node - node {name}"), verdict
        assert (
            "has not renewed its Lease" in summary or "Ready=Unknown" in summary or "Ready=False" in summary
        )
    finally:
        kubectl(
            kubeconfig,
            "-n",
            namespace,
            "delete",
            "pod",
            "stranded",
            "--grace-period=0",
            "--force",
            "--wait=false",
        )
        kubectl(kubeconfig, "-n", "kube-node-lease", "delete", "lease", name, "--wait=false")
        kubectl(kubeconfig, "delete", "node", name, "--wait=false")


def test_rbac_forbidding_the_user_stalls_at_authorization(
    kubeconfig: Path, namespace: str, image: str, tmp_path: Path
):
    """A user (a ServiceAccount's token) with no Role in the namespace: diagnose stops at authorization,
    naming what it may not do."""
    kubectl_apply(kubeconfig, namespace, deployment("guarded", image))
    assert kubectl(kubeconfig, "-n", namespace, "create", "serviceaccount", "nobody").returncode == 0
    token = kubectl(kubeconfig, "-n", namespace, "create", "token", "nobody")
    assert token.returncode == 0, token.stderr
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    config["users"] = [{"name": "nobody", "user": {"token": token.stdout.strip()}}]
    context["context"]["user"] = "nobody"
    config["contexts"] = [context]
    restricted = tmp_path / "nobody.kubeconfig"
    restricted.write_text(yaml.safe_dump(config))
    code, verdict = diagnosis(restricted, namespace, "deployment/guarded")
    assert code == 1 and verdict["boundary"] == "authorization", verdict
    user = f"system:serviceaccount:{namespace}:nobody"
    assert verdict["summary"].startswith(f"stalled at: authorization - {user} may not "), verdict


def test_webhook_that_is_down_stalls_at_admission(kubeconfig: Path, namespace: str, image: str):
    """A validating webhook on pod creation whose server is gone (nothing listens at its URL) with
    failurePolicy Fail: the ReplicaSet controller's creates are refused in admission, and diagnose says
    so with the webhook's name. The configuration selects only this test's namespace, so nothing else on
    the cluster meets it."""
    webhook = "deny.journey.pykubelet.io"
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": f"journey-down-{namespace}"},
        "webhooks": [
            {
                "name": webhook,
                # Port 1 on the API server's own loopback: refused on any cluster.
                "clientConfig": {"url": "https://127.0.0.1:1/validate"},
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 2,
            }
        ],
    }
    created = kubectl(kubeconfig, "create", "-f", "-", input=json.dumps(config))
    assert created.returncode == 0, created.stderr
    try:
        kubectl_apply(kubeconfig, namespace, deployment("blocked", image))
        verdict = stalled_at(kubeconfig, namespace, "deployment/blocked", "admission")
        assert f'failed calling webhook "{webhook}"' in verdict["summary"], verdict
    finally:
        kubectl(
            kubeconfig, "delete", "validatingwebhookconfiguration", config["metadata"]["name"], "--wait=false"
        )
