"""The pure parts of the join-credential loops: cluster-bootstrap's JWS (upstream's own test vector),
token Secret parsing with upstream's rules, each signer's checks, the signing durations, the approver's
recognizers and the cleaner's deadlines."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from controlplane.controllers.bootstrap.bootstrapsigner import signatures
from controlplane.controllers.certificates import approving, cleaner, signers
from controlplane.controllers.certificates.authority import CertificateAuthority, duration
from kubeclient import bootstraptoken as bt
from tests.controlplane.joinutil import csr_body, make_csr

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


def test_detached_signature_matches_cluster_bootstraps_vector() -> None:
    # k8s.io/cluster-bootstrap/token/jws/jws_test.go
    content = "Hello from the other side. I must have called a thousand times."
    sig = bt.detached_signature(content, "joshua", "my voice is my passcode")
    assert sig == "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8"
    assert bt.verify_detached_signature(content, sig, "joshua", "my voice is my passcode")
    assert not bt.verify_detached_signature(content, sig, "other", "my voice is my passcode")


def test_token_secret_round_trip_and_rules() -> None:
    secret = bt.token_secret("abcdef.0123456789abcdef", 3600, description="d", now=NOW)
    token, why = bt.parse_secret(secret)
    assert why == "" and token is not None
    assert token.expiration == NOW + dt.timedelta(hours=1)
    assert token.usages == {"authentication", "signing"} and token.groups == (bt.KUBEADM_DEFAULT_GROUP,)
    assert not token.expired(NOW) and token.expired(NOW + dt.timedelta(hours=1))
    forever, _ = bt.parse_secret(bt.token_secret("abcdef.0123456789abcdef", 0))
    assert forever is not None and forever.expiration is None and not forever.expired()
    with pytest.raises(ValueError):
        bt.token_secret("ABCDEF.0123456789abcdef", 0)
    assert bt.validate_group("system:bootstrappers:a:b") == ""
    assert bt.validate_group("system:bootstrappers:") != ""
    assert bt.validate_group("system:nodes") != ""


def test_signer_keeps_only_valid_signing_tokens() -> None:
    good = bt.token_secret("aaaaaa.0123456789abcdef", 3600, now=NOW)
    auth_only = bt.token_secret("bbbbbb.0123456789abcdef", 3600, usages=("authentication",), now=NOW)
    expired = bt.token_secret("cccccc.0123456789abcdef", 60, now=NOW - dt.timedelta(hours=1))
    wanted, soonest = signatures("kubeconfig", [good, auth_only, expired], NOW)
    assert list(wanted) == ["jws-kubeconfig-aaaaaa"]
    assert soonest == 3600


def _req(**kwargs):  # type: ignore[no-untyped-def]
    pem, _ = make_csr("system:node:n1", **kwargs)
    return x509.load_pem_x509_csr(pem)


def test_signer_checks() -> None:
    assert signers.kubelet_client_error(_req(), ["digital signature", "client auth"]) == ""
    assert (
        signers.kubelet_client_error(_req(), ["digital signature", "key encipherment", "client auth"]) == ""
    )
    assert signers.kubelet_client_error(_req(orgs=("system:nodes", "x")), ["client auth"]) == (
        "subject organization is not system:nodes"
    )
    other = x509.load_pem_x509_csr(make_csr("alice")[0])
    assert signers.kubelet_client_error(other, ["digital signature", "client auth"]) == (
        "subject common name does not begin with system:node:"
    )
    assert signers.kubelet_serving_error(_req(ips=("10.0.0.1",)), ["digital signature", "server auth"]) == ""
    assert signers.apiserver_client_error(["key encipherment", "client auth"]) == ""


def test_durations() -> None:
    year = dt.timedelta(days=365)
    assert duration(None, year) == year
    assert duration(3600, year) == dt.timedelta(hours=1)
    assert duration(10 * 365 * 86400, year) == year
    assert duration(60, year) == dt.timedelta(minutes=10)  # the floor (the API refuses < 600 anyway)


def _authority() -> CertificateAuthority:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "ca")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(NOW - dt.timedelta(days=1))
        .not_valid_after(NOW + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority.load(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


def test_authority_backdates_and_never_outlives_the_ca() -> None:
    ca = _authority()
    long = x509.load_pem_x509_certificate(ca.sign(_req(), ["client auth"], dt.timedelta(days=365), NOW))
    assert long.not_valid_before_utc == NOW - dt.timedelta(minutes=5)
    assert long.not_valid_after_utc == ca.cert.not_valid_after_utc
    mid = x509.load_pem_x509_certificate(ca.sign(_req(), ["client auth"], dt.timedelta(hours=10), NOW))
    assert mid.not_valid_after_utc == NOW + dt.timedelta(hours=10) - dt.timedelta(minutes=5)
    short = x509.load_pem_x509_certificate(ca.sign(_req(), ["client auth"], dt.timedelta(hours=1), NOW))
    assert short.not_valid_after_utc == NOW + dt.timedelta(hours=1)
    assert x509.KeyUsage not in [type(e.value) for e in short.extensions]


def _csr(username: str, cn: str, signer: str = signers.KUBE_APISERVER_CLIENT_KUBELET) -> dict:
    body = csr_body("x", make_csr(cn)[0], signer=signer)
    body["spec"]["username"] = username
    return body


def test_approver_recognizers() -> None:
    own = approving.recognized(_csr("system:node:n1", "system:node:n1"))
    assert [r.subresource for r in own] == ["selfnodeclient", "nodeclient"]
    assert [
        r.subresource for r in approving.recognized(_csr("system:bootstrap:abcdef", "system:node:n1"))
    ] == ["nodeclient"]
    assert approving.recognized(_csr("system:node:n1", "system:node:n1", signers.KUBELET_SERVING)) == []
    bad = _csr("system:node:n1", "system:node:n1")
    bad["spec"]["usages"] = ["server auth"]
    assert approving.recognized(bad) == []


def _with(conditions: list[dict], certificate: bytes = b"", created: dt.datetime = NOW) -> dict:
    status: dict = {"conditions": conditions}
    if certificate:
        status["certificate"] = base64.b64encode(certificate).decode()
    return {"metadata": {"creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ")}, "status": status}


def test_cleaner_deadlines() -> None:
    stamp = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert cleaner.deadline(_with([])) == NOW + dt.timedelta(hours=24)
    assert cleaner.deadline(_with([{"type": "Denied", "lastUpdateTime": stamp}])) == NOW + dt.timedelta(
        hours=1
    )
    assert cleaner.deadline(_with([{"type": "Failed", "lastUpdateTime": stamp}])) == NOW + dt.timedelta(
        hours=1
    )
    assert cleaner.deadline(_with([{"type": "Approved", "lastUpdateTime": stamp}])) is None  # not issued yet
    ca = _authority()
    cert = ca.sign(_req(), ["client auth"], dt.timedelta(minutes=30), NOW)
    issued = _with([{"type": "Approved", "lastUpdateTime": stamp}], cert)
    assert cleaner.deadline(issued) == NOW + dt.timedelta(minutes=30)  # expired before the hour is up


def test_bootstrap_loops_are_off_by_default_and_kubeadms_set_turns_them_on() -> None:
    from controlplane.controllers.registry import enabled

    default = enabled("*")
    assert {"csrapproving", "csrsigning", "csrcleaner"} <= set(default)
    assert not {"bootstrapsigner", "tokencleaner"} & set(default)
    assert {"bootstrapsigner", "tokencleaner"} <= set(enabled("*,bootstrapsigner,tokencleaner"))
