"""Fixtures for the scheduler tests: one API server for the session, a fresh scheduler process per test.

Nodes are cluster-wide, so each test deletes the nodes and pods it made; with a new scheduler per test
nothing one test left in a scheduler's cache can leak into the next. The scheduler runs as the real
`pykubelet scheduler` subprocess, and is stopped (and reaped) by the fixture that started it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from pykubelet.rig.apiserver import ApiServer

WAIT = 30.0  # generous: backoff tops out at 10 s, and CI machines are busy


def preemption(nodes: int, no_victims: int = 0, not_helpful: int = 0) -> str:
    """Upstream 1.32's suffix of a FailedScheduling message when preemption found nothing to evict:
    per node, no lower-priority pod there, or a rejection eviction cannot fix. The second period is
    upstream's: the part is appended as " %v." and already ends with one."""
    parts = []
    if no_victims:
        parts.append(f"{no_victims} No preemption victims found for incoming pod")
    if not_helpful:
        parts.append(f"{not_helpful} Preemption is not helpful for scheduling")
    return f" preemption: 0/{nodes} nodes are available: {', '.join(sorted(parts))}.."


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    server = ApiServer(
        tmp_path_factory.mktemp("sched-apiserver")
    )  # embedded scheduler off: tests run their own
    server.start()
    yield server
    server.stop()
    assert not server.running


@pytest.fixture(scope="session")
def v1(apiserver: ApiServer) -> Iterator[client.CoreV1Api]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(apiserver.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        yield client.CoreV1Api(api)


class SchedulerProcess:
    """`pykubelet scheduler` against the test server; its log is printed when a test fails."""

    def __init__(
        self, kubeconfig: Path, workdir: Path, settings: dict[str, Any] | None, wait_synced: bool = True
    ) -> None:
        self.log_path = workdir / f"scheduler-{uuid.uuid4().hex[:6]}.log"
        # --secure-port 0: several schedulers of these tests (and other stacks) share this host.
        cmd = [sys.executable, "-m", "pykubelet", "scheduler", "--kubeconfig", str(kubeconfig), "-v=4"]
        cmd += ["--secure-port", "0"]
        if settings is not None:
            cfg_path = workdir / f"scheduler-config-{uuid.uuid4().hex[:6]}.yaml"
            cfg_path.write_text(yaml.safe_dump(settings))
            cmd += ["--config", str(cfg_path)]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        if wait_synced:
            self._wait_synced()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _wait_synced(self) -> None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"scheduler exited ({self.process.returncode}):\n{self.log()}")
            if "caches synced" in self.log():
                return
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"scheduler did not sync:\n{self.log()}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


class Cluster:
    """Node objects and pods in one namespace, with waits on what the scheduler does."""

    def __init__(self, v1: client.CoreV1Api, namespace: str) -> None:
        self.v1 = v1
        self.namespace = namespace
        self.nodes: list[str] = []
        self.prefix = namespace

    # nodes
    def add_node(
        self,
        name: str,
        cpu: str = "4",
        memory: str = "8Gi",
        pods: int = 110,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        unschedulable: bool = False,
        images: list[tuple[str, int]] | None = None,
        ephemeral: str = "100Gi",
    ) -> str:
        full = f"{self.prefix}-{name}"
        alloc = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": ephemeral}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": full, "labels": {"kubernetes.io/hostname": full, **(labels or {})}},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {
                "capacity": alloc,
                "allocatable": alloc,
                "images": [{"names": [n], "sizeBytes": s} for n, s in images or ()],
            },
        }
        self.v1.create_node(body)
        self.nodes.append(full)
        return full

    def patch_node(self, name: str, patch: dict[str, Any]) -> None:
        self.v1.patch_node(name, patch)

    # pods
    def pod(
        self, name: str, cpu: str | None = "100m", memory: str | None = "64Mi", **spec: Any
    ) -> dict[str, Any]:
        requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
        container = {"name": "c", "image": spec.pop("image", "busybox"), "resources": {"requests": requests}}
        if "ports" in spec:
            container["ports"] = spec.pop("ports")
        meta: dict[str, Any] = {"name": name, "labels": spec.pop("labels", {})}
        if "owner" in spec:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": spec["owner"],
                    "uid": f"uid-{spec.pop('owner')}",
                    "controller": True,
                }
            ]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {"containers": [container], **spec},
        }

    def create(self, body: dict[str, Any]) -> str:
        self.v1.create_namespaced_pod(self.namespace, body)
        return str(body["metadata"]["name"])

    def get(self, name: str) -> client.V1Pod:
        return self.v1.read_namespaced_pod(name, self.namespace)

    def wait_bound(self, name: str, timeout: float = WAIT) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            node = self.get(name).spec.node_name
            if node:
                return str(node)
            time.sleep(0.05)
        pod = self.get(name)
        raise AssertionError(f"pod {name} not bound after {timeout}s; conditions: {pod.status.conditions}")

    def wait_unschedulable(self, name: str, timeout: float = WAIT, containing: str = "") -> str:
        """The PodScheduled=False message once the scheduler has given up on the pod (for now)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pod = self.get(name)
            assert not pod.spec.node_name, f"pod {name} unexpectedly bound to {pod.spec.node_name}"
            for c in pod.status.conditions or ():
                if (
                    c.type == "PodScheduled"
                    and c.status == "False"
                    and c.reason == "Unschedulable"
                    and containing in (c.message or "")
                ):
                    return str(c.message)
            time.sleep(0.05)
        raise AssertionError(f"pod {name} never reported Unschedulable; status: {self.get(name).status}")

    def events(self, name: str) -> list[client.CoreV1Event]:
        items = self.v1.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={name}"
        ).items
        return list(items)

    def wait_event(self, name: str, reason: str, timeout: float = WAIT) -> client.CoreV1Event:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ev in self.events(name):
                if ev.reason == reason:
                    return ev
            time.sleep(0.05)
        raise AssertionError(f"no {reason} event for {name}: {[e.reason for e in self.events(name)]}")

    def bound_nodes(self) -> dict[str, str]:
        return {
            p.metadata.name: p.spec.node_name
            for p in self.v1.list_namespaced_pod(self.namespace).items
            if p.spec.node_name
        }

    def cleanup(self) -> None:
        for p in self.v1.list_namespaced_pod(self.namespace).items:
            try:
                self.v1.delete_namespaced_pod(p.metadata.name, self.namespace, grace_period_seconds=0)
            except client.ApiException as err:
                if err.status != 404:
                    raise
        for n in self.nodes:
            try:
                self.v1.delete_node(n)
            except client.ApiException as err:
                if err.status != 404:
                    raise


@pytest.fixture
def cluster(v1: client.CoreV1Api) -> Iterator[Cluster]:
    name = f"s-{uuid.uuid4().hex[:8]}"
    v1.create_namespace({"metadata": {"name": name}})
    c = Cluster(v1, name)
    yield c
    c.cleanup()


@pytest.fixture
def start_scheduler(
    apiserver: ApiServer, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., SchedulerProcess]]:
    started: list[SchedulerProcess] = []

    def start(settings: dict[str, Any] | None = None, wait_synced: bool = True) -> SchedulerProcess:
        proc = SchedulerProcess(apiserver.scheduler_kubeconfig, tmp_path, settings, wait_synced)
        started.append(proc)
        return proc

    start.background = lambda settings=None: start(settings, wait_synced=False)  # type: ignore[attr-defined]
    yield start
    for proc in started:
        killed = proc.process.returncode == -signal.SIGKILL  # a test killed it on purpose
        code = proc.stop()
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            print(f"--- scheduler log ---\n{proc.log()[-6000:]}")
        assert killed or code == 0, f"scheduler exited {code}:\n{proc.log()[-3000:]}"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


def most_allocated(**weights: int) -> dict[str, Any]:
    """A KubeSchedulerConfiguration choosing MostAllocated (and optional score weights)."""
    return scheduler_config("MostAllocated", **weights)


def scheduler_config(
    strategy: str = "LeastAllocated", only: list[str] | None = None, **weights: int
) -> dict[str, Any]:
    score: dict[str, Any] = {}
    if only is not None:
        score = {
            "disabled": [{"name": "*"}],
            "enabled": [{"name": n, "weight": weights.get(n, 1)} for n in only],
        }
    elif weights:
        score = {"enabled": [{"name": n, "weight": w} for n, w in weights.items()]}
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "podInitialBackoffSeconds": 1,
        "podMaxBackoffSeconds": 10,
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "plugins": {"score": score},
                "pluginConfig": [
                    {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": strategy}}}
                ],
            }
        ],
    }
