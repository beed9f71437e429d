"""The signing controller (upstream's pkg/controller/certificates/signer): an approved, not failed CSR for
one of the kubernetes.io signers gets its certificate from the cluster CA (--cluster-signing-cert-file /
--cluster-signing-key-file), the one the API server's client CA trusts. A request its signer does not
allow (usages, subject, SANs) gets the Failed condition with reason SignerValidationFailure and the
signer's message instead, and is never signed. Without the CA files the loop does nothing, as upstream
starts no signer then.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.certificates import conditions as cond
from controlplane.controllers.certificates.authority import CertificateAuthority, duration
from controlplane.controllers.certificates.signers import SIGNED, parse_request, signer_error
from controlplane.controllers.options import DEFAULTS
from kubeclient.errors import ApiError

log = logging.getLogger("controlplane.controllers.csrsigning")
Obj = dict[str, Any]


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class CSRSigningController(Controller):
    name = "csrsigning"
    account = "certificate-controller"

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        pair = ctx.option("cluster_signing", None)
        self.authority = CertificateAuthority.load(*pair) if pair else None
        self.ttl = dt.timedelta(
            seconds=float(ctx.option("cluster_signing_duration", DEFAULTS["cluster_signing_duration"]))
        )
        self.csrs = ctx.informers.get(cond.PATH)
        self.csrs.add_handler(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n))

    async def sync(self, key: str) -> None:
        csr = self.csrs.get(key)
        if csr is None or self.authority is None:
            return
        if not cond.approved(csr) or cond.has_true(csr, "Failed") or cond.issued(csr):
            return
        spec = csr.get("spec") or {}
        signer = spec.get("signerName", "")
        if signer not in SIGNED:
            return
        name = csr["metadata"]["name"]
        try:
            req = parse_request(csr)
        except ValueError as err:
            raise ValueError(f"unable to parse csr {name!r}: {err}") from None
        usages = list(spec.get("usages") or [])
        why = signer_error(signer, req, usages)
        status = dict(csr.get("status") or {})
        if why:
            status["conditions"] = [
                *cond.conditions(csr),
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "SignerValidationFailure",
                    "message": why,
                    "lastUpdateTime": _now(),
                },
            ]
            log.info("event=csr-failed csr=%s signer=%s reason=%r", name, signer, why)
        else:
            ttl = duration(spec.get("expirationSeconds"), self.ttl)
            pem = self.authority.sign(req, usages, ttl)
            status["certificate"] = base64.b64encode(pem).decode()
            log.info("event=csr-signed csr=%s signer=%s duration=%ds", name, signer, int(ttl.total_seconds()))
        try:
            await self.client.replace(f"{cond.PATH}/{name}/status", {**csr, "status": status})
        except ApiError as err:
            if not err.not_found:
                raise
