"""TLS bootstrap and client certificate rotation against the real API server (bootstrap tokens on) with
the approving and signing loops running in-process: a bootstrap kubeconfig's token buys the node a
certificate (written 0600 in its root dir, the kubeconfig pointing at it) that is system:node:<name>; a
usable certificate is kept across restarts; a denied CSR ends the bootstrap with its reason; a due
rotation replaces the certificate for a running client without a restart. No containerd involved."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from agent.node.bootstrap import BootstrapError, bootstrap_client, paths_for
from agent.node.certrotation import CertRotator, jittered_fraction, rotation_deadline
from kubeclient import bootstraptoken as bt
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from pykubelet.rig.apiserver import ApiServer
from tests.controllers.conftest import eventually, running
from tests.controlplane.joinutil import CSR_PATH, admin, approve, put_token

SELF_REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("boot-api"), extra_args=["--enable-bootstrap-token-auth"]) as s:
        yield s


def bootstrap_kubeconfig(server: ApiServer, token: str, path: Path) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": server.url,
                    "certificate-authority-data": base64.b64encode(server.ca_cert.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": "tls-bootstrap-token-user", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "tls-bootstrap-token-user"}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


async def whoami(client: KubeClient) -> dict:
    review = await client.create(
        SELF_REVIEW, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    return review["status"]["userInfo"]


def _csr_count(server: ApiServer) -> int:
    return len(admin(server, "GET", CSR_PATH)[1]["items"])


async def test_bootstrap_then_rotation(apiserver: ApiServer, tmp_path: Path) -> None:
    token = bt.generate()
    put_token(apiserver, token)
    boot = bootstrap_kubeconfig(apiserver, token, tmp_path / "bootstrap.kubeconfig")
    root = tmp_path / "root"
    async with running(apiserver, "csrapproving", "csrsigning", cluster_signing=apiserver.signing_pair):
        kubeconfig = await asyncio.wait_for(bootstrap_client(str(root), None, str(boot), "boot-1"), 60)
        assert kubeconfig == root / "kubeconfig"
        paths = paths_for(str(root), None)
        assert paths.current.is_symlink()
        pem = paths.current.resolve()
        assert stat.S_IMODE(os.stat(pem).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(kubeconfig).st_mode) == 0o600
        assert not (paths.cert_dir / "kubelet-client.key.tmp").exists()
        client = KubeClient(load_kubeconfig(kubeconfig))
        try:
            user = await whoami(client)
            assert user["username"] == "system:node:boot-1"
            assert "system:nodes" in user["groups"]
            # A restart with a usable certificate asks for nothing.
            before = _csr_count(apiserver)
            assert await bootstrap_client(str(root), None, str(boot), "boot-1") == kubeconfig
            assert _csr_count(apiserver) == before

            # Rotation: a clock past the deadline renews at once, as the node, without a restart.
            first = x509.load_pem_x509_certificate(paths.current.read_bytes())
            offset = [dt.timedelta(days=366)]
            rotator = CertRotator(
                [client], "boot-1", paths.current, clock=lambda: dt.datetime.now(dt.UTC) + offset[0]
            )
            rotator.start()
            try:
                await eventually(lambda: rotator.rotations >= 1, timeout=30, what="a rotation")
                offset[0] = dt.timedelta(0)
            finally:
                await rotator.stop()
            second = x509.load_pem_x509_certificate(paths.current.read_bytes())
            assert second.serial_number != first.serial_number
            assert second.public_key() != first.public_key()
            assert paths.current.resolve() != pem or second.serial_number != first.serial_number
            user = await whoami(client)  # the running client still works
            assert user["username"] == "system:node:boot-1"
            fresh = KubeClient(load_kubeconfig(kubeconfig))  # and the kubeconfig now holds the new pair
            try:
                assert (await whoami(fresh))["username"] == "system:node:boot-1"
            finally:
                await fresh.close()
            renewal = [
                c
                for c in admin(apiserver, "GET", CSR_PATH)[1]["items"]
                if c["spec"]["username"] == "system:node:boot-1"
            ]
            assert renewal and renewal[0]["status"]["conditions"][0]["message"] == (
                "Auto approving self kubelet client certificate after SubjectAccessReview."
            )
        finally:
            await client.close()


async def test_denied_csr_ends_bootstrap_with_its_reason(apiserver: ApiServer, tmp_path: Path) -> None:
    token = bt.generate()
    put_token(apiserver, token)
    boot = bootstrap_kubeconfig(apiserver, token, tmp_path / "bootstrap.kubeconfig")
    task = asyncio.create_task(bootstrap_client(str(tmp_path / "root"), None, str(boot), "boot-denied"))

    def pending() -> str | None:
        for c in admin(apiserver, "GET", CSR_PATH)[1]["items"]:
            if c["spec"]["username"] == f"system:bootstrap:{token[:6]}":
                return c["metadata"]["name"]
        return None

    name = await eventually(pending, what="the bootstrap CSR")
    assert approve(apiserver, name, "Denied")[0] == 200
    with pytest.raises(BootstrapError) as err:
        await asyncio.wait_for(task, 30)
    assert (
        str(err.value) == f"certificate signing request {name} is denied, reason: Test, message: by the test"
    )
    assert not (tmp_path / "root" / "kubeconfig").exists()


def test_rotation_deadline_is_70_to_90_percent_of_the_lifetime(apiserver: ApiServer) -> None:
    ca = x509.load_pem_x509_certificate(apiserver.ca_cert.read_bytes())
    life = ca.not_valid_after_utc - ca.not_valid_before_utc
    fractions = [jittered_fraction() for _ in range(200)]
    assert all(0.7 <= f < 0.9 for f in fractions) and max(fractions) - min(fractions) > 0.1
    assert rotation_deadline(ca, 0.8) == ca.not_valid_before_utc + life * 0.8
