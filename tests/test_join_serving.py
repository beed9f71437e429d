"""serverTLSBootstrap (agent/node/servingcert.py) against the real API server with the real approver and
signer loops: the kubelet API listens but completes no handshake until its kubelet-serving CSR (posted as
system:node:<name>, O=system:nodes, the node's SANs, upstream's usages) is approved by an administrator
with `kubectl certificate approve`; it then serves the issued certificate, which the API server's kubelet
client verifies when given --kubelet-certificate-authority (and refuses a self-signed one); a renewal
swaps the served certificate without a restart. API server only: no host lock."""

from __future__ import annotations

import asyncio
import base64
import ssl
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agent.node.servingcert import SIGNER, ServingCertManager
from agent.server.tls import ensure_self_signed, server_context
from controlplane.apiserver.certs import ensure_pki
from controlplane.apiserver.kubeletproxy import KubeletClient
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from pykubelet.rig.apiserver import ApiServer
from tests.controllers.conftest import eventually, running
from tests.controlplane.joinutil import CSR_PATH, admin

pytestmark = pytest.mark.integration  # real servers, etcd or processes

NODE = "serving-node"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("serving-api")) as s:
        yield s


@pytest.fixture(scope="module")
async def loops(server: ApiServer) -> AsyncIterator[None]:
    async with running(server, "csrapproving", "csrsigning", cluster_signing=server.signing_pair):
        yield


def _csrs_of(server: ApiServer) -> list[dict]:
    status, listed = admin(server, "GET", CSR_PATH)
    assert status == 200
    return [
        c
        for c in listed["items"]
        if c["spec"]["signerName"] == SIGNER and c["spec"]["username"] == f"system:node:{NODE}"
    ]


def _pending(server: ApiServer, seen: set[str]) -> dict | None:
    fresh = [c for c in _csrs_of(server) if c["metadata"]["name"] not in seen]
    return fresh[0] if fresh else None


def _approve(server: ApiServer, name: str) -> None:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(server.kubeconfig), "certificate", "approve", name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"certificatesigningrequest.certificates.k8s.io/{name} approved" in done.stdout


async def _peer_cert(port: int, context: ssl.SSLContext) -> x509.Certificate:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
    )
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        assert await reader.read(2) == b"ok"
    finally:
        writer.close()
    return x509.load_der_x509_certificate(der)


async def test_serving_certificate_through_an_approved_csr(
    server: ApiServer, loops: None, tmp_path: Path
) -> None:
    kubeconfig = server.client_kubeconfig(
        f"system:node:{NODE}", ("system:nodes",), tmp_path / "node.kubeconfig"
    )
    client = KubeClient(load_kubeconfig(kubeconfig), component="kubelet")
    ca = str(server.ca_cert)
    cert, key = ensure_self_signed(tmp_path / "pki", NODE, ["127.0.0.1"])
    base = server_context(cert, key, ca)
    manager = ServingCertManager(
        client,
        NODE,
        tmp_path / "pki",
        base,
        lambda c, k: server_context(c, k, ca),
        lambda: ([NODE], ["127.0.0.1"]),
    )

    async def hello(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"ok")
        await w.drain()
        w.close()

    listener = await asyncio.start_server(hello, "127.0.0.1", 0, ssl=manager.context)
    port = listener.sockets[0].getsockname()[1]
    verifying = ssl.create_default_context(cafile=ca)
    manager.start()
    try:
        csr = await eventually(lambda: _pending(server, set()), what="the kubelet-serving CSR")
        # The request upstream's kubelet makes.
        assert csr["spec"]["usages"] == ["digital signature", "key encipherment", "server auth"]
        assert "system:nodes" in csr["spec"]["groups"]
        request = x509.load_pem_x509_csr(base64.b64decode(csr["spec"]["request"]))
        assert request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{NODE}"
        assert request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
        sans = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert sans.get_values_for_type(x509.DNSName) == [NODE]
        assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
        # Not approved by the approver (serving CSRs are left to an administrator), and nothing is served.
        assert not (csr.get("status") or {}).get("conditions")
        with pytest.raises((ssl.SSLError, ConnectionResetError)):  # the handshake is refused
            await _peer_cert(port, verifying)

        _approve(server, csr["metadata"]["name"])
        await asyncio.wait_for(manager.issued.wait(), 30)
        first = await _peer_cert(port, verifying)
        assert first.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{NODE}"
        eku = first.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert ExtendedKeyUsageOID.SERVER_AUTH in eku
        assert (tmp_path / "pki" / "kubelet-server-current.pem").is_symlink()

        # The API server's kubelet client: verifying with the CA it accepts the issued certificate.
        pki = ensure_pki(server.data_dir)
        strict = KubeletClient(pki.kubelet_client_cert, pki.kubelet_client_key, Path(ca))
        assert (await _peer_cert(port, strict.ssl_context)).serial_number == first.serial_number

        # A renewal (what rotation does at 70-90 % of the lifetime) swaps the served certificate live.
        renewal = asyncio.create_task(manager.renew())
        second_csr = await eventually(
            lambda: _pending(server, {csr["metadata"]["name"]}), what="the renewal CSR"
        )
        _approve(server, second_csr["metadata"]["name"])
        renewed = await asyncio.wait_for(renewal, 30)
        assert renewed.serial_number != first.serial_number
        assert (await _peer_cert(port, verifying)).serial_number == renewed.serial_number
    finally:
        await manager.stop()
        listener.close()
        await listener.wait_closed()
        await client.close()


async def test_kubelet_client_with_a_ca_refuses_a_self_signed_kubelet(
    server: ApiServer, tmp_path: Path
) -> None:
    cert, key = ensure_self_signed(tmp_path / "pki", "selfie", ["127.0.0.1"])

    async def hello(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"ok")
        await w.drain()
        w.close()

    listener = await asyncio.start_server(hello, "127.0.0.1", 0, ssl=server_context(cert, key, None))
    port = listener.sockets[0].getsockname()[1]
    pki = ensure_pki(server.data_dir)
    try:
        strict = KubeletClient(pki.kubelet_client_cert, pki.kubelet_client_key, server.ca_cert)
        with pytest.raises(ssl.SSLCertVerificationError):
            await _peer_cert(port, strict.ssl_context)
        # Without --kubelet-certificate-authority (upstream's default) the self-signed kubelet is accepted.
        lax = KubeletClient(pki.kubelet_client_cert, pki.kubelet_client_key)
        assert await _peer_cert(port, lax.ssl_context)
    finally:
        listener.close()
        await listener.wait_closed()


async def test_the_serving_certificate_is_rotated_on_its_own_schedule(
    server: ApiServer, loops: None, tmp_path: Path
) -> None:
    """Nobody calls renew(): with the node's clock a year on (past 70-90 % of the issued certificate's
    life), the manager's own schedule posts the next CSR; once approved, the new certificate is served
    without a restart."""
    import datetime as dt

    node = "scheduled-node"
    kubeconfig = server.client_kubeconfig(
        f"system:node:{node}", ("system:nodes",), tmp_path / "node.kubeconfig"
    )
    client = KubeClient(load_kubeconfig(kubeconfig), component="kubelet")
    ca = str(server.ca_cert)
    cert, key = ensure_self_signed(tmp_path / "pki", node, ["127.0.0.1"])
    manager = ServingCertManager(
        client,
        node,
        tmp_path / "pki",
        server_context(cert, key, ca),
        lambda c, k: server_context(c, k, ca),
        lambda: ([node], ["127.0.0.1"]),
        clock=lambda: dt.datetime.now(dt.UTC) + dt.timedelta(days=366),
    )

    async def hello(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"ok")
        await w.drain()
        w.close()

    def csrs() -> list[dict]:
        return [
            c
            for c in admin(server, "GET", CSR_PATH)[1]["items"]
            if c["spec"]["username"] == f"system:node:{node}"
        ]

    listener = await asyncio.start_server(hello, "127.0.0.1", 0, ssl=manager.context)
    port = listener.sockets[0].getsockname()[1]
    verifying = ssl.create_default_context(cafile=ca)
    manager.start()
    try:
        first_csr = await eventually(lambda: (csrs() or [None])[0], what="the first serving CSR")
        _approve(server, first_csr["metadata"]["name"])
        await asyncio.wait_for(manager.issued.wait(), 30)
        # The schedule, not the test, asks again.
        second_csr = await eventually(
            lambda: next((c for c in csrs() if c["metadata"]["name"] != first_csr["metadata"]["name"]), None),
            what="the scheduled renewal CSR",
        )
        assert manager.rotations >= 1
        first = x509.load_pem_x509_certificate(
            base64.b64decode(
                await eventually(
                    lambda: _issued(server, first_csr["metadata"]["name"]), what="the first certificate"
                )
            )
        )
        _approve(server, second_csr["metadata"]["name"])
        second = x509.load_pem_x509_certificate(
            base64.b64decode(
                await eventually(lambda: _issued(server, second_csr["metadata"]["name"]), what="the renewal")
            )
        )
        assert second.serial_number != first.serial_number

        async def serving_second() -> bool:
            return (await _peer_cert(port, verifying)).serial_number == second.serial_number

        deadline = asyncio.get_running_loop().time() + 30
        while not await serving_second():
            assert asyncio.get_running_loop().time() < deadline, "the renewed certificate is not served"
            await asyncio.sleep(0.2)
    finally:
        await manager.stop()
        listener.close()
        await listener.wait_closed()
        await client.close()


def _issued(server: ApiServer, name: str) -> str | None:
    status, csr = admin(server, "GET", f"{CSR_PATH}/{name}")
    assert status == 200
    return (csr.get("status") or {}).get("certificate")
