"""StatefulSets through kubectl and the API only: three replicas come up in order (web-1 only once web-0
is Ready, as the watch shows), each pod has its stable name and resolves its own DNS name
`<pod>.<service>.<ns>.svc.cluster.local` through the headless Service; a template change rolls from the
highest ordinal down under `kubectl rollout status`, `kubectl rollout history` lists both revisions and
`kubectl rollout undo` goes back; scaling to one removes web-2, then web-1. With volumeClaimTemplates
each pod gets its own claim on the default StorageClass, and what a pod wrote there survives deleting it:
the replacement has the same name and the same claim. Pods are kept to the target node
(kubernetes.io/hostname), so the scenario reads the same on a many-node cluster.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from e2e.waiting import wait_for

pytestmark = pytest.mark.integration


def kubectl(
    kubeconfig: Path, namespace: str, *args: str, stdin: str | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}")
    return done


def statefulset(name: str, image: str, node: str, script: str, replicas: int = 3, **spec: Any) -> dict:
    body: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "main",
                            "image": image,
                            "command": ["sh", "-c", script],
                            "env": [
                                {"name": "VERSION", "value": "1"},
                                {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                            ],
                        }
                    ],
                },
            },
        },
    }
    body["spec"].update(spec)
    return body


def headless(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"clusterIP": "None", "selector": {"app": name}, "ports": [{"name": "web", "port": 80}]},
    }


def ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def live(kube: client.CoreV1Api, ns: str, app: str) -> dict[str, client.V1Pod]:
    return {
        p.metadata.name: p
        for p in kube.list_namespaced_pod(ns, label_selector=f"app={app}").items
        if not p.metadata.deletion_timestamp
    }


@contextlib.contextmanager
def pod_log(kube: client.CoreV1Api, namespace: str) -> Iterator[list[tuple[str, str, bool]]]:
    """(event, pod, ready) in the order a watch delivers them: `added`, `ready` (first Ready),
    `terminating` (first deletionTimestamp), `gone`."""
    seen: list[tuple[str, str, bool]] = []
    rv = kube.list_namespaced_pod(namespace).metadata.resource_version
    stream = watch.Watch()
    marks: set[tuple[str, str]] = set()

    def run() -> None:
        with contextlib.suppress(Exception):  # the stream ends with the test (or the cluster): log is kept
            follow()

    def follow() -> None:
        for event in stream.stream(
            kube.list_namespaced_pod, namespace, resource_version=rv, timeout_seconds=600
        ):
            pod: client.V1Pod = event["object"]
            uid = pod.metadata.uid
            if event["type"] == "ADDED":
                seen.append(("added", pod.metadata.name, ready(pod)))
            if event["type"] == "DELETED":
                seen.append(("gone", pod.metadata.name, False))
                continue
            for what, holds in (
                ("ready", ready(pod)),
                ("terminating", bool(pod.metadata.deletion_timestamp)),
            ):
                if holds and (what, uid) not in marks:
                    marks.add((what, uid))
                    seen.append((what, pod.metadata.name, ready(pod)))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stream.stop()


def before(log: list[tuple[str, str, bool]], first: tuple[str, str], then: tuple[str, str]) -> bool:
    names = [(what, name) for what, name, _ in log]
    return first in names and then in names and names.index(first) < names.index(then)


def revision_of(pod: client.V1Pod) -> str:
    return pod.metadata.labels["controller-revision-hash"]


SERVE = "echo started $(hostname); exec sleep 3600"


def test_ordered_pods_stable_dns_rollout_and_scale_down(
    kubeconfig, kube, api_client, namespace, image, node_name
):
    apps = client.AppsV1Api(api_client)
    kubectl(kubeconfig, namespace, "create", "-f", "-", stdin=json.dumps(headless("web")))
    with pod_log(kube, namespace) as log:
        kubectl(
            kubeconfig,
            namespace,
            "create",
            "-f",
            "-",
            stdin=json.dumps(statefulset("web", image, node_name, SERVE)),
        )
        kubectl(kubeconfig, namespace, "rollout", "status", "statefulset/web", "--timeout=180s", timeout=200)
        pods = wait_for(
            lambda: (p := live(kube, namespace, "web")) and len(p) == 3 and all(map(ready, p.values())) and p,
            timeout=60,
            what="3 ready pods",
        )
    # OrderedReady: each pod is made only once its predecessor is Ready.
    assert before(log, ("ready", "web-0"), ("added", "web-1")), log
    assert before(log, ("ready", "web-1"), ("added", "web-2")), log
    assert pods["web-0"].metadata.creation_timestamp <= pods["web-1"].metadata.creation_timestamp
    assert pods["web-1"].metadata.creation_timestamp <= pods["web-2"].metadata.creation_timestamp
    for name, pod in pods.items():
        assert (pod.spec.hostname, pod.spec.subdomain) == (name, "web")
        assert pod.metadata.labels["statefulset.kubernetes.io/pod-name"] == name
    status = apps.read_namespaced_stateful_set("web", namespace).status
    assert (status.replicas, status.ready_replicas, status.current_replicas) == (3, 3, 3)
    assert status.current_revision == status.update_revision == revision_of(pods["web-0"])
    table = kubectl(kubeconfig, namespace, "get", "statefulset").stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "AGE"] and table[1].split()[:2] == ["web", "3/3"]

    # Each pod resolves its own stable name (the headless Service publishes its hostname).
    for name, pod in pods.items():
        fqdn = f"{name}.web.{namespace}.svc.cluster.local"
        script = f"hostname; for i in $(seq 30); do nslookup {fqdn} && break; sleep 1; done"
        out = kubectl(kubeconfig, namespace, "exec", name, "--", "sh", "-c", script, timeout=60).stdout
        assert out.splitlines()[0] == name, out
        assert pod.status.pod_ip in out.split(fqdn, 1)[-1], out

    # A template change rolls from the highest ordinal down.
    with pod_log(kube, namespace) as log:
        kubectl(kubeconfig, namespace, "set", "env", "statefulset/web", "VERSION=2")
        kubectl(kubeconfig, namespace, "rollout", "status", "statefulset/web", "--timeout=180s", timeout=200)
        rolled = wait_for(
            lambda: (
                (s := apps.read_namespaced_stateful_set("web", namespace).status).current_revision
                == s.update_revision
                and s.updated_replicas == 3
                and s
            ),
            timeout=60,
            what="the rollout complete",
        )
    assert rolled.update_revision != status.update_revision
    terminating = [name for what, name, _ in log if what == "terminating"]
    assert terminating == ["web-2", "web-1", "web-0"], log
    assert {revision_of(p) for p in live(kube, namespace, "web").values()} == {rolled.update_revision}
    listing = kubectl(kubeconfig, namespace, "rollout", "history", "statefulset/web").stdout
    assert [line.split()[0] for line in listing.splitlines()[2:] if line.strip()] == ["1", "2"], listing

    kubectl(kubeconfig, namespace, "rollout", "undo", "statefulset/web")
    kubectl(kubeconfig, namespace, "rollout", "status", "statefulset/web", "--timeout=180s", timeout=200)
    back = wait_for(
        lambda: (
            (p := live(kube, namespace, "web"))
            and len(p) == 3
            and all(
                ready(x) and {e.name: e.value for e in x.spec.containers[0].env}["VERSION"] == "1"
                for x in p.values()
            )
            and p
        ),
        timeout=120,
        what="the rolled-back pods",
    )
    assert {revision_of(p) for p in back.values()} == {status.update_revision}  # revision 1, renumbered
    listing = kubectl(kubeconfig, namespace, "rollout", "history", "statefulset/web").stdout
    assert [line.split()[0] for line in listing.splitlines()[2:] if line.strip()] == ["2", "3"], listing

    # Scaling to one removes web-2, then web-1 (each only once the one above is gone).
    with pod_log(kube, namespace) as log:
        kubectl(kubeconfig, namespace, "scale", "statefulset/web", "--replicas=1")
        wait_for(
            lambda: (
                sorted(
                    p.metadata.name
                    for p in kube.list_namespaced_pod(namespace, label_selector="app=web").items
                )
                == ["web-0"]
            ),
            timeout=120,
            what="web-0 alone",
        )
        wait_for(lambda: ("gone", "web-1", False) in log, timeout=30, what="web-1's deletion seen")
    gone = [(what, name) for what, name, _ in log if what in ("terminating", "gone")]
    assert gone == [
        ("terminating", "web-2"),
        ("gone", "web-2"),
        ("terminating", "web-1"),
        ("gone", "web-1"),
    ], log
    table = kubectl(kubeconfig, namespace, "get", "statefulset", "web").stdout.splitlines()
    assert table[1].split()[:2] == ["web", "1/1"]


KEEP = (
    '[ -f /data/first ] || echo "$(hostname) $POD_UID" > /data/first; '
    "echo first=$(cat /data/first); exec sleep 3600"
)


def test_each_pod_keeps_its_own_claim_and_data(kubeconfig, kube, api_client, namespace, image, node_name):
    claim = {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}},
    }
    body = statefulset("db", image, node_name, KEEP, replicas=2, volumeClaimTemplates=[claim])
    body["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "data", "mountPath": "/data"}
    ]
    kubectl(kubeconfig, namespace, "create", "-f", "-", stdin=json.dumps(headless("db")))
    kubectl(kubeconfig, namespace, "create", "-f", "-", stdin=json.dumps(body))
    kubectl(kubeconfig, namespace, "rollout", "status", "statefulset/db", "--timeout=240s", timeout=260)
    pods = wait_for(
        lambda: (p := live(kube, namespace, "db")) and len(p) == 2 and all(map(ready, p.values())) and p,
        timeout=60,
        what="2 ready pods",
    )
    claims = {c.metadata.name: c for c in kube.list_namespaced_persistent_volume_claim(namespace).items}
    assert sorted(claims) == ["data-db-0", "data-db-1"]
    assert all(c.status.phase == "Bound" for c in claims.values()), claims
    assert claims["data-db-0"].spec.volume_name != claims["data-db-1"].spec.volume_name
    firsts = {}
    for name, pod in pods.items():
        volume = next(v for v in pod.spec.volumes if v.name == "data")
        assert volume.persistent_volume_claim.claim_name == f"data-{name}"
        firsts[name] = wait_for(
            lambda n=name: "first=" in (log := kube.read_namespaced_pod_log(n, namespace)) and log,
            timeout=30,
            what=f"{name}'s log",
        )
        assert f"first={name} {pod.metadata.uid}" in firsts[name], firsts[name]

    old = pods["db-1"]
    kube.delete_namespaced_pod("db-1", namespace)
    replacement = wait_for(
        lambda: (
            (p := live(kube, namespace, "db").get("db-1")) is not None
            and p.metadata.uid != old.metadata.uid
            and ready(p)
            and p
        ),
        timeout=120,
        what="db-1 replaced",
    )
    volume = next(v for v in replacement.spec.volumes if v.name == "data")
    assert volume.persistent_volume_claim.claim_name == "data-db-1"
    log = wait_for(
        lambda: "first=" in (text := kube.read_namespaced_pod_log("db-1", namespace)) and text,
        timeout=30,
        what="the replacement's log",
    )
    # What the first db-1 wrote is still there for the new one.
    assert f"first=db-1 {old.metadata.uid}" in log, log
    again = kube.read_namespaced_persistent_volume_claim("data-db-1", namespace)
    assert again.metadata.uid == claims["data-db-1"].metadata.uid
