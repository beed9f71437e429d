"""What the join-credential tests share: raw HTTPS requests with a bearer token (or none), bootstrap
token Secrets, and PKCS#10 requests built with `cryptography` as a kubelet builds them."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import ssl
import urllib.error
import urllib.request
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kubeclient import bootstraptoken as bt
from pykubelet.rig.apiserver import ApiServer

CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
CLIENT_KUBELET = "kubernetes.io/kube-apiserver-client-kubelet"
CLIENT = "kubernetes.io/kube-apiserver-client"
SERVING = "kubernetes.io/kubelet-serving"


def raw(
    server: ApiServer,
    method: str,
    path: str,
    token: str | None = None,
    body: Any = None,
    cert: tuple[str, str] | None = None,
) -> tuple[int, Any]:
    """(status, JSON body) of a request with a bearer token, a client certificate, or no credentials."""
    context = ssl.create_default_context(cafile=str(server.ca_cert))
    if cert is not None:
        context.load_cert_chain(*cert)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def whoami(
    server: ApiServer, token: str | None = None, cert: tuple[str, str] | None = None
) -> tuple[int, Any]:
    return raw(
        server,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        token,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        cert,
    )


def put_token(server: ApiServer, token: str, **kwargs: Any) -> dict[str, Any]:
    """Create the token's Secret as the admin (kwargs: bootstraptoken.token_secret's)."""
    secret = bt.token_secret(token, kwargs.pop("ttl", 3600), **kwargs)
    status, body = admin(server, "POST", f"/api/v1/namespaces/{bt.NAMESPACE}/secrets", secret)
    assert status == 201, body
    return body


def admin(server: ApiServer, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    pki = server.data_dir / "pki"
    return raw(server, method, path, body=body, cert=(str(pki / "admin.crt"), str(pki / "admin.key")))


def make_csr(
    cn: str,
    orgs: tuple[str, ...] = ("system:nodes",),
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    key: ec.EllipticCurvePrivateKey | None = None,
) -> tuple[bytes, ec.EllipticCurvePrivateKey]:
    """(PEM CSR, its key): an ECDSA P-256 request as the kubelet's certificate manager makes it."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    names = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    names.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(names))
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM), key


def csr_body(
    name: str,
    pem: bytes,
    signer: str = CLIENT_KUBELET,
    usages: tuple[str, ...] = ("digital signature", "client auth"),
    expiration: int | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "request": base64.b64encode(pem).decode(),
        "signerName": signer,
        "usages": list(usages),
    }
    if expiration is not None:
        spec["expirationSeconds"] = expiration
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": spec,
    }


def approve(server: ApiServer, name: str, kind: str = "Approved") -> tuple[int, Any]:
    status, csr = admin(server, "GET", f"{CSR_PATH}/{name}")
    assert status == 200, csr
    csr.setdefault("status", {}).setdefault("conditions", []).append(
        {"type": kind, "status": "True", "reason": "Test", "message": "by the test"}
    )
    return admin(server, "PUT", f"{CSR_PATH}/{name}/approval", csr)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
