"""Each controller on its own identity (upstream's --use-service-account-credentials, which kubeadm sets):
controller X acts as the service account kube-system/<X's account>, bound by the bootstrap policy to
`system:controller:<account>`, while the shared informers and leader election use the manager's own
identity (system:kube-controller-manager: list and watch of everything, its lease).

Upstream's builder obtains a token for each account through the TokenRequest API. Here the manager
signs itself a client certificate for the account with the cluster signing CA kubeadm hands it
(--cluster-signing-cert-file/--cluster-signing-key-file): the same user name and groups
(`system:serviceaccount:kube-system:<account>`, system:serviceaccounts, system:serviceaccounts:kube-system)
reach the authorizer, and it needs no token authenticator. The account's ServiceAccount object is
created in kube-system as upstream's builder does. Without --use-service-account-credentials every
controller uses the manager's client, as upstream (which then needs broader bindings).
"""

from __future__ import annotations

import datetime as dt
import logging
import warnings
from dataclasses import replace
from typing import Protocol

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubeclient.client import KubeClient
from kubeclient.errors import ApiError

log = logging.getLogger("controlplane.controllers")

NAMESPACE = "kube-system"
_VALIDITY = dt.timedelta(days=365)


def _authority_key_id(ca_cert: x509.Certificate) -> x509.AuthorityKeyIdentifier:
    """The issuer's key id, as every certificate kubeadm's CA signs carries it (OpenSSL 3's strict chain
    checks, Python 3.13's default, refuse a leaf without it): the CA's own SubjectKeyIdentifier when it has
    one, else the id computed from its key."""
    try:
        ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        return x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key())  # type: ignore[arg-type]
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def account_user(account: str) -> str:
    return f"system:serviceaccount:{NAMESPACE}:{account}"


class ClientBuilder(Protocol):
    async def client(self, account: str) -> KubeClient:
        """The client controller code acting as `account` uses."""
        ...

    async def close(self) -> None: ...


class RootClientBuilder:
    """--use-service-account-credentials=false: one client, the manager's, for every controller."""

    def __init__(self, root: KubeClient) -> None:
        self.root = root

    async def client(self, account: str) -> KubeClient:
        return self.root

    async def close(self) -> None:
        return None


def sign_client_certificate(
    ca_cert_pem: bytes, ca_key_pem: bytes, user: str, groups: tuple[str, ...]
) -> tuple[bytes, bytes]:
    """(certificate, key) PEM of a client certificate for `user` (CN) in `groups` (O), signed by the CA."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError("the cluster signing key is neither an EC nor an RSA private key")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    with warnings.catch_warnings():
        # Kubernetes user names outgrow X.509's 64-character bound on a common name
        # (system:serviceaccount:kube-system:clusterrole-aggregation-controller); Go's and OpenSSL's parsers
        # read them, only cryptography's builder objects.
        warnings.simplefilter("ignore", UserWarning)
        common_name = x509.NameAttribute(NameOID.COMMON_NAME, user, _validate=False)
    subject = x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups), common_name])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(_authority_key_id(ca_cert), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


class ServiceAccountCredentials:
    """--use-service-account-credentials: a client per account, made once, its account ensured."""

    def __init__(
        self, root: KubeClient, ca_cert_pem: bytes, ca_key_pem: bytes, qps: float, burst: int
    ) -> None:
        self.root = root
        self.ca_cert_pem = ca_cert_pem
        self.ca_key_pem = ca_key_pem
        self.qps, self.burst = qps, burst
        self._clients: dict[str, KubeClient] = {}

    async def client(self, account: str) -> KubeClient:
        found = self._clients.get(account)
        if found is None:
            await self._ensure_account(account)
            cert, key = sign_client_certificate(
                self.ca_cert_pem,
                self.ca_key_pem,
                account_user(account),
                ("system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"),
            )
            config = replace(
                self.root.config,
                client_cert_data=cert,
                client_key_data=key,
                token=None,
                token_file=None,
                username=None,
                password=None,
            )
            found = self._clients[account] = KubeClient(
                config, qps=self.qps, burst=self.burst, component="kube-controller-manager"
            )
        return found

    async def _ensure_account(self, account: str) -> None:
        """The ServiceAccount object, as upstream's builder creates it (get, then create if missing)."""
        path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts"
        try:
            await self.root.get(f"{path}/{account}")
            return
        except ApiError as err:
            if not err.not_found:
                raise
        try:
            await self.root.create(
                path,
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": account, "namespace": NAMESPACE},
                },
            )
            log.info("service account created account=%s/%s", NAMESPACE, account)
        except ApiError as err:
            if not err.already_exists:
                raise

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()


__all__ = [
    "ClientBuilder",
    "RootClientBuilder",
    "ServiceAccountCredentials",
    "account_user",
    "sign_client_certificate",
]
