"""What each kubernetes.io signer accepts (upstream's pkg/apis/certificates/helpers.go and csrsigning's
signer checks), as pure functions of the parsed request and its usages: "" means the request is fine,
otherwise the error text upstream writes into the Failed condition's message.

Approver and signer share them: the approver only recognizes a kubelet client CSR that the signer would
sign.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

KUBE_APISERVER_CLIENT = "kubernetes.io/kube-apiserver-client"
KUBE_APISERVER_CLIENT_KUBELET = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_SERVING = "kubernetes.io/kubelet-serving"
LEGACY_UNKNOWN = "kubernetes.io/legacy-unknown"
# The signers csrsigning signs for (legacy-unknown is never reachable through certificates/v1).
SIGNED = (KUBE_APISERVER_CLIENT, KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING)

NODE_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"

KUBELET_CLIENT_USAGES = frozenset({"digital signature", "key encipherment", "client auth"})
KUBELET_CLIENT_USAGES_NO_RSA = frozenset({"digital signature", "client auth"})
KUBELET_SERVING_USAGES = frozenset({"key encipherment", "digital signature", "server auth"})
KUBELET_SERVING_USAGES_NO_RSA = frozenset({"digital signature", "server auth"})


def _go_list(values: Iterable[str]) -> str:
    return "[" + " ".join(sorted(values)) + "]"


def parse_request(csr: dict[str, Any]) -> x509.CertificateSigningRequest:
    pem = base64.b64decode((csr.get("spec") or {}).get("request") or "")
    return x509.load_pem_x509_csr(pem)


def _orgs(req: x509.CertificateSigningRequest) -> list[str]:
    return [str(a.value) for a in req.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]


def common_name(req: x509.CertificateSigningRequest) -> str:
    attrs = req.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attrs[0].value) if attrs else ""


def _sans(req: x509.CertificateSigningRequest) -> x509.SubjectAlternativeName | None:
    try:
        return req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None


def _san_counts(req: x509.CertificateSigningRequest) -> tuple[int, int, int, int]:
    sans = _sans(req)
    if sans is None:
        return 0, 0, 0, 0
    return (
        len(sans.get_values_for_type(x509.DNSName)),
        len(sans.get_values_for_type(x509.RFC822Name)),
        len(sans.get_values_for_type(x509.IPAddress)),
        len(sans.get_values_for_type(x509.UniformResourceIdentifier)),
    )


def kubelet_client_error(req: x509.CertificateSigningRequest, usages: Iterable[str]) -> str:
    """ValidateKubeletClientCSR."""
    if _orgs(req) != [NODES_GROUP]:
        return "subject organization is not system:nodes"
    dns, email, ips, uris = _san_counts(req)
    if dns:
        return "DNS subjectAltNames are not allowed"
    if email:
        return "Email subjectAltNames are not allowed"
    if ips:
        return "IP subjectAltNames are not allowed"
    if uris:
        return "URI subjectAltNames are not allowed"
    if not common_name(req).startswith(NODE_PREFIX):
        return "subject common name does not begin with system:node:"
    wanted = frozenset(usages)
    if wanted not in (KUBELET_CLIENT_USAGES, KUBELET_CLIENT_USAGES_NO_RSA):
        return f"usages did not match {_go_list(KUBELET_CLIENT_USAGES)}"
    return ""


def kubelet_serving_error(req: x509.CertificateSigningRequest, usages: Iterable[str]) -> str:
    """ValidateKubeletServingCSR."""
    if _orgs(req) != [NODES_GROUP]:
        return "subject organization is not system:nodes"
    dns, email, ips, uris = _san_counts(req)
    if not dns and not ips:
        return "DNS or IP subjectAltName is required"
    if email:
        return "Email subjectAltNames are not allowed"
    if uris:
        return "URI subjectAltNames are not allowed"
    wanted = frozenset(usages)
    if wanted not in (KUBELET_SERVING_USAGES, KUBELET_SERVING_USAGES_NO_RSA):
        return f"usages did not match {_go_list(KUBELET_SERVING_USAGES)}"
    if not common_name(req).startswith(NODE_PREFIX):
        return "subject common name does not begin with system:node:"
    return ""


def apiserver_client_error(usages: Iterable[str]) -> str:
    """validAPIServerClientUsages: client auth required, digital signature and key encipherment allowed."""
    has_client_auth = False
    for usage in usages:
        if usage in ("digital signature", "key encipherment"):
            continue
        if usage == "client auth":
            has_client_auth = True
            continue
        return f"invalid usage for client certificate: {usage}"
    if not has_client_auth:
        return "missing required usage for client certificate: client auth"
    return ""


def signer_error(signer: str, req: x509.CertificateSigningRequest, usages: list[str]) -> str:
    """The signer's verdict on a request addressed to it (one of SIGNED)."""
    if signer == KUBELET_SERVING:
        return kubelet_serving_error(req, usages)
    if signer == KUBE_APISERVER_CLIENT_KUBELET:
        return kubelet_client_error(req, usages)
    return apiserver_client_error(usages)
