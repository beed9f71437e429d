"""Controllers against the real API server: one server for the module, the controllers under test run
in-process on the test's event loop (no kubelet: tests play the kubelet's part by writing pod status, so
readiness and availability are theirs to decide)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client

from controlplane.controllers.manager import ControllerManager, ManagerConfig
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.leaderelection import LeaderElection
from pykubelet.rig.apiserver import ApiServer

T = TypeVar("T")


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("controllers-api")) as server:
        yield server


@pytest.fixture(scope="module")
def api(apiserver: ApiServer) -> Iterator[client.ApiClient]:
    with apiserver.api_client() as api_client:
        yield api_client


@pytest.fixture(scope="module")
def v1(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def apps(api: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api)


@pytest.fixture
def namespace(v1: client.CoreV1Api) -> str:
    name = f"c-{uuid.uuid4().hex[:8]}"
    v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


@contextlib.asynccontextmanager
async def running(apiserver: ApiServer, *names: str, **options: Any) -> AsyncIterator[ControllerManager]:
    """The named controllers, in-process, until the block ends, on the identities the real manager runs
    them on: the manager's (system:kube-controller-manager) for informers, each controller's service
    account for the rest."""
    kube = KubeClient(load_kubeconfig(apiserver.controller_manager_kubeconfig), qps=0)
    manager = ControllerManager(
        kube,
        ManagerConfig(
            controllers=list(names),
            leader_election=LeaderElection("kube-controller-manager", enabled=False),
            secure_port=0,
            options=options,
            service_account_signer=apiserver.signing_pair,
        ),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    try:
        yield manager
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
        await kube.close()


async def eventually(probe: Callable[[], T], timeout: float = 20.0, what: str = "condition") -> T:
    """Poll an API read (in a thread: the official client blocks) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(probe)
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last={last!r}")


def mark_ready(v1: client.CoreV1Api, pod: client.V1Pod, node: str = "n1", ready: bool = True) -> None:
    """Do what a kubelet does for a started pod: bind it to a node, Running, Ready (or not)."""
    name, ns = pod.metadata.name, pod.metadata.namespace
    if not pod.spec.node_name:
        v1.create_namespaced_binding(
            ns,
            client.V1Binding(
                metadata=client.V1ObjectMeta(name=name),
                target=client.V1ObjectReference(kind="Node", name=node),
            ),
            _preload_content=False,
        )
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    v1.patch_namespaced_pod_status(
        name,
        ns,
        {
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": now}
                ],
            }
        },
    )
