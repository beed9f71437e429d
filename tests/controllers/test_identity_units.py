"""The controllers' identities and the aggregation rule, without a server: the client certificate the
manager signs for a controller's service account (subject as a service account token would name it,
signed by the cluster CA, a name beyond X.509's 64 characters kept whole), each controller's account,
and which rules an aggregation rule gathers."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from controlplane.controllers.clientbuilder import account_user, sign_client_certificate
from controlplane.controllers.clusterroleaggregation import aggregated_rules
from controlplane.controllers.registry import CONTROLLERS


def make_ca() -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


@pytest.mark.filterwarnings("ignore:Attribute's length must be:UserWarning")  # reading the long name back
def test_service_account_certificate() -> None:
    ca_pem, ca_key = make_ca()
    user = account_user("clusterrole-aggregation-controller")
    assert len(user) > 64
    cert_pem, key_pem = sign_client_certificate(
        ca_pem, ca_key, user, ("system:serviceaccounts", "system:serviceaccounts:kube-system")
    )
    cert = x509.load_pem_x509_certificate(cert_pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == user
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
    ]
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert.verify_directly_issued_by(ca)
    assert serialization.load_pem_private_key(key_pem, None).public_key() == cert.public_key()


def test_each_controller_has_upstreams_account() -> None:
    accounts = {name: cls.account_name() for name, cls in CONTROLLERS.items()}
    assert accounts["replicaset"] == "replicaset-controller"
    assert accounts["garbage-collector"] == "generic-garbage-collector"
    assert accounts["serviceaccount"] == "service-account-controller"
    assert accounts["root-ca-cert-publisher"] == "root-ca-cert-publisher"
    assert accounts["nodelifecycle"] == accounts["taint-eviction-controller"] == "node-controller"
    assert accounts["podgc"] == "pod-garbage-collector"
    assert accounts["clusterrole-aggregation"] == "clusterrole-aggregation-controller"


def role(name: str, labels: dict[str, str], rules: list[dict]) -> dict:
    return {"metadata": {"name": name, "labels": labels}, "rules": rules}


def test_aggregation_gathers_matching_roles_in_name_order_once() -> None:
    target = {
        "metadata": {"name": "t"},
        "aggregationRule": {
            "clusterRoleSelectors": [
                {"matchLabels": {"a": "1"}},
                {"matchExpressions": [{"key": "b", "operator": "Exists"}]},
            ]
        },
    }
    get = {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}
    put = {"verbs": ["update"], "apiGroups": [""], "resources": ["pods"]}
    roles = [
        target,
        role("z", {"a": "1"}, [put, get]),
        role("y", {"a": "1"}, [get]),
        role("x", {"b": ""}, [get]),
        role("w", {"c": "1"}, [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]),
    ]
    assert aggregated_rules(target, roles) == [get, put]
    # its own rules never feed it, even when it matches its own selector
    selfish = {**target, "metadata": {"name": "s", "labels": {"a": "1"}}, "rules": [put]}
    assert aggregated_rules(selfish, [selfish]) == []
