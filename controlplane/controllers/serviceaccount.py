"""The service-account controller: every active namespace has a ServiceAccount `default`, recreated
if deleted (upstream's pkg/controller/serviceaccount/serviceaccounts_controller.go). Pods name it by
default, so a namespace without it cannot run pods once ServiceAccount admission checks for it.
"""

from __future__ import annotations

from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from kubeclient.errors import ApiError
from kubeclient.informer import by_namespace, meta

DEFAULT_NAMES = ("default",)


class ServiceAccountController(Controller):
    name = "serviceaccount"
    account = "service-account-controller"
    workers = 1

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.namespaces = ctx.informers.get("/api/v1/namespaces")
        self.accounts = ctx.informers.get("/api/v1/serviceaccounts", indexers={"namespace": by_namespace})
        self.namespaces.add_handler(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n))
        # Only a deletion can take a default account away; the namespace is the key.
        self.accounts.add_handler(on_delete=lambda sa: self.queue.add(str(meta(sa).get("namespace", ""))))

    async def sync(self, key: str) -> None:
        ns = self.namespaces.get(key)
        if (
            ns is None
            or meta(ns).get("deletionTimestamp")
            or (ns.get("status") or {}).get("phase") == "Terminating"
        ):
            return
        have = {meta(sa).get("name") for sa in self.accounts.by_index("namespace", key)}
        for name in DEFAULT_NAMES:
            if name in have:
                continue
            body: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": key},
            }
            try:
                await self.client.create(f"/api/v1/namespaces/{key}/serviceaccounts", body)
            except ApiError as err:
                # Exists already (our cache is behind), or the namespace is going away: nothing to do.
                if not (err.already_exists or err.forbidden or err.not_found):
                    raise
