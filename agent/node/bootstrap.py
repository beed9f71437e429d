"""TLS bootstrap (`--bootstrap-kubeconfig`; upstream's pkg/kubelet/certificate/bootstrap): a node that
has no usable client certificate yet gets one through the CSR API with its bootstrap credential, then
runs as `system:node:<name>`.

1. The kubeconfig (--kubeconfig, default ROOT/kubeconfig) already names a client certificate that
   loads and has not expired: nothing to do (a restarted agent keeps its identity).
2. Otherwise an ECDSA P-256 key is made (kept as `pki/kubelet-client.key.tmp` until the certificate
   comes, so a restart mid-way asks again for the same key), a CSR for O=system:nodes,
   CN=system:node:<name> (signer kubernetes.io/kube-apiserver-client-kubelet, usages digital signature
   and client auth, key encipherment too for RSA keys) is posted with the bootstrap kubeconfig's
   credential under a name derived from the key and subject (`node-csr-...`, so a retry finds its own
   CSR), and its certificate waited for with a watch.
3. Certificate and key go into `pki/kubelet-client-<time>.pem` (0600), `pki/kubelet-client-current.pem`
   is pointed at it, and the kubeconfig is written with the bootstrap kubeconfig's server and CA and that
   file as client certificate and key, as upstream's kubelet writes it.

A denied or failed CSR ends the bootstrap with the condition's reason and message.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from kubeclient.client import KubeClient
from kubeclient.config import ClusterConfig, ConfigError, load_kubeconfig
from kubeclient.errors import ApiError

log = logging.getLogger("agent.node.bootstrap")

CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
CURRENT = "kubelet-client-current.pem"
KEY_TMP = "kubelet-client.key.tmp"
WAIT_TIMEOUT = 3600.0  # upstream waits for an hour before it gives up on a CSR


class BootstrapError(Exception):
    pass


@dataclass(frozen=True)
class ClientPaths:
    kubeconfig: Path
    cert_dir: Path

    @property
    def current(self) -> Path:
        return self.cert_dir / CURRENT


def paths_for(root_dir: str, kubeconfig: str | None, cert_dir: str = "") -> ClientPaths:
    return ClientPaths(
        Path(kubeconfig or Path(root_dir) / "kubeconfig"), Path(cert_dir or Path(root_dir) / "pki")
    )


def valid_certificate(pem_file: Path, now: dt.datetime | None = None) -> x509.Certificate | None:
    """The certificate in `pem_file` if it loads, has a key beside it, and is within its validity."""
    try:
        data = pem_file.read_bytes()
        cert = x509.load_pem_x509_certificate(data)
        serialization.load_pem_private_key(data, None)
    except (OSError, ValueError):
        return None
    now = now or dt.datetime.now(dt.UTC)
    if not cert.not_valid_before_utc <= now < cert.not_valid_after_utc:
        return None
    return cert


def _kubeconfig_cert(path: Path) -> Path | None:
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    for user in doc.get("users") or []:
        cert = (user.get("user") or {}).get("client-certificate")
        if cert:
            p = Path(cert)
            return p if p.is_absolute() else path.parent / p
    return None


def usable_kubeconfig(paths: ClientPaths) -> bool:
    cert = _kubeconfig_cert(paths.kubeconfig)
    return cert is not None and valid_certificate(cert) is not None


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".writing")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def load_or_make_key(path: Path) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), None)
        if isinstance(key, ec.EllipticCurvePrivateKey):
            return key
    except (OSError, ValueError):
        pass
    key = ec.generate_private_key(ec.SECP256R1())
    _write_private(path, key_pem(key))
    return key


def usages_for(key: Any) -> list[str]:
    usages = ["digital signature", "client auth"]
    if isinstance(key, rsa.RSAPrivateKey):
        usages.append("key encipherment")
    return usages


def csr_for(node_name: str, key: ec.EllipticCurvePrivateKey) -> bytes:
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}"),
        ]
    )
    request = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    return request.public_bytes(serialization.Encoding.PEM)


def digested_name(key: ec.EllipticCurvePrivateKey, node_name: str, usages: list[str]) -> str:
    """A CSR name fixed by the key, subject and usages (upstream's digestedName), so a retry with the
    same key finds its own CSR."""
    h = hashlib.sha512()
    public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    for part in (public, b"system:nodes", f"system:node:{node_name}".encode(), *(u.encode() for u in usages)):
        h.update(len(part).to_bytes(4, "big") + part)
    return "node-csr-" + base64.urlsafe_b64encode(h.digest()[:32]).rstrip(b"=").decode()


async def request_certificate(
    client: KubeClient,
    node_name: str,
    key: ec.EllipticCurvePrivateKey,
    name: str = "",
    expiration_seconds: int | None = None,
    wait_seconds: float = WAIT_TIMEOUT,
) -> bytes:
    """Post a kubelet client CSR for `key` and wait (watch) until it is issued: the certificate PEM."""
    usages = usages_for(key)
    name = name or digested_name(key, node_name, usages)
    spec: dict[str, Any] = {
        "request": base64.b64encode(csr_for(node_name, key)).decode(),
        "signerName": SIGNER,
        "usages": usages,
    }
    if expiration_seconds is not None:
        spec["expirationSeconds"] = expiration_seconds
    body = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": spec,
    }
    try:
        await client.create(CSR_PATH, body)
        log.info("event=csr-created csr=%s node=%s", name, node_name)
    except ApiError as err:
        if err.status != 409:
            raise BootstrapError(f"CSR {name}: create: {err}") from None
        log.info("event=csr-exists csr=%s node=%s", name, node_name)
    return await asyncio.wait_for(_wait_issued(client, name), wait_seconds)


def _verdict(csr: dict[str, Any]) -> bytes | None:
    name = csr["metadata"]["name"]
    for c in (csr.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Denied":
            raise BootstrapError(
                f"certificate signing request {name} is denied, reason: {c.get('reason', '')}, message: {c.get('message', '')}"
            )
        if c.get("type") == "Failed":
            raise BootstrapError(
                f"certificate signing request {name} failed, reason: {c.get('reason', '')}, message: {c.get('message', '')}"
            )
    raw = (csr.get("status") or {}).get("certificate")
    approved = any(c.get("type") == "Approved" for c in (csr.get("status") or {}).get("conditions") or [])
    return base64.b64decode(raw) if raw and approved else None


async def _wait_issued(client: KubeClient, name: str) -> bytes:
    while True:
        listed = await client.get(CSR_PATH, fieldSelector=f"metadata.name={name}")
        for csr in listed.get("items") or []:
            if (cert := _verdict(csr)) is not None:
                return cert
        rv = (listed.get("metadata") or {}).get("resourceVersion", "")
        try:
            params = {"resourceVersion": rv, "fieldSelector": f"metadata.name={name}", "timeoutSeconds": 300}
            async for event in client.watch(CSR_PATH, params):
                obj = event.get("object") or {}
                if event.get("type") in ("ADDED", "MODIFIED") and (cert := _verdict(obj)) is not None:
                    return cert
        except ApiError as err:
            if err.status not in (0, 410):  # a broken stream or a too-old revision: list again
                raise
        await asyncio.sleep(0.5)


def store_pair(
    cert_dir: Path, cert_pem: bytes, key: ec.EllipticCurvePrivateKey, now: dt.datetime | None = None
) -> Path:
    """Write `kubelet-client-<time>.pem` (certificate then key, 0600) and point the current link at it."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d-%H-%M-%S")
    pem = cert_dir / f"kubelet-client-{stamp}.pem"
    _write_private(pem, cert_pem + key_pem(key))
    link = cert_dir / CURRENT
    tmp_link = cert_dir / (CURRENT + ".new")
    tmp_link.unlink(missing_ok=True)
    tmp_link.symlink_to(pem.name)
    os.replace(tmp_link, link)
    return link


def write_kubeconfig(path: Path, bootstrap: ClusterConfig, client_pem: Path) -> None:
    cluster: dict[str, Any] = {"server": bootstrap.server}
    if bootstrap.ca_data:
        cluster["certificate-authority-data"] = base64.b64encode(bootstrap.ca_data).decode()
    elif bootstrap.ca_file:
        cluster["certificate-authority"] = str(Path(bootstrap.ca_file).resolve())
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": cluster}],
        "contexts": [
            {
                "name": "default-context",
                "context": {"cluster": "default-cluster", "namespace": "default", "user": "default-auth"},
            }
        ],
        "current-context": "default-context",
        "preferences": {},
        "users": [
            {
                "name": "default-auth",
                "user": {"client-certificate": str(client_pem), "client-key": str(client_pem)},
            }
        ],
    }
    _write_private(path, yaml.safe_dump(doc, sort_keys=False).encode())


async def bootstrap_client(
    root_dir: str, kubeconfig: str | None, bootstrap_kubeconfig: str, node_name: str, cert_dir: str = ""
) -> Path:
    """Make sure the node kubeconfig holds a usable client certificate (LoadClientCert); its path."""
    paths = paths_for(root_dir, kubeconfig, cert_dir)
    if await asyncio.to_thread(usable_kubeconfig, paths):
        log.info("event=client-certificate-valid kubeconfig=%s", paths.kubeconfig)
        return paths.kubeconfig
    try:
        bootstrap = load_kubeconfig(bootstrap_kubeconfig)
    except ConfigError as err:
        raise BootstrapError(f"bootstrap kubeconfig {bootstrap_kubeconfig}: {err}") from None
    key = await asyncio.to_thread(load_or_make_key, paths.cert_dir / KEY_TMP)
    client = KubeClient(bootstrap, component="kubelet")
    try:
        cert = await request_certificate(client, node_name, key)
    finally:
        await client.close()
    current = await asyncio.to_thread(store_pair, paths.cert_dir, cert, key)
    await asyncio.to_thread(write_kubeconfig, paths.kubeconfig, bootstrap, current)
    (paths.cert_dir / KEY_TMP).unlink(missing_ok=True)
    log.info("event=bootstrapped node=%s kubeconfig=%s", node_name, paths.kubeconfig)
    return paths.kubeconfig
