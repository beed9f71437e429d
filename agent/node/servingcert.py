"""The kubelet API's serving certificate through the CSR API (`serverTLSBootstrap: true`; upstream's
pkg/kubelet/certificate/kubelet.go NewKubeletServerCertificateManager on client-go's certificate manager).

The agent asks, as `system:node:<name>`, for a `kubernetes.io/kubelet-serving` certificate: subject
O=system:nodes, CN=system:node:<name>, SANs the node's hostname and addresses, usages digital signature,
key encipherment and server auth. Such CSRs are not approved automatically (upstream's approver leaves
them to an administrator: `kubectl certificate approve`). Until one is issued the kubelet API listens but
completes no TLS handshake, as upstream's kubelet, whose GetCertificate answers "no serving certificate
available for the kubelet" (it never falls back to a self-signed certificate in this mode). Once issued
the pair goes to `pki/kubelet-server-<time>.pem`, `pki/kubelet-server-current.pem` points at it, and it
is served from the next handshake on; at a jittered 70-90 % of its lifetime a new key and CSR replace it
the same way (certrotation's schedule), with retries while the old one still serves.

The swap needs no restart: the listening context's SNI callback (called by OpenSSL for every ClientHello,
with or without a server name) hands each connection the current context.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import logging
import os
import ssl
from collections.abc import Callable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agent.node.bootstrap import (
    CSR_PATH,
    BootstrapError,
    _wait_issued,
    _write_private,
    key_pem,
    valid_certificate,
)
from agent.node.certrotation import Clock, jittered_fraction, rotation_deadline
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError

log = logging.getLogger("agent.node.servingcert")

SIGNER = "kubernetes.io/kubelet-serving"
USAGES = ["digital signature", "key encipherment", "server auth"]
CURRENT = "kubelet-server-current.pem"
NO_CERTIFICATE = "no serving certificate available for the kubelet"

ContextFactory = Callable[[Path, Path], ssl.SSLContext]


def serving_csr(
    node_name: str, key: ec.EllipticCurvePrivateKey, hostnames: list[str], ips: list[str]
) -> bytes:
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}"),
        ]
    )
    sans: list[x509.GeneralName] = [x509.DNSName(h) for h in dict.fromkeys(hostnames) if h]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in dict.fromkeys(ips) if ip]
    builder = x509.CertificateSigningRequestBuilder().subject_name(subject)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


async def request_serving_certificate(
    client: KubeClient, node_name: str, key: ec.EllipticCurvePrivateKey, hostnames: list[str], ips: list[str]
) -> bytes:
    """Post the kubelet-serving CSR (generateName csr-, as upstream) and wait for its certificate."""
    body = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": base64.b64encode(serving_csr(node_name, key, hostnames, ips)).decode(),
            "signerName": SIGNER,
            "usages": USAGES,
        },
    }
    try:
        created = await client.create(CSR_PATH, body)
    except ApiError as err:
        raise BootstrapError(f"serving CSR for node {node_name}: create: {err}") from None
    name = created["metadata"]["name"]
    log.info("event=serving-csr-created csr=%s node=%s", name, node_name)
    return await _wait_issued(client, name)


class ServingCertManager:
    """Holds the kubelet API's serving certificate: `context` is what the server listens with."""

    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        pki_dir: Path,
        base: ssl.SSLContext,
        make_context: ContextFactory,
        addresses: Callable[[], tuple[list[str], list[str]]],
        max_backoff: float = 300.0,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.pki_dir = pki_dir
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))  # the rotation schedule's (tests move it)
        self.rotations = 0
        self.context = base
        self._make_context = make_context
        self._addresses = addresses  # () -> (hostnames, ips), read at each request
        self._current: ssl.SSLContext | None = None
        self.max_backoff = max_backoff
        self.issued = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        base.sni_callback = self._pick

    @property
    def current_path(self) -> Path:
        return self.pki_dir / CURRENT

    def _pick(self, conn: ssl.SSLObject, _server_name: str | None, _ctx: ssl.SSLContext) -> int | None:
        if self._current is None:
            log.debug("event=tls-refused reason=%r", NO_CERTIFICATE)
            return ssl.ALERT_DESCRIPTION_HANDSHAKE_FAILURE
        conn.context = self._current
        return None

    def _load(self) -> x509.Certificate | None:
        cert = valid_certificate(self.current_path)
        if cert is not None:
            self._current = self._make_context(self.current_path, self.current_path)
            self.issued.set()
        return cert

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="serving-cert")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        cert = await asyncio.to_thread(self._load)
        while True:
            if cert is not None:
                deadline = rotation_deadline(cert, jittered_fraction())
                wait = (deadline - self.clock()).total_seconds()
                log.info("event=serving-rotation-scheduled node=%s wait_s=%.0f", self.node_name, max(wait, 0))
                while wait > 0:
                    await asyncio.sleep(min(wait, 60.0))
                    wait = (deadline - self.clock()).total_seconds()
                self.rotations += 1
            cert = await self._renew_with_backoff()

    async def _renew_with_backoff(self) -> x509.Certificate:
        delay = 1.0
        while True:
            try:
                return await self.renew()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.warning(
                    "event=serving-csr-failed node=%s error=%r retry_s=%.0f", self.node_name, str(err), delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)

    async def renew(self) -> x509.Certificate:
        key = ec.generate_private_key(ec.SECP256R1())
        hostnames, ips = self._addresses()
        cert_pem = await request_serving_certificate(self.client, self.node_name, key, hostnames, ips)
        await asyncio.to_thread(self._store, cert_pem, key)
        cert = await asyncio.to_thread(self._load)
        if cert is None:
            raise BootstrapError("the issued serving certificate does not load or is not yet valid")
        log.info(
            "event=serving-certificate-issued node=%s not_after=%s", self.node_name, cert.not_valid_after_utc
        )
        return cert

    def _store(self, cert_pem: bytes, key: ec.EllipticCurvePrivateKey) -> None:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d-%H-%M-%S")
        pem = self.pki_dir / f"kubelet-server-{stamp}.pem"
        _write_private(pem, cert_pem + key_pem(key))
        tmp = self.pki_dir / (CURRENT + ".new")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(pem.name)
        os.replace(tmp, self.current_path)
