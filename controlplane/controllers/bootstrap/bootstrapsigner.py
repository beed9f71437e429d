"""The bootstrap signer (upstream's pkg/controller/bootstrap/bootstrapsigner.go): kube-public/cluster-info
carries, for every valid bootstrap token allowed `usage-bootstrap-signing` and not expired, the detached
JWS `jws-kubeconfig-<id>` of its `kubeconfig` (HS256, the token secret as key), and no other signature.
A joining node that knows a token checks the signature before it trusts the CA in that kubeconfig.

One key (the ConfigMap) is synced; any change of a token Secret or of the ConfigMap queues it, and an
expiring token queues it again when it expires.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from kubeclient import bootstraptoken as bt
from kubeclient.errors import ApiError

Obj = dict[str, Any]
KEY = f"{bt.CLUSTER_INFO_NAMESPACE}/{bt.CLUSTER_INFO}"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def signatures(kubeconfig: str, secrets: list[Obj], now: dt.datetime) -> tuple[dict[str, str], float | None]:
    """The `jws-kubeconfig-<id>` entries cluster-info should hold, and the seconds until the first of
    those tokens expires (None: none will)."""
    wanted: dict[str, str] = {}
    soonest: float | None = None
    for secret in secrets:
        token, _why = bt.parse_secret(secret)
        if token is None or "signing" not in token.usages or token.expired(now):
            continue
        if (secret.get("metadata") or {}).get("deletionTimestamp"):
            continue
        wanted[bt.JWS_PREFIX + token.token_id] = bt.detached_signature(
            kubeconfig, token.token_id, token.token_secret
        )
        if token.expiration is not None:
            left = (token.expiration - now).total_seconds()
            soonest = left if soonest is None else min(soonest, left)
    return wanted, soonest


class BootstrapSigner(Controller):
    name = "bootstrapsigner"
    account = "bootstrap-signer"
    workers = 1

    def __init__(self, ctx: ControllerContext, clock: Callable[[], dt.datetime] = _now) -> None:
        super().__init__(ctx)
        self.clock = ctx.option("bootstrapsigner_clock", clock)
        self.secrets = ctx.informers.get(
            f"/api/v1/namespaces/{bt.NAMESPACE}/secrets", field_selector=f"type={bt.SECRET_TYPE}"
        )
        self.configmaps = ctx.informers.get(
            f"/api/v1/namespaces/{bt.CLUSTER_INFO_NAMESPACE}/configmaps",
            field_selector=f"metadata.name={bt.CLUSTER_INFO}",
        )
        to_key: dict[str, Any] = self.handlers(key=lambda _obj: KEY)
        self.secrets.add_handler(**to_key)
        self.configmaps.add_handler(**to_key)

    async def sync(self, key: str) -> None:
        cm = self.configmaps.get(KEY)
        if cm is None:
            return
        data: dict[str, str] = dict(cm.get("data") or {})
        kubeconfig = data.get(bt.KUBECONFIG_KEY)
        if not kubeconfig:
            return
        wanted, soonest = signatures(kubeconfig, self.secrets.list(), self.clock())
        if soonest is not None:
            self.queue.add_after(KEY, max(soonest, 0.0) + 0.5)
        current = {k: v for k, v in data.items() if k.startswith(bt.JWS_PREFIX)}
        if current == wanted:
            return
        new_data = {k: v for k, v in data.items() if not k.startswith(bt.JWS_PREFIX)} | wanted
        updated = {**cm, "data": new_data}
        try:
            await self.client.replace(
                f"/api/v1/namespaces/{bt.CLUSTER_INFO_NAMESPACE}/configmaps/{bt.CLUSTER_INFO}", updated
            )
        except ApiError as err:
            if not err.not_found:
                raise
