"""The token cleaner (upstream's pkg/controller/bootstrap/tokencleaner.go): a bootstrap token Secret in
kube-system whose `expiration` has passed is deleted, with its UID as precondition so a Secret made again
under the same name is left alone; one not yet expired is looked at again when it expires.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable

from controlplane.controllers.base import Controller, ControllerContext
from kubeclient import bootstraptoken as bt
from kubeclient.errors import ApiError
from kubeclient.informer import split_key

log = logging.getLogger("controlplane.controllers.tokencleaner")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class TokenCleaner(Controller):
    name = "tokencleaner"
    account = "token-cleaner"
    workers = 1

    def __init__(self, ctx: ControllerContext, clock: Callable[[], dt.datetime] = _now) -> None:
        super().__init__(ctx)
        self.clock = ctx.option("tokencleaner_clock", clock)
        self.secrets = ctx.informers.get(
            f"/api/v1/namespaces/{bt.NAMESPACE}/secrets", field_selector=f"type={bt.SECRET_TYPE}"
        )
        self.secrets.add_handler(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n))

    async def sync(self, key: str) -> None:
        secret = self.secrets.get(key)
        if secret is None:
            return
        raw = bt.data_value(secret, bt.EXPIRATION)
        if not raw:
            return
        expires = bt.parse_time(raw)
        if expires is None:
            return  # upstream ignores an unparsable expiration too (the authenticator refuses the token)
        left = (expires - self.clock()).total_seconds()
        if left > 0:
            self.queue.add_after(key, left)
            return
        namespace, name = split_key(key)
        uid = (secret.get("metadata") or {}).get("uid")
        log.info("event=deleting-expired-token secret=%s/%s", namespace, name)
        try:
            await self.client.delete(
                f"/api/v1/namespaces/{namespace}/secrets/{name}",
                {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}},
            )
        except ApiError as err:
            if not (err.not_found or err.conflict):
                raise
