"""Deployments through kubectl and the API only: the walkthrough (`kubectl create deployment` to three
Running, Ready pods and `kubectl rollout status` exiting 0), a rollout gated by a readiness probe whose
surge and unavailability bounds a watch checks, `kubectl rollout undo|history|pause|resume|restart`,
`kubectl set image` to an image that never runs reaching ProgressDeadlineExceeded, a deleted pod
replaced, `kubectl scale` up and down. Nothing here knows whose controller runs the Deployment.
"""

from __future__ import annotations

import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from e2e import manifests
from e2e.waiting import wait_for

pytestmark = pytest.mark.integration

SERVE = "mkdir -p /www && echo ok > /www/healthz && exec httpd -f -p 8080 -h /www"
REVISION = "deployment.kubernetes.io/revision"


def kubectl(
    kubeconfig: Path, namespace: str, *args: str, check: bool = True, timeout: float = 180
) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}")
    return done


def served(name: str, image: str, replicas: int, version: str = "1", **spec: Any) -> dict[str, Any]:
    """A Deployment of busybox httpd pods that are Ready once /healthz answers (a readiness probe
    ticking every second); VERSION tells the templates apart."""
    container = {
        "name": "main",
        "image": image,
        "command": ["sh", "-c", SERVE],
        "env": [{"name": "VERSION", "value": version}],
        "ports": [{"containerPort": 8080}],
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": 8080},
            "periodSeconds": 1,
            "failureThreshold": 1,
        },
    }
    return manifests.deployment(name, [container], replicas, **spec)


def apps_api(api_client: Any) -> client.AppsV1Api:
    return client.AppsV1Api(api_client)


def replica_sets(apps: client.AppsV1Api, ns: str) -> dict[str, client.V1ReplicaSet]:
    """By revision."""
    return {rs.metadata.annotations.get(REVISION): rs for rs in apps.list_namespaced_replica_set(ns).items}


def live_pods(kube: client.CoreV1Api, ns: str, app: str) -> list[client.V1Pod]:
    return [
        p
        for p in kube.list_namespaced_pod(ns, label_selector=f"app={app}").items
        if not p.metadata.deletion_timestamp
    ]


def is_ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def condition(d: client.V1Deployment, type_: str) -> client.V1DeploymentCondition | None:
    return next((c for c in (d.status.conditions or []) if c.type == type_), None)


def deployment_events(kube: client.CoreV1Api, ns: str, name: str, reason: str) -> list[str]:
    items = kube.list_namespaced_event(
        ns, field_selector=f"involvedObject.kind=Deployment,involvedObject.name={name}"
    ).items
    return [e.message for e in items if e.reason == reason]


def env_of(pod: client.V1Pod) -> str:
    return next(e.value for e in pod.spec.containers[0].env if e.name == "VERSION")


class Watcher:
    """A watch (official client) on its own thread, from a listing's resourceVersion, feeding each
    ADDED/MODIFIED/DELETED event to `observe`."""

    def __init__(self, lister: Any, ns: str, app: str, observe: Any) -> None:
        listing = lister(ns, label_selector=f"app={app}")
        self.items = listing.items
        self.events = 0
        self.error: str | None = None  # set if the watch broke before stop(): events may be missing
        self._observe = observe
        self._stopped = False
        self._watch = watch.Watch()
        self._thread = threading.Thread(
            target=self._run, args=(lister, ns, app, listing.metadata.resource_version), daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def _run(self, lister: Any, ns: str, app: str, rv: str) -> None:
        try:
            for event in self._watch.stream(
                lister, ns, label_selector=f"app={app}", resource_version=rv, timeout_seconds=300
            ):
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    self.events += 1
                    self._observe(event["type"], event["object"])
        except Exception as err:  # reported through .error, checked by the test
            if not self._stopped:
                self.error = repr(err)
            return
        if not self._stopped:
            self.error = "the watch ended before the test stopped it"

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()


class Census:
    """What a rolling update promises, watched as it happens: the ReplicaSets' replicas (spec) never add up
    to more than replicas + maxSurge, and the pods (not terminating) never have fewer Ready than replicas -
    maxUnavailable. The bound is on the ReplicaSets, as upstream's controller computes it: an old pod the
    ReplicaSet controller has yet to delete can briefly coexist with the new one the surge allows."""

    def __init__(self, kube: client.CoreV1Api, apps: client.AppsV1Api, ns: str, app: str) -> None:
        self.pods: dict[str, client.V1Pod] = {}
        self.sets: dict[str, int] = {}
        self._pod_watch = Watcher(kube.list_namespaced_pod, ns, app, self._pod)
        self._set_watch = Watcher(apps.list_namespaced_replica_set, ns, app, self._set)
        self.pods.update(
            {p.metadata.uid: p for p in self._pod_watch.items if not p.metadata.deletion_timestamp}
        )
        self.sets.update({rs.metadata.uid: rs.spec.replicas or 0 for rs in self._set_watch.items})
        self.most = sum(self.sets.values())
        self.least_ready = sum(is_ready(p) for p in self.pods.values())
        self._pod_watch.start()
        self._set_watch.start()

    @property
    def events(self) -> int:
        return self._pod_watch.events + self._set_watch.events

    @property
    def error(self) -> str | None:
        return self._pod_watch.error or self._set_watch.error

    def _pod(self, kind: str, pod: client.V1Pod) -> None:
        if kind == "DELETED" or pod.metadata.deletion_timestamp:
            self.pods.pop(pod.metadata.uid, None)
        else:
            self.pods[pod.metadata.uid] = pod
        self.least_ready = min(self.least_ready, sum(is_ready(p) for p in self.pods.values()))

    def _set(self, kind: str, rs: client.V1ReplicaSet) -> None:
        if kind == "DELETED":
            self.sets.pop(rs.metadata.uid, None)
        else:
            self.sets[rs.metadata.uid] = rs.spec.replicas or 0
        self.most = max(self.most, sum(self.sets.values()))

    def stop(self) -> None:
        self._pod_watch.stop()
        self._set_watch.stop()


def test_walkthrough_create_deployment_to_three_ready_pods(kubeconfig, kube, api_client, namespace, image):
    kubectl(
        kubeconfig,
        namespace,
        "create",
        "deployment",
        "web",
        f"--image={image}",
        "--replicas=3",
        "--",
        "httpd",
        "-f",
        "-p",
        "8080",
    )
    done = kubectl(kubeconfig, namespace, "rollout", "status", "deployment/web", "--timeout=150s")
    assert 'deployment "web" successfully rolled out' in done.stdout
    apps = apps_api(api_client)
    [rs] = apps.list_namespaced_replica_set(namespace).items
    pod_hash = rs.metadata.labels["pod-template-hash"]
    assert rs.metadata.name == f"web-{pod_hash}" and rs.spec.replicas == 3
    assert rs.metadata.owner_references[0].kind == "Deployment" and rs.metadata.annotations[REVISION] == "1"
    pods = live_pods(kube, namespace, "web")
    assert len(pods) == 3
    for pod in pods:
        assert pod.status.phase == "Running" and is_ready(pod)
        assert pod.metadata.name.startswith(f"web-{pod_hash}-")
        assert pod.metadata.labels["pod-template-hash"] == pod_hash
        assert pod.metadata.owner_references[0].name == rs.metadata.name
    d = apps.read_namespaced_deployment("web", namespace)
    assert (
        d.status.replicas,
        d.status.updated_replicas,
        d.status.ready_replicas,
        d.status.available_replicas,
    ) == (3, 3, 3, 3)
    assert (condition(d, "Available").status, condition(d, "Available").reason) == (
        "True",
        "MinimumReplicasAvailable",
    )
    progressing = wait_for(
        lambda: (
            (c := condition(apps.read_namespaced_deployment("web", namespace), "Progressing"))
            and c.reason == "NewReplicaSetAvailable"
            and c
        ),
        timeout=30,
    )
    assert progressing.message == f'ReplicaSet "{rs.metadata.name}" has successfully progressed.'
    assert deployment_events(kube, namespace, "web", "ScalingReplicaSet") == [
        f"Scaled up replica set {rs.metadata.name} from 0 to 3"
    ]
    shown = kubectl(kubeconfig, namespace, "get", "deployment", "web").stdout.split("\n")[1].split()
    assert shown[:4] == ["web", "3/3", "3", "3"]


def test_rolling_update_within_bounds_then_undo(kubeconfig, kube, api_client, namespace, image):
    """4 replicas, maxSurge 1, maxUnavailable 1: from v1 to v2 (kubectl set env) watches never see the
    ReplicaSets ask for more than 5 pods or fewer than 3 pods Ready; `rollout undo` makes v1's ReplicaSet
    the new one again."""
    apps = apps_api(api_client)
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}
    apps.create_namespaced_deployment(namespace, served("web", image, 4, strategy=strategy))
    kubectl(kubeconfig, namespace, "rollout", "status", "deployment/web", "--timeout=150s")
    census = Census(kube, apps, namespace, "web")
    try:
        kubectl(kubeconfig, namespace, "set", "env", "deployment/web", "VERSION=2")
        kubectl(kubeconfig, namespace, "rollout", "status", "deployment/web", "--timeout=150s")
        wait_for(
            lambda: len(census.pods) == 4 and all(is_ready(p) for p in census.pods.values()),
            timeout=60,
            what="4 ready v2 pods in the watch",
        )
    finally:
        census.stop()
    assert census.error is None, census.error
    assert census.events > 10
    assert census.most <= 5, census.most
    assert census.least_ready >= 3, census.least_ready
    rss = replica_sets(apps, namespace)
    assert (rss["1"].spec.replicas, rss["2"].spec.replicas) == (0, 4)
    assert {env_of(p) for p in live_pods(kube, namespace, "web")} == {"2"}
    history = kubectl(kubeconfig, namespace, "rollout", "history", "deployment/web").stdout
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["1", "2"]
    first = rss["1"].metadata.name

    assert "rolled back" in kubectl(kubeconfig, namespace, "rollout", "undo", "deployment/web").stdout
    kubectl(kubeconfig, namespace, "rollout", "status", "deployment/web", "--timeout=150s")
    rss = replica_sets(apps, namespace)
    assert set(rss) == {"2", "3"}  # v1's ReplicaSet is revision 3 now
    assert rss["3"].metadata.name == first and rss["3"].spec.replicas == 4
    assert rss["3"].metadata.annotations["deployment.kubernetes.io/revision-history"] == "1"
    wait_for(
        lambda: {env_of(p) for p in live_pods(kube, namespace, "web")} == {"1"},
        timeout=60,
        what="v1 pods only",
    )
    d = apps.read_namespaced_deployment("web", namespace)
    assert d.metadata.annotations[REVISION] == "3"
    history = kubectl(kubeconfig, namespace, "rollout", "history", "deployment/web", "--revision=3").stdout
    assert re.search(r"VERSION:\s+1\n", history), history


def test_pause_resume_and_restart(kubeconfig, kube, api_client, namespace, image):
    apps = apps_api(api_client)
    apps.create_namespaced_deployment(namespace, served("web", image, 2))
    kubectl(kubeconfig, namespace, "rollout", "status", "deployment/web", "--timeout=150s")
    kubectl(kubeconfig, namespace, "rollout", "pause", "deployment/web")
    kubectl(kubeconfig, namespace, "set", "env", "deployment/web", "VERSION=2")
    kubectl(kubeconfig, namespace, "scale", "deployment/web", "--replicas=3")
    d = wait_for(
        lambda: (
            (x := apps.read_namespaced_deployment("web", namespace)).status.observed_generation
            == x.metadata.generation
            and (x.status.ready_replicas or 0) == 3
            and x
        ),
        timeout=90,
        what="the paused Deployment scaled",
    )
    progressing = condition(d, "Progressing")
    assert (progressing.status, progressing.reason, progressing.message) == (
        "Unknown",
        "DeploymentPaused",
        "Deployment is paused",
    )
    assert list(replica_sets(apps, namespace)) == ["1"]  # no rollout while paused
    assert {env_of(p) for p in live_pods(kube, namespace, "web")} == {"1"}
    restart = kubectl(kubeconfig, namespace, "rollout", "restart", "deployment/web", check=False)
    assert (
        restart.returncode != 0
        and "can't restart paused deployment (run rollout resume first)" in restart.stderr
    )

    kubectl(kubeconfig, namespace, "rollout", "resume", "deployment/web")
    kubectl(kubeconfig, namespace, "rollout", "status", "deployment/web", "--timeout=150s")
    assert set(replica_sets(apps, namespace)) == {"1", "2"}
    kubectl(kubeconfig, namespace, "rollout", "restart", "deployment/web")
    kubectl(kubeconfig, namespace, "rollout", "status", "deployment/web", "--timeout=150s")
    rss = replica_sets(apps, namespace)
    assert set(rss) == {"1", "2", "3"} and rss["3"].spec.replicas == 3
    assert "kubectl.kubernetes.io/restartedAt" in rss["3"].spec.template.metadata.annotations
    wait_for(
        lambda: (
            len(live_pods(kube, namespace, "web")) == 3
            and all(
                p.metadata.labels["pod-template-hash"] == rss["3"].metadata.labels["pod-template-hash"]
                for p in live_pods(kube, namespace, "web")
            )
        ),
        timeout=60,
        what="only restarted pods",
    )


def test_image_that_never_runs_exceeds_the_progress_deadline(kubeconfig, kube, api_client, namespace, image):
    apps = apps_api(api_client)
    apps.create_namespaced_deployment(namespace, served("web", image, 2, progressDeadlineSeconds=8))
    kubectl(kubeconfig, namespace, "rollout", "status", "deployment/web", "--timeout=150s")
    kubectl(kubeconfig, namespace, "set", "image", "deployment/web", f"main={image}-missing")
    status = kubectl(
        kubeconfig, namespace, "rollout", "status", "deployment/web", "--timeout=120s", check=False
    )
    assert status.returncode == 1
    assert 'error: deployment "web" exceeded its progress deadline' in status.stderr
    d = apps.read_namespaced_deployment("web", namespace)
    new = replica_sets(apps, namespace)["2"].metadata.name
    progressing = condition(d, "Progressing")
    assert (progressing.status, progressing.reason, progressing.message) == (
        "False",
        "ProgressDeadlineExceeded",
        f'ReplicaSet "{new}" has timed out progressing.',
    )
    assert condition(d, "Available").status == "True"  # the old pods still serve
    assert len([p for p in live_pods(kube, namespace, "web") if is_ready(p)]) >= 1


def test_a_deleted_pod_is_replaced(kubeconfig, kube, api_client, namespace, image):
    apps = apps_api(api_client)
    apps.create_namespaced_deployment(namespace, served("web", image, 3))
    kubectl(kubeconfig, namespace, "rollout", "status", "deployment/web", "--timeout=150s")
    victim = live_pods(kube, namespace, "web")[0]
    kubectl(kubeconfig, namespace, "delete", "pod", victim.metadata.name, "--wait=false")
    pods = wait_for(
        lambda: (
            (p := live_pods(kube, namespace, "web"))
            and len(p) == 3
            and all(map(is_ready, p))
            and victim.metadata.uid not in {x.metadata.uid for x in p}
            and p
        ),
        timeout=90,
        what="a replacement",
    )
    assert victim.metadata.name not in {p.metadata.name for p in pods}
    assert len({p.metadata.labels["pod-template-hash"] for p in pods}) == 1
    d = wait_for(
        lambda: (x := apps.read_namespaced_deployment("web", namespace)).status.available_replicas == 3 and x,
        timeout=30,
    )
    assert condition(d, "Available").status == "True"


def test_kubectl_scale_up_and_down(kubeconfig, kube, api_client, namespace, image):
    apps = apps_api(api_client)
    apps.create_namespaced_deployment(namespace, served("web", image, 2))
    kubectl(kubeconfig, namespace, "rollout", "status", "deployment/web", "--timeout=150s")
    [name] = [rs.metadata.name for rs in replica_sets(apps, namespace).values()]
    kubectl(kubeconfig, namespace, "scale", "deployment/web", "--replicas=4")
    kubectl(kubeconfig, namespace, "rollout", "status", "deployment/web", "--timeout=150s")
    assert len([p for p in live_pods(kube, namespace, "web") if is_ready(p)]) == 4
    kubectl(kubeconfig, namespace, "scale", "deployment/web", "--replicas=1")
    wait_for(lambda: len(live_pods(kube, namespace, "web")) == 1, timeout=60, what="scaled down to 1")
    d = wait_for(
        lambda: (x := apps.read_namespaced_deployment("web", namespace)).status.replicas == 1 and x,
        timeout=60,
    )
    assert (d.spec.replicas, d.status.available_replicas) == (1, 1)
    scaled = deployment_events(kube, namespace, "web", "ScalingReplicaSet")
    assert f"Scaled up replica set {name} from 2 to 4" in scaled
    assert f"Scaled down replica set {name} from 4 to 1" in scaled
    assert list(replica_sets(apps, namespace)) == ["1"]  # scaling is no rollout
