"""The join-credential loops in-process against the real API server (bootstrap token auth on), on
their own identities: bootstrapsigner's JWS signatures in cluster-info (verified as kubeadm's discovery
does), tokencleaner deleting expired tokens, csrapproving's SubjectAccessReview-gated approvals,
csrsigning's certificates (checked with `cryptography` against the CA, and used) and its refusals with
upstream's reasons, and csrcleaner's deadlines on a moved clock."""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubeclient import bootstraptoken as bt
from pykubelet.rig.apiserver import ApiServer
from tests.controllers.conftest import eventually, running
from tests.controlplane.joinutil import (
    CLIENT,
    CLIENT_KUBELET,
    CSR_PATH,
    SERVING,
    admin,
    approve,
    csr_body,
    make_csr,
    put_token,
    raw,
    whoami,
)

CLUSTER_INFO = f"/api/v1/namespaces/{bt.CLUSTER_INFO_NAMESPACE}/configmaps/{bt.CLUSTER_INFO}"


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("certs-api"), extra_args=["--enable-bootstrap-token-auth"]) as s:
        yield s


def loops(server: ApiServer, *names: str, **options: Any) -> Any:
    """The named loops, with the cluster CA the controller manager gets (--cluster-signing-*-file)."""
    return running(server, *names, cluster_signing=server.signing_pair, **options)


def _name() -> str:
    return f"csr-{uuid.uuid4().hex[:8]}"


def _get(server: ApiServer, path: str) -> Any:
    status, body = admin(server, "GET", path)
    return body if status == 200 else None


def _csr(server: ApiServer, name: str) -> dict[str, Any]:
    return _get(server, f"{CSR_PATH}/{name}") or {}


def _cert_of(csr: dict[str, Any]) -> x509.Certificate | None:
    raw_cert = (csr.get("status") or {}).get("certificate")
    return x509.load_pem_x509_certificate(base64.b64decode(raw_cert)) if raw_cert else None


def _conditions(csr: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (c["type"], c.get("reason", ""), c.get("message", ""))
        for c in (csr.get("status") or {}).get("conditions") or []
    ]


async def test_bootstrapsigner_signs_cluster_info_per_signing_token(apiserver: ApiServer) -> None:
    signing, auth_only = bt.generate(), bt.generate()
    put_token(apiserver, signing)
    put_token(apiserver, auth_only, usages=("authentication",))
    async with running(apiserver, "bootstrapsigner"):

        def signed() -> dict[str, Any] | None:
            cm = _get(apiserver, CLUSTER_INFO)
            return cm if cm and f"{bt.JWS_PREFIX}{signing[:6]}" in cm.get("data", {}) else None

        cm = await eventually(signed, what="cluster-info signed")
        data = cm["data"]
        assert f"{bt.JWS_PREFIX}{auth_only[:6]}" not in data
        kubeconfig = data[bt.KUBECONFIG_KEY]
        signature = data[f"{bt.JWS_PREFIX}{signing[:6]}"]
        # kubeadm's discovery: the detached JWS over the kubeconfig checks with the token's secret only.
        assert bt.verify_detached_signature(kubeconfig, signature, signing[:6], signing[7:])
        assert not bt.verify_detached_signature(kubeconfig, signature, signing[:6], "0" * 16)
        assert not bt.verify_detached_signature(kubeconfig + " ", signature, signing[:6], signing[7:])
        ca = base64.b64decode(
            yaml.safe_load(kubeconfig)["clusters"][0]["cluster"]["certificate-authority-data"]
        )
        assert ca == apiserver.ca_cert.read_bytes()
        # Anonymous reads the same thing (what a joining node sees).
        status, anon = raw(apiserver, "GET", CLUSTER_INFO)
        assert status == 200 and anon["data"][f"{bt.JWS_PREFIX}{signing[:6]}"]
        # The token gone, its signature goes.
        admin(apiserver, "DELETE", f"/api/v1/namespaces/kube-system/secrets/{bt.secret_name(signing[:6])}")
        await eventually(
            lambda: (
                f"{bt.JWS_PREFIX}{signing[:6]}" not in (_get(apiserver, CLUSTER_INFO) or {}).get("data", {})
            ),
            what="signature removed",
        )


async def test_tokencleaner_deletes_expired_tokens(apiserver: ApiServer) -> None:
    expired, soon, lasting = bt.generate(), bt.generate(), bt.generate()
    now = dt.datetime.now(dt.UTC)
    put_token(apiserver, expired, ttl=1, now=now - dt.timedelta(hours=1))
    put_token(apiserver, soon, ttl=3)
    put_token(apiserver, lasting, ttl=3600)
    path = "/api/v1/namespaces/kube-system/secrets/"
    async with running(apiserver, "tokencleaner"):
        await eventually(
            lambda: _get(apiserver, path + bt.secret_name(expired[:6])) is None, what="expired gone"
        )
        assert _get(apiserver, path + bt.secret_name(soon[:6])) is not None
        await eventually(lambda: _get(apiserver, path + bt.secret_name(soon[:6])) is None, what="soon gone")
        assert _get(apiserver, path + bt.secret_name(lasting[:6])) is not None
    assert whoami(apiserver, soon)[0] == 401


async def test_bootstrap_csr_is_approved_signed_and_usable(apiserver: ApiServer, tmp_path: Path) -> None:
    token = bt.generate()
    put_token(apiserver, token)
    pem, key = make_csr("system:node:join-1")
    name = _name()
    status, body = raw(apiserver, "POST", CSR_PATH, token, csr_body(name, pem, expiration=3600))
    assert status == 201, body
    async with loops(apiserver, "csrapproving", "csrsigning"):
        csr = await eventually(lambda: _csr(apiserver, name) if _cert_of(_csr(apiserver, name)) else None)
    assert _conditions(csr) == [
        ("Approved", "AutoApproved", "Auto approving kubelet client certificate after SubjectAccessReview.")
    ]
    cert = _cert_of(csr)
    assert cert is not None
    ca = x509.load_pem_x509_certificate(apiserver.ca_cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:join-1"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:nodes"
    ]
    assert cert.public_key() == key.public_key()
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH
    ]
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    # 3600 s asked, short-lived: backdated 5 minutes at the start only (upstream's policy).
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert lifetime == dt.timedelta(seconds=3600 + 300)
    assert (
        abs((cert.not_valid_before_utc + dt.timedelta(minutes=5) - dt.datetime.now(dt.UTC)).total_seconds())
        < 60
    )
    # The certificate works: the API server trusts the cluster CA for clients.
    crt, keyfile = _write_pair(tmp_path, cert, key)
    status, review = whoami(apiserver, cert=(crt, keyfile))
    assert status == 201, review
    assert review["status"]["userInfo"]["username"] == "system:node:join-1"
    assert "system:nodes" in review["status"]["userInfo"]["groups"]


def _write_pair(tmp_path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[str, str]:
    from cryptography.hazmat.primitives import serialization

    crt, keyfile = tmp_path / "node.crt", tmp_path / "node.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return str(crt), str(keyfile)


async def test_node_renews_its_own_name_only(apiserver: ApiServer, tmp_path: Path) -> None:
    apiserver.client_kubeconfig("system:node:renew-1", ("system:nodes",), tmp_path / "k")
    node = (str(tmp_path / "system_node_renew-1.crt"), str(tmp_path / "system_node_renew-1.key"))
    own_pem, _ = make_csr("system:node:renew-1")
    other_pem, _ = make_csr("system:node:renew-2")
    other, own = _name(), _name()
    assert raw(apiserver, "POST", CSR_PATH, body=csr_body(other, other_pem), cert=node)[0] == 201
    assert raw(apiserver, "POST", CSR_PATH, body=csr_body(own, own_pem), cert=node)[0] == 201
    async with loops(apiserver, "csrapproving", "csrsigning") as manager:
        csr = await eventually(lambda: _csr(apiserver, own) if _cert_of(_csr(apiserver, own)) else None)
        assert (
            _conditions(csr)[0][2]
            == "Auto approving self kubelet client certificate after SubjectAccessReview."
        )
        approver = next(c for c in manager.controllers if c.name == "csrapproving")
        # The other node's name was looked at (a nodeclient review, which system:nodes is not granted) and
        # refused, at least once, and is still pending.
        await eventually(lambda: approver.errors >= 1, what="the foreign CSR refused")
    foreign = _csr(apiserver, other)
    assert _conditions(foreign) == [] and _cert_of(foreign) is None


@pytest.mark.parametrize(
    "signer, kwargs, usages, message",
    [
        (
            SERVING,
            {"dns": ("n1.example",)},
            ("digital signature", "client auth"),
            "usages did not match [digital signature key encipherment server auth]",
        ),
        (SERVING, {}, ("digital signature", "server auth"), "DNS or IP subjectAltName is required"),
        (
            SERVING,
            {"orgs": ("other",), "ips": ("10.0.0.1",)},
            ("digital signature", "server auth"),
            "subject organization is not system:nodes",
        ),
        (
            CLIENT_KUBELET,
            {"dns": ("n1.example",)},
            ("digital signature", "client auth"),
            "DNS subjectAltNames are not allowed",
        ),
        (
            CLIENT_KUBELET,
            {"ips": ("10.0.0.1",)},
            ("digital signature", "client auth"),
            "IP subjectAltNames are not allowed",
        ),
        (
            CLIENT_KUBELET,
            {},
            ("digital signature", "server auth"),
            "usages did not match [client auth digital signature key encipherment]",
        ),
        (
            CLIENT,
            {"orgs": ()},
            ("client auth", "server auth"),
            "invalid usage for client certificate: server auth",
        ),
        (
            CLIENT,
            {"orgs": ()},
            ("digital signature",),
            "missing required usage for client certificate: client auth",
        ),
    ],
)
async def test_signer_refuses_what_it_does_not_allow(
    apiserver: ApiServer, signer: str, kwargs: dict[str, Any], usages: tuple[str, ...], message: str
) -> None:
    pem, _ = make_csr("system:node:n1", **kwargs)
    name = _name()
    assert admin(apiserver, "POST", CSR_PATH, csr_body(name, pem, signer=signer, usages=usages))[0] == 201
    assert approve(apiserver, name)[0] == 200
    async with loops(apiserver, "csrsigning"):
        csr = await eventually(
            lambda: _csr(apiserver, name) if len(_conditions(_csr(apiserver, name))) > 1 else None
        )
    # The status strategy keeps the approval conditions after the others, as upstream's.
    assert _conditions(csr)[0] == ("Failed", "SignerValidationFailure", message)
    assert _conditions(csr)[1][0] == "Approved"
    assert _cert_of(csr) is None


async def test_serving_csr_is_never_auto_approved_but_signed_once_approved(apiserver: ApiServer) -> None:
    apiserver.client_kubeconfig(
        "system:node:serve-1", ("system:nodes",), Path(apiserver.data_dir) / "serve" / "k"
    )
    node = tuple(str(Path(apiserver.data_dir) / "serve" / f"system_node_serve-1.{e}") for e in ("crt", "key"))
    pem, _ = make_csr("system:node:serve-1", dns=("serve-1",), ips=("10.1.2.3",))
    name, probe = _name(), _name()
    body = csr_body(name, pem, signer=SERVING, usages=("digital signature", "server auth"))
    assert raw(apiserver, "POST", CSR_PATH, body=body, cert=node)[0] == 201  # type: ignore[arg-type]
    own_pem, _ = make_csr("system:node:serve-1")
    assert raw(apiserver, "POST", CSR_PATH, body=csr_body(probe, own_pem), cert=node)[0] == 201  # type: ignore[arg-type]
    async with loops(apiserver, "csrapproving", "csrsigning"):
        # The client CSR sent after it is approved: the serving one was seen and left alone.
        await eventually(lambda: _cert_of(_csr(apiserver, probe)), what="the client CSR signed")
        assert _conditions(_csr(apiserver, name)) == []
        assert approve(apiserver, name)[0] == 200
        csr = await eventually(lambda: _csr(apiserver, name) if _cert_of(_csr(apiserver, name)) else None)
    cert = _cert_of(csr)
    assert cert is not None
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["serve-1"]
    assert [str(i) for i in sans.get_values_for_type(x509.IPAddress)] == ["10.1.2.3"]
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH
    ]
    # No expirationSeconds: the cluster's signing duration (a year), backdated at both ends.
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == dt.timedelta(days=365)


async def test_signing_duration_caps_and_floors(apiserver: ApiServer) -> None:
    pem, _ = make_csr("alice", orgs=())
    name = _name()
    body = csr_body(name, pem, signer=CLIENT, usages=("client auth",), expiration=10 * 365 * 86400)
    assert admin(apiserver, "POST", CSR_PATH, body)[0] == 201
    assert approve(apiserver, name)[0] == 200
    async with loops(apiserver, "csrsigning", cluster_signing_duration=7200.0):
        csr = await eventually(lambda: _csr(apiserver, name) if _cert_of(_csr(apiserver, name)) else None)
    cert = _cert_of(csr)
    assert cert is not None
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == dt.timedelta(seconds=7200 + 300)


async def test_csrcleaner_deletes_past_deadlines(apiserver: ApiServer) -> None:
    pem, _ = make_csr("bob", orgs=())
    denied, pending = _name(), _name()
    for name in (denied, pending):
        assert admin(apiserver, "POST", CSR_PATH, csr_body(name, pem, signer="example.com/x"))[0] == 201
    assert approve(apiserver, denied, "Denied")[0] == 200
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    async with loops(apiserver, "csrcleaner", csrcleaner_clock=lambda: later) as manager:
        await eventually(lambda: not _csr(apiserver, denied), what="the denied CSR deleted")
        cleaner = next(c for c in manager.controllers if c.name == "csrcleaner")
        await eventually(lambda: cleaner.syncs >= 2, what="both CSRs looked at")
    assert _csr(apiserver, pending)  # pending for a day before it goes
