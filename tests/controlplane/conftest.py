"""Fixtures for the API server tests: one shared server (each test works in its own namespace), the
official client and kubectl pointed at it. Tests that restart or kill a server start their own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from controlplane.apiserver.kindparts import builtin_table
from controlplane.storage.etcd import EtcdConfig, EtcdStore
from controlplane.storage.sqlite import SQLiteStore
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.etcd import Etcd

KUBECTL = shutil.which("kubectl")
# PYKUBE_STORE=etcd runs the session's shared API server (and so every test using it) on etcd.
SESSION_STORE = os.environ.get("PYKUBE_STORE", "sqlite")
# Where an API server keeps each resource in etcd: what a store standing in for one must use.
LAYOUT = builtin_table().etcd_layout()


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    """One etcd for the session (its own data dir and PKI); tests keep apart by key prefix."""
    server = Etcd(tmp_path_factory.mktemp("etcd"), progress_notify_interval="1s")
    server.start()
    yield server
    server.remove()
    assert not server.running


def etcd_store(etcd: Etcd, prefix: str) -> EtcdStore:
    """A store on the session's etcd under its own prefix, with the API server's client certificate."""
    pki = etcd.pki
    config = EtcdConfig((etcd.url,), pki.ca_cert, pki.client_cert, pki.client_key, prefix=prefix)
    return EtcdStore(config, LAYOUT)


class Backend:
    """Opens stores of one backend for a test: `backend.open("db")` twice is the same state (a restart)."""

    def __init__(self, name: str, tmp: Path, etcd: Etcd | None) -> None:
        self.name = name
        self.tmp = tmp
        self.etcd = etcd
        self.tag = uuid.uuid4().hex[:8]

    def open(self, name: str = "state") -> SQLiteStore | EtcdStore:
        if self.etcd is not None:
            return etcd_store(self.etcd, f"/t-{self.tag}-{name}/")
        return SQLiteStore(self.tmp / f"{name}.db")


@pytest.fixture(params=["sqlite", "etcd"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Each store test runs on both backends, SQLite and a real etcd."""
    etcd = request.getfixturevalue("etcd") if request.param == "etcd" else None
    return Backend(request.param, tmp_path, etcd)


@pytest.fixture(scope="session")
def apiserver(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ApiServer]:
    etcd = request.getfixturevalue("etcd") if SESSION_STORE == "etcd" else None
    server = ApiServer(tmp_path_factory.mktemp("apiserver"), etcd=etcd)
    server.start()
    yield server
    server.stop()
    assert not server.running


@pytest.fixture(scope="session")
def api(apiserver: ApiServer) -> Iterator[client.ApiClient]:
    with apiserver.api_client() as api_client:
        yield api_client


@pytest.fixture(scope="session")
def v1(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def apps(api: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api)


@pytest.fixture(scope="module")
def batch(api: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api)


def message(err: pytest.ExceptionInfo[ApiException], code: int = 422) -> str:
    """The Status message of a refused request, once its code is the one expected (422: invalid)."""
    assert err.value.status == code, err.value.body
    return json.loads(err.value.body)["message"]


@pytest.fixture
def namespace(v1: client.CoreV1Api) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name


class Kubectl:
    """Runs the real kubectl against a server, failing the test with kubectl's output on error."""

    def __init__(self, kubeconfig: Path, home: Path) -> None:
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(home)}

    def run(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        assert KUBECTL is not None
        proc = subprocess.run(
            [KUBECTL, *args], input=input, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def __call__(self, *args: str, **kwargs: object) -> str:
        return self.run(*args, **kwargs).stdout  # type: ignore[arg-type]

    def popen(self, *args: str) -> subprocess.Popen[str]:
        assert KUBECTL is not None
        return subprocess.Popen(
            [KUBECTL, *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )


@pytest.fixture(scope="session")
def kubectl(apiserver: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed (apt-get install kubectl, or put kubectl 1.32 on PATH)")
    return Kubectl(apiserver.kubeconfig, tmp_path_factory.mktemp("kubectl-home"))
