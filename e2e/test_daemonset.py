"""DaemonSets through kubectl and the API only: a DaemonSet lands one pod on the node (through the
default scheduler), `kubectl rollout status` waits for it, a template change replaces the pod,
`kubectl rollout history` lists both revisions and `kubectl rollout undo` goes back; a selector that
does not match the template is refused with 422. The DaemonSet is kept to the target node
(kubernetes.io/hostname), so the scenario reads the same on a many-node cluster.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from e2e.waiting import wait_for

pytestmark = pytest.mark.integration


def kubectl(
    kubeconfig: Path,
    namespace: str,
    *args: str,
    stdin: str | None = None,
    check: bool = True,
    timeout: float = 180,
) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}")
    return done


def daemonset(name: str, image: str, node: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels or {"app": name}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "main",
                            "image": image,
                            "command": ["sh", "-c", "exec sleep 3600"],
                            "env": [{"name": "VERSION", "value": "1"}],
                        }
                    ],
                },
            },
        },
    }


def live_pods(kube: client.CoreV1Api, ns: str, app: str) -> list[client.V1Pod]:
    return [
        p
        for p in kube.list_namespaced_pod(ns, label_selector=f"app={app}").items
        if not p.metadata.deletion_timestamp
    ]


def running_pod(kube: client.CoreV1Api, ns: str, app: str, version: str) -> client.V1Pod | None:
    pods = live_pods(kube, ns, app)
    if len(pods) != 1 or pods[0].status.phase != "Running":
        return None
    env = {e.name: e.value for e in pods[0].spec.containers[0].env or []}
    return pods[0] if env.get("VERSION") == version else None


def test_one_pod_on_the_node_then_rolled_and_undone(
    kubeconfig, kube, api_client, namespace, image, node_name
):
    apps = client.AppsV1Api(api_client)
    kubectl(
        kubeconfig, namespace, "create", "-f", "-", stdin=json.dumps(daemonset("agent", image, node_name))
    )
    kubectl(kubeconfig, namespace, "rollout", "status", "daemonset/agent", "--timeout=120s", timeout=140)
    first = wait_for(lambda: running_pod(kube, namespace, "agent", "1"), timeout=60, what="the daemon pod")
    assert first.spec.node_name == node_name
    status = apps.read_namespaced_daemon_set_status("agent", namespace).status
    assert (
        status.desired_number_scheduled,
        status.current_number_scheduled,
        status.number_ready,
        status.updated_number_scheduled,
        status.number_available,
    ) == (1, 1, 1, 1, 1)
    table = kubectl(kubeconfig, namespace, "get", "ds").stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "DESIRED",
        "CURRENT",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "NODE",
        "SELECTOR",
        "AGE",
    ]
    assert table[1].split()[:7] == ["agent", "1", "1", "1", "1", "1", f"kubernetes.io/hostname={node_name}"]

    kubectl(kubeconfig, namespace, "set", "env", "daemonset/agent", "VERSION=2")
    kubectl(kubeconfig, namespace, "rollout", "status", "daemonset/agent", "--timeout=120s", timeout=140)
    second = wait_for(lambda: running_pod(kube, namespace, "agent", "2"), timeout=60, what="the updated pod")
    assert second.metadata.uid != first.metadata.uid and second.spec.node_name == node_name
    listing = kubectl(kubeconfig, namespace, "rollout", "history", "daemonset/agent").stdout
    revisions = [line.split()[0] for line in listing.splitlines()[2:] if line.strip()]
    assert revisions == ["1", "2"], listing

    kubectl(kubeconfig, namespace, "rollout", "undo", "daemonset/agent")
    kubectl(kubeconfig, namespace, "rollout", "status", "daemonset/agent", "--timeout=120s", timeout=140)
    third = wait_for(
        lambda: running_pod(kube, namespace, "agent", "1"), timeout=60, what="the rolled-back pod"
    )
    assert third.metadata.uid not in (first.metadata.uid, second.metadata.uid)
    listing = kubectl(kubeconfig, namespace, "rollout", "history", "daemonset/agent").stdout
    assert [line.split()[0] for line in listing.splitlines()[2:] if line.strip()] == ["2", "3"], listing


def test_a_selector_not_matching_the_template_is_refused(kubeconfig, namespace, image, node_name):
    bad = daemonset("bad", image, node_name, labels={"app": "other"})
    done = kubectl(kubeconfig, namespace, "create", "-f", "-", stdin=json.dumps(bad), check=False)
    assert done.returncode != 0
    assert (
        'The DaemonSet "bad" is invalid: spec.template.metadata.labels: Invalid value: {"app":"other"}: '
        "`selector` does not match template `labels`"
    ) in done.stderr
