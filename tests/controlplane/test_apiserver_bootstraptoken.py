"""Bootstrap tokens against the real API server with --enable-bootstrap-token-auth: a valid token is
system:bootstrap:<id> in system:bootstrappers and its extra groups; every broken, expired, deleted or
unknown token is a bare 401; anonymous may read kube-public/cluster-info (kubeadm's Role) and nothing else
there; the server keeps cluster-info's kubeconfig (its address and CA) and kubeadm's join RBAC."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kubeclient import bootstraptoken as bt
from pykubelet.rig.apiserver import ApiServer
from tests.controlplane.joinutil import admin, put_token, raw, whoami

pytestmark = pytest.mark.integration  # real servers, etcd or processes


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("bt-api"), extra_args=["--enable-bootstrap-token-auth"]) as s:
        yield s


def _secret(server: ApiServer, token: str, mutate: Any) -> None:
    secret = bt.token_secret(token, 3600)
    mutate(secret)
    status, body = admin(server, "POST", f"/api/v1/namespaces/{bt.NAMESPACE}/secrets", secret)
    assert status == 201, body


def test_token_authenticates_as_bootstrap_user(server: ApiServer) -> None:
    token = bt.generate()
    put_token(server, token, groups=(bt.KUBEADM_DEFAULT_GROUP, "system:bootstrappers:extra"))
    status, review = whoami(server, token)
    assert status == 201, review
    user = review["status"]["userInfo"]
    assert user["username"] == f"system:bootstrap:{token[:6]}"
    assert user["groups"] == [
        "system:bootstrappers",
        bt.KUBEADM_DEFAULT_GROUP,
        "system:bootstrappers:extra",
        "system:authenticated",
    ]


def test_bootstrap_identity_may_create_csrs_but_not_read_secrets(server: ApiServer) -> None:
    token = bt.generate()
    put_token(server, token)
    status, _ = raw(server, "GET", "/apis/certificates.k8s.io/v1/certificatesigningrequests", token)
    assert status == 200  # kubeadm:kubelet-bootstrap -> system:node-bootstrapper
    status, body = raw(server, "GET", f"/api/v1/namespaces/{bt.NAMESPACE}/secrets", token)
    assert status == 403, body


def _flip(key: str, value: str | None) -> Any:
    def mutate(secret: dict[str, Any]) -> None:
        if value is None:
            secret["data"].pop(key, None)
        else:
            secret["data"][key] = base64.b64encode(value.encode()).decode()

    return mutate


@pytest.mark.parametrize(
    "case, mutate",
    [
        ("expired", _flip(bt.EXPIRATION, "2020-01-01T00:00:00Z")),
        ("bad expiration", _flip(bt.EXPIRATION, "tomorrow")),
        ("no authentication usage", _flip(bt.USAGE_AUTHENTICATION, None)),
        ("usage not true", _flip(bt.USAGE_AUTHENTICATION, "yes")),
        ("group outside system:bootstrappers", _flip(bt.EXTRA_GROUPS, "system:masters")),
        ("token-id differs from the name", _flip(bt.TOKEN_ID, "zzzzzz")),
    ],
)
def test_broken_token_secrets_give_401(server: ApiServer, case: str, mutate: Any) -> None:
    token = bt.generate()
    _secret(server, token, mutate)
    status, body = whoami(server, token)
    assert status == 401, (case, body)
    assert body["reason"] == "Unauthorized"


def test_wrong_secret_unknown_id_and_wrong_type_give_401(server: ApiServer) -> None:
    token = bt.generate()
    put_token(server, token)
    assert whoami(server, token)[0] == 201
    assert whoami(server, token[:7] + "0123456789abcdef")[0] == 401
    assert whoami(server, bt.generate())[0] == 401
    other = bt.generate()
    _secret(server, other, lambda s: s.update(type="Opaque"))
    assert whoami(server, other)[0] == 401


def test_deleted_token_stops_working(server: ApiServer) -> None:
    token = bt.generate()
    put_token(server, token)
    # Never authenticated before the delete, so no cache entry keeps it alive.
    status, _ = admin(
        server, "DELETE", f"/api/v1/namespaces/{bt.NAMESPACE}/secrets/{bt.secret_name(token[:6])}"
    )
    assert status == 200
    assert whoami(server, token)[0] == 401


def test_anonymous_reads_cluster_info_only(server: ApiServer) -> None:
    status, cm = raw(server, "GET", "/api/v1/namespaces/kube-public/configmaps/cluster-info")
    assert status == 200, cm
    config = yaml.safe_load(cm["data"]["kubeconfig"])
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"] == server.url
    assert base64.b64decode(cluster["certificate-authority-data"]) == server.ca_cert.read_bytes()
    assert "users" not in config or not config["users"]
    assert raw(server, "GET", "/api/v1/namespaces/kube-public/configmaps")[0] == 403
    status, _ = admin(
        server,
        "POST",
        "/api/v1/namespaces/kube-public/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}, "data": {"a": "b"}},
    )
    assert status == 201
    assert raw(server, "GET", "/api/v1/namespaces/kube-public/configmaps/other")[0] == 403


def test_kubeadm_join_rbac_is_there(server: ApiServer) -> None:
    for name, role in (
        ("kubeadm:kubelet-bootstrap", "system:node-bootstrapper"),
        (
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        ),
        (
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        ),
    ):
        status, binding = admin(
            server, "GET", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}"
        )
        assert status == 200, binding
        assert binding["roleRef"]["name"] == role


def test_ca_cert_hash_is_sha256_of_the_spki(server: ApiServer) -> None:
    import hashlib

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    pem = server.ca_cert.read_bytes()
    spki = (
        x509.load_pem_x509_certificate(pem)
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    assert bt.ca_cert_hash(pem) == "sha256:" + hashlib.sha256(spki).hexdigest()


def test_server_without_the_flag_refuses_bootstrap_tokens(apiserver: ApiServer) -> None:
    token = bt.generate()
    put_token(apiserver, token)
    assert whoami(apiserver, token)[0] == 401
