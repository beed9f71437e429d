"""A node's join credentials exchanged through the API only, as kubelet TLS bootstrap does on a kubeadm
cluster with bootstrap tokens on: the administrator creates a bootstrap token Secret; anonymously, the
node reads kube-public/cluster-info and checks its JWS signature with the token; with the token as its
bearer it posts a kube-apiserver-client-kubelet CSR for system:node:<name>, which the cluster approves
and signs on its own; with that certificate it is system:node:<name>. A wrong or expired token is a 401.
Nothing here knows which cluster it talks to."""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.waiting import wait_for
from kubeclient import bootstraptoken as bt

NODE_GROUP = "system:bootstrappers:kubeadm:default-node-token"


def _client(
    admin_api: client.ApiClient, token: str | None = None, cert: tuple[Path, Path] | None = None
) -> client.ApiClient:
    base = admin_api.configuration
    cfg = client.Configuration()
    cfg.host = base.host
    cfg.ssl_ca_cert = base.ssl_ca_cert
    cfg.verify_ssl = True
    if token is not None:
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
    if cert is not None:
        cfg.cert_file, cfg.key_file = str(cert[0]), str(cert[1])
    return client.ApiClient(cfg)


def _whoami(api: client.ApiClient) -> client.V1UserInfo:
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        client.V1SelfSubjectReview(metadata=client.V1ObjectMeta())
    )
    return review.status.user_info


@pytest.fixture
def token(kube: client.CoreV1Api) -> Iterator[str]:
    value = bt.generate()
    secret = bt.token_secret(value, 900, groups=(NODE_GROUP,), description="e2e join")
    kube.create_namespaced_secret(bt.NAMESPACE, secret)
    yield value
    try:
        kube.delete_namespaced_secret(bt.secret_name(value[:6]), bt.NAMESPACE)
    except ApiException as err:
        if err.status != 404:
            raise


def test_join_credentials_through_the_api(
    api_client: client.ApiClient, kube: client.CoreV1Api, token: str, tmp_path: Path
) -> None:
    certs = client.CertificatesV1Api(api_client)
    # 1. Discovery: cluster-info, anonymously, signed with this token.
    anonymous = client.CoreV1Api(_client(api_client))

    def signed() -> client.V1ConfigMap | None:
        cm = anonymous.read_namespaced_config_map(bt.CLUSTER_INFO, bt.CLUSTER_INFO_NAMESPACE)
        return cm if f"{bt.JWS_PREFIX}{token[:6]}" in (cm.data or {}) else None

    cm = wait_for(signed, timeout=60, what="cluster-info signed with the new token")
    kubeconfig = cm.data[bt.KUBECONFIG_KEY]
    assert bt.verify_detached_signature(
        kubeconfig, cm.data[f"{bt.JWS_PREFIX}{token[:6]}"], token[:6], token[7:]
    )
    ca = base64.b64decode(yaml.safe_load(kubeconfig)["clusters"][0]["cluster"]["certificate-authority-data"])
    assert x509.load_pem_x509_certificates(ca)

    # 2. The bootstrap identity.
    bootstrap = _client(api_client, token=token)
    me = _whoami(bootstrap)
    assert me.username == f"system:bootstrap:{token[:6]}"
    assert "system:bootstrappers" in me.groups and NODE_GROUP in me.groups

    # 3. The node's client certificate through a CSR.
    node = f"e2e-join-{uuid.uuid4().hex[:6]}"
    key = ec.generate_private_key(ec.SECP256R1())
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                    x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}"),
                ]
            )
        )
        .sign(key, hashes.SHA256())
    )
    name = f"node-csr-{uuid.uuid4().hex[:10]}"
    body = client.V1CertificateSigningRequest(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1CertificateSigningRequestSpec(
            request=base64.b64encode(request.public_bytes(serialization.Encoding.PEM)).decode(),
            signer_name="kubernetes.io/kube-apiserver-client-kubelet",
            usages=["digital signature", "client auth"],
            expiration_seconds=3600,
        ),
    )
    created = client.CertificatesV1Api(bootstrap).create_certificate_signing_request(body)
    try:
        assert created.spec.username == f"system:bootstrap:{token[:6]}"

        def issued() -> client.V1CertificateSigningRequest | None:
            csr = certs.read_certificate_signing_request(name)
            return csr if csr.status and csr.status.certificate else None

        csr = wait_for(issued, timeout=60, what="the CSR approved and signed")
        assert [(c.type, c.reason) for c in csr.status.conditions] == [("Approved", "AutoApproved")]
        cert = x509.load_pem_x509_certificate(base64.b64decode(csr.status.certificate))
        assert cert.public_key() == key.public_key()
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{node}"
        lifetime = cert.not_valid_after_utc - dt.datetime.now(dt.UTC)
        assert dt.timedelta(minutes=50) < lifetime <= dt.timedelta(hours=1, minutes=1)

        # 4. The certificate is the node's identity.
        crt, keyfile = tmp_path / "node.crt", tmp_path / "node.key"
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        keyfile.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        me = _whoami(_client(api_client, cert=(crt, keyfile)))
        assert me.username == f"system:node:{node}"
        assert "system:nodes" in me.groups
    finally:
        certs.delete_certificate_signing_request(name)


def test_wrong_and_expired_tokens_get_401(
    api_client: client.ApiClient, kube: client.CoreV1Api, token: str
) -> None:
    with pytest.raises(ApiException) as wrong:
        _whoami(_client(api_client, token=token[:7] + "0000000000000000"))
    assert wrong.value.status == 401
    expired = bt.generate()
    secret = bt.token_secret(
        expired, 1, groups=(NODE_GROUP,), now=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    )
    kube.create_namespaced_secret(bt.NAMESPACE, secret)
    with pytest.raises(ApiException) as refused:
        _whoami(_client(api_client, token=expired))
    assert refused.value.status == 401

    # The token cleaner (on in kubeadm's controller manager) deletes the expired token's Secret.
    def gone() -> bool:
        try:
            kube.read_namespaced_secret(bt.secret_name(expired[:6]), bt.NAMESPACE)
        except ApiException as err:
            return err.status == 404
        return False

    wait_for(gone, timeout=60, what="the expired token Secret deleted")
