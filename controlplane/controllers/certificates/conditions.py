"""Reading a CSR's conditions (upstream's pkg/controller/certificates/helpers and certificates' helpers)."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"


def conditions(csr: Obj) -> list[Obj]:
    return list((csr.get("status") or {}).get("conditions") or [])


def has_true(csr: Obj, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions(csr))


def approved(csr: Obj) -> bool:
    """IsCertificateRequestApproved: Approved and not Denied."""
    return has_true(csr, "Approved") and not has_true(csr, "Denied")


def approval_decided(csr: Obj) -> bool:
    """GetCertApprovalCondition: approved or denied, whatever the status."""
    return any(c.get("type") in ("Approved", "Denied") for c in conditions(csr))


def issued(csr: Obj) -> bool:
    return bool((csr.get("status") or {}).get("certificate"))
