"""The approving controller (upstream's pkg/controller/certificates/approver/sarapprove.go): a pending
kubelet client CSR (signer kubernetes.io/kube-apiserver-client-kubelet, a request the signer would take)
is approved when its requester may `create` `certificatesigningrequests/selfnodeclient` (a node renewing
its own name: the request's common name is the requester) or `certificatesigningrequests/nodeclient` (a
bootstrap identity asking for a node's first certificate), as a SubjectAccessReview answers for the
requester's user, uid, groups and extra. Nothing else is approved, serving CSRs never; a recognized
request whose review says no stays pending and is tried again with backoff, as upstream's IgnorableError.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.certificates import conditions as cond
from controlplane.controllers.certificates.signers import (
    KUBE_APISERVER_CLIENT_KUBELET,
    common_name,
    kubelet_client_error,
    parse_request,
)
from kubeclient.errors import ApiError

Obj = dict[str, Any]
SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class NotApproved(Exception):
    """Recognized, but the review did not allow it (upstream's IgnorableError): retried with backoff."""


@dataclass(frozen=True)
class Recognizer:
    subresource: str
    message: str
    self_only: bool


RECOGNIZERS = (
    Recognizer(
        "selfnodeclient", "Auto approving self kubelet client certificate after SubjectAccessReview.", True
    ),
    Recognizer("nodeclient", "Auto approving kubelet client certificate after SubjectAccessReview.", False),
)


def recognized(csr: Obj) -> list[Recognizer]:
    """The recognizers a CSR matches, in upstream's order."""
    spec = csr.get("spec") or {}
    if spec.get("signerName") != KUBE_APISERVER_CLIENT_KUBELET:
        return []
    try:
        req = parse_request(csr)
    except ValueError:
        return []
    if kubelet_client_error(req, spec.get("usages") or []):
        return []
    return [r for r in RECOGNIZERS if not r.self_only or spec.get("username") == common_name(req)]


class CSRApprovingController(Controller):
    name = "csrapproving"
    account = "certificate-controller"

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.csrs = ctx.informers.get(cond.PATH)
        self.csrs.add_handler(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n))

    async def _allowed(self, csr: Obj, subresource: str) -> bool:
        spec = csr.get("spec") or {}
        review_spec: Obj = {
            "user": spec.get("username", ""),
            "groups": list(spec.get("groups") or []),
            "resourceAttributes": {
                "group": "certificates.k8s.io",
                "resource": "certificatesigningrequests",
                "verb": "create",
                "subresource": subresource,
                "version": "*",
            },
        }
        if spec.get("uid"):
            review_spec["uid"] = spec["uid"]
        if spec.get("extra"):
            review_spec["extra"] = spec["extra"]
        review = await self.client.create(
            SAR_PATH,
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": review_spec},
        )
        return bool((review.get("status") or {}).get("allowed"))

    async def sync(self, key: str) -> None:
        csr = self.csrs.get(key)
        if csr is None or cond.issued(csr) or cond.approval_decided(csr):
            return
        tried = []
        for recognizer in recognized(csr):
            tried.append(recognizer.subresource)
            if not await self._allowed(csr, recognizer.subresource):
                continue
            status = dict(csr.get("status") or {})
            status["conditions"] = [
                *cond.conditions(csr),
                {
                    "type": "Approved",
                    "status": "True",
                    "reason": "AutoApproved",
                    "message": recognizer.message,
                },
            ]
            name = csr["metadata"]["name"]
            try:
                await self.client.replace(f"{cond.PATH}/{name}/approval", {**csr, "status": status})
            except ApiError as err:
                if not err.not_found:
                    raise
            return
        if tried:
            raise NotApproved(
                f"recognized csr {csr['metadata']['name']!r} as [{' '.join(tried)}] but subject access review "
                "was not approved"
            )
