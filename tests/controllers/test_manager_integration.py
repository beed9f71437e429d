"""The controller manager against the real API server: supervised by `pykubelet server`, its first
loops (service accounts, the root CA bundle) at work, its HTTPS health and metrics endpoint, and leader
election between two instances (kill -9 of the leader hands over)."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.waiting import wait_for
from pykubelet.rig.apiserver import ApiServer

pytestmark = pytest.mark.integration
T = TypeVar("T")


def read(fn: Callable[[], T]) -> T | None:
    try:
        return fn()
    except ApiException as err:
        if err.status == 404:
            return None
        raise


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    # The controller manager's client limits as `pykubelet server` passes them on (upstream's scale tests
    # raise kube-controller-manager's --kube-api-qps above its default 20).
    limits = ["--controller-manager-kube-api-qps", "40", "--controller-manager-kube-api-burst", "60"]
    with ApiServer(tmp_path_factory.mktemp("cm-api"), controllers=True, extra_args=limits) as srv:
        yield srv


@pytest.fixture(scope="module")
def v1(server: ApiServer) -> Iterator[client.CoreV1Api]:
    with server.api_client() as api:
        yield client.CoreV1Api(api)


def new_namespace(v1: client.CoreV1Api) -> str:
    name = f"cm-{uuid.uuid4().hex[:8]}"
    v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def test_every_namespace_gets_a_default_service_account_and_the_ca_bundle(
    server: ApiServer, v1: client.CoreV1Api
) -> None:
    ns = new_namespace(v1)
    sa = wait_for(
        lambda: read(lambda: v1.read_namespaced_service_account("default", ns)),
        what="default SA",
        timeout=30.0,
        interval=0.1,
    )
    cm = wait_for(
        lambda: read(lambda: v1.read_namespaced_config_map("kube-root-ca.crt", ns)),
        what="CA bundle",
        timeout=30.0,
        interval=0.1,
    )
    assert cm.data == {"ca.crt": server.ca_cert.read_text()}
    assert "kube-apiserver" in cm.metadata.annotations["kubernetes.io/description"]
    # Taken away, both come back (new objects, new UIDs).
    v1.delete_namespaced_service_account("default", ns)
    v1.delete_namespaced_config_map("kube-root-ca.crt", ns)
    again = wait_for(
        lambda: read(lambda: v1.read_namespaced_service_account("default", ns)),
        what="SA again",
        timeout=30.0,
        interval=0.1,
    )
    assert again.metadata.uid != sa.metadata.uid
    wait_for(
        lambda: read(lambda: v1.read_namespaced_config_map("kube-root-ca.crt", ns)),
        what="CA again",
        timeout=30.0,
        interval=0.1,
    )
    # Changed by hand, the bundle is put right.
    v1.patch_namespaced_config_map("kube-root-ca.crt", ns, {"data": {"ca.crt": "not a CA"}})
    wait_for(
        lambda: (
            (read(lambda: v1.read_namespaced_config_map("kube-root-ca.crt", ns)).data or {}).get("ca.crt")
            == server.ca_cert.read_text()
        ),
        what="CA restored",
        timeout=30.0,
        interval=0.1,
    )


def _get(url: str, cert: tuple[Path, Path] | None = None) -> tuple[int, str]:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(*cert)
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_healthz_is_open_and_metrics_need_authorization(server: ApiServer, v1: client.CoreV1Api) -> None:
    new_namespace(v1)  # some work for the queues
    base = f"https://127.0.0.1:{server.controller_manager_port}"
    assert wait_for(lambda: _get(f"{base}/healthz")[0] == 200, what="healthz", timeout=30.0, interval=0.1)
    assert _get(f"{base}/metrics")[0] == 401
    # A cluster certificate is not enough: the API server must authorize the path (SubjectAccessReview).
    nobody = server.client_kubeconfig("nobody", (), server.data_dir / "nobody" / "nobody.kubeconfig")
    assert _get(f"{base}/metrics", (nobody.parent / "nobody.crt", nobody.parent / "nobody.key"))[0] == 403
    admin = (server.data_dir / "pki" / "admin.crt", server.data_dir / "pki" / "admin.key")
    status, text = _get(f"{base}/metrics", admin)
    assert status == 200
    assert 'workqueue_adds_total{name="serviceaccount"}' in text
    assert 'leader_election_master_status{name="kube-controller-manager"} 1.0' in text


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(p) for p in (task / "children").read_text().split()]
    return out


def test_the_server_passes_its_client_limits_to_the_controller_manager(server: ApiServer) -> None:
    assert server.pid is not None
    argvs = [Path(f"/proc/{c}/cmdline").read_bytes().split(b"\0") for c in _children(server.pid)]
    manager = [a for a in argvs if b"controller-manager" in a]
    assert len(manager) == 1, argvs
    argv = manager[0]
    assert argv[argv.index(b"--kube-api-qps") + 1] == b"40.0"
    assert argv[argv.index(b"--kube-api-burst") + 1] == b"60"


def _manager(kubeconfig: Path, log: Path) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "pykubelet",
        "controller-manager",
        "--kubeconfig",
        str(kubeconfig),
        "--secure-port",
        "0",
        "--leader-elect-lease-duration",
        "4s",
        "--leader-elect-renew-deadline",
        "3s",
        "--leader-elect-retry-period",
        "500ms",
    ]
    return subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


def test_two_managers_hand_over_leadership(tmp_path: Path) -> None:
    with ApiServer(tmp_path / "api") as srv, srv.api_client() as api:
        v1 = client.CoreV1Api(api)
        leases = client.CoordinationV1Api(api)
        a = _manager(srv.kubeconfig, tmp_path / "a.log")
        b = _manager(srv.kubeconfig, tmp_path / "b.log")
        try:

            def holder() -> str | None:
                lease = read(lambda: leases.read_namespaced_lease("kube-controller-manager", "kube-system"))
                return lease.spec.holder_identity if lease else None

            first = wait_for(holder, what="a leader", timeout=30.0, interval=0.1)
            leader, standby = (a, b) if f"_{a.pid}_" in first else (b, a)
            assert f"_{leader.pid}_" in first
            ns = new_namespace(v1)
            wait_for(
                lambda: read(lambda: v1.read_namespaced_service_account("default", ns)),
                what="SA",
                timeout=30.0,
                interval=0.1,
            )
            os.killpg(leader.pid, signal.SIGKILL)
            leader.wait()
            second = wait_for(
                lambda: (h := holder()) and f"_{standby.pid}_" in h and h,
                timeout=20,
                what="the standby to take the lease",
                interval=0.1,
            )
            assert second != first
            ns2 = new_namespace(v1)  # only the new leader can have made this one's account
            wait_for(
                lambda: read(lambda: v1.read_namespaced_service_account("default", ns2)),
                what="SA by new leader",
                timeout=30.0,
                interval=0.1,
            )
            standby.send_signal(signal.SIGTERM)
            assert standby.wait(timeout=20) == 0
            released = read(lambda: leases.read_namespaced_lease("kube-controller-manager", "kube-system"))
            assert released is not None and not released.spec.holder_identity  # a clean stop releases it
        finally:
            for proc in (a, b):
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
