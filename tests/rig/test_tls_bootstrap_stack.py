"""The whole stack with the agent joining by TLS bootstrap (StackConfig.tls_bootstrap): the agent starts
with only a bootstrap token, its CSR is approved and signed by the controller manager the server runs,
the Node goes Ready, and the agent's credential is a certificate for system:node:<name> in its root dir
(not one the rig signed); a restarted agent keeps it. Real containerd, so run under the host lock."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID
from kubernetes import client

from pykubelet.rig.leaks import Scope
from pykubelet.rig.netlease import lease_network

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    if os.geteuid() != 0:
        pytest.skip("the stack needs root")
    from pykubelet.rig.stack import Stack, StackConfig, proxy_table

    with lease_network("b") as net:
        config = StackConfig(
            state_dir=tmp_path_factory.mktemp("boot-stack"),
            node_name="boot-node",
            bridge=net.bridge,
            pod_cidr=net.pod_cidr,
            tls_bootstrap=True,
        )
        scope = Scope.of(
            config.state_dir,
            bridges=[net.bridge],
            pod_cidrs=[net.pod_cidr],
            nft_tables=[f"ip {proxy_table(net.bridge)}"],
        )
        s = Stack(config)
        s.start()
        try:
            yield s
        finally:
            problems = s.stop()
            assert not problems, problems
            assert not scope.leaked()


def _client_cert(root: Path) -> x509.Certificate:
    doc = yaml.safe_load((root / "kubeconfig").read_text())
    (user,) = doc["users"]
    pem = Path(user["user"]["client-certificate"])
    assert pem == root / "pki" / "kubelet-client-current.pem" and pem.is_symlink()
    return x509.load_pem_x509_certificate(pem.read_bytes())


def test_agent_joins_by_tls_bootstrap(stack) -> None:  # type: ignore[no-untyped-def]
    root = stack.config.state_dir / "agent"
    cert = _client_cert(root)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:boot-node"
    ca = x509.load_pem_x509_certificate(stack.apiserver.ca_cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    with stack.apiserver.api_client() as api:
        csrs = client.CertificatesV1Api(api).list_certificate_signing_request().items
        node = client.CoreV1Api(api).read_node("boot-node")
    (csr,) = [c for c in csrs if c.spec.username.startswith("system:bootstrap:")]
    assert [(c.type, c.reason) for c in csr.status.conditions] == [("Approved", "AutoApproved")]
    assert x509.load_pem_x509_certificate(base64.b64decode(csr.status.certificate)) == cert
    ready = {c.type: c.status for c in node.status.conditions}
    assert ready["Ready"] == "True"
    # No rig-signed node credential was handed to the agent.
    assert not (root / "system_node_boot-node.crt").exists()


def test_restarted_agent_keeps_its_certificate(stack) -> None:  # type: ignore[no-untyped-def]
    root = stack.config.state_dir / "agent"
    before = _client_cert(root)
    stack.agent.stop()
    stack.start_agent()
    assert _client_cert(root) == before
    with stack.apiserver.api_client() as api:
        csrs = client.CertificatesV1Api(api).list_certificate_signing_request().items
    assert len([c for c in csrs if c.spec.username.startswith("system:bootstrap:")]) == 1


def test_the_stacks_api_server_writes_its_audit_log(stack) -> None:  # type: ignore[no-untyped-def]
    """`pykubelet up`'s stack audits every write beside the admin kubeconfig (where trace finds it): the
    bootstrap identity's CSR, the node's registration by system:node:<name>; no reads, no Lease renewals."""
    import json

    log = stack.config.state_dir / "apiserver" / "audit.log"
    assert log.parent == Path(stack.kubeconfig).parent and oct(log.stat().st_mode & 0o777) == "0o600"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    writes = {(e["verb"], (e.get("objectRef") or {}).get("resource"), e["user"]["username"]) for e in events}
    assert ("create", "nodes", "system:node:boot-node") in writes
    assert any(
        v == "create" and r == "certificatesigningrequests" and u.startswith("system:bootstrap:")
        for v, r, u in writes
    )
    assert not any(e["verb"] in ("get", "list", "watch") for e in events)
    assert not any((e.get("objectRef") or {}).get("resource") == "leases" for e in events)
    assert {e["stage"] for e in events} <= {"ResponseStarted", "ResponseComplete"}
