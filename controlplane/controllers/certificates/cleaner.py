"""The CSR cleaner (upstream's pkg/controller/certificates/cleaner): CSRs are deleted once they are of no
more use: issued and approved for an hour (by the Approved condition's lastUpdateTime), denied or failed
for an hour, pending for a day (since creation), or issued with a certificate that has expired.
Upstream polls every hour; here each CSR is looked at on every change and again at its deadline.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable
from typing import Any

from cryptography import x509

from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.certificates import conditions as cond
from kubeclient.errors import ApiError

Obj = dict[str, Any]
APPROVED_EXPIRATION = dt.timedelta(hours=1)
DENIED_EXPIRATION = dt.timedelta(hours=1)
FAILED_EXPIRATION = dt.timedelta(hours=1)
PENDING_EXPIRATION = dt.timedelta(hours=24)


def _time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _cert_not_after(csr: Obj) -> dt.datetime | None:
    raw = (csr.get("status") or {}).get("certificate")
    if not raw:
        return None
    try:
        return x509.load_pem_x509_certificate(base64.b64decode(raw)).not_valid_after_utc
    except ValueError:
        return None


def deadline(csr: Obj) -> dt.datetime | None:
    """When the CSR is due for deletion (the earliest of upstream's rules that apply), None if never."""
    candidates: list[dt.datetime] = []
    conditions = cond.conditions(csr)
    for c in conditions:
        updated = _time(c.get("lastUpdateTime"))
        kind = c.get("type")
        if kind == "Approved" and cond.issued(csr):
            if updated is not None:
                candidates.append(updated + APPROVED_EXPIRATION)
            not_after = _cert_not_after(csr)
            if not_after is not None:
                candidates.append(not_after)
        elif kind == "Denied" and updated is not None:
            candidates.append(updated + DENIED_EXPIRATION)
        elif kind == "Failed" and updated is not None:
            candidates.append(updated + FAILED_EXPIRATION)
    if not conditions:
        created = _time((csr.get("metadata") or {}).get("creationTimestamp"))
        if created is not None:
            candidates.append(created + PENDING_EXPIRATION)
    return min(candidates) if candidates else None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class CSRCleanerController(Controller):
    name = "csrcleaner"
    account = "certificate-controller"
    workers = 1

    def __init__(self, ctx: ControllerContext, clock: Callable[[], dt.datetime] = _now) -> None:
        super().__init__(ctx)
        self.clock = ctx.option("csrcleaner_clock", clock)
        self.csrs = ctx.informers.get(cond.PATH)
        self.csrs.add_handler(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n))

    async def sync(self, key: str) -> None:
        csr = self.csrs.get(key)
        if csr is None or (csr.get("metadata") or {}).get("deletionTimestamp"):
            return
        due = deadline(csr)
        if due is None:
            return
        left = (due - self.clock()).total_seconds()
        if left > 0:
            self.queue.add_after(key, left)
            return
        try:
            await self.client.delete(f"{cond.PATH}/{csr['metadata']['name']}")
        except ApiError as err:
            if not err.not_found:
                raise
