"""The Gateway API's kinds, watched only while their CRDs exist.

The Gateway API is CRDs a user installs, maybe after the controller started, maybe never. Rather than
list kinds that are not there (a 404 and a warning every few seconds on every cluster without them),
the controller watches the CustomResourceDefinitions and starts an informer for GatewayClasses,
Gateways, HTTPRoutes and ReferenceGrants once its CRD is Established and serves the version read
(v1; ReferenceGrant v1beta1, as the standard channel has it), stopping it when the CRD goes. Each
informer's first full list wakes the controller's sync, so routes are served as soon as every kind is
cached. With a GatewayClass name given (`--gateway-class`, as `pykubelet up` gives), the class with this
controller's `controllerName` is created once the GatewayClass CRD exists, unless it is there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ingresscontroller.model import changes_config
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.informer import Informer

log = logging.getLogger("ingresscontroller.gateway")

Obj = dict[str, Any]
GROUP = "gateway.networking.k8s.io"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# plural -> the version read
KINDS = {"gatewayclasses": "v1", "gateways": "v1", "httproutes": "v1", "referencegrants": "v1beta1"}


def established(crd: Obj | None, version: str) -> bool:
    """The CRD is Established and serves `version`."""
    if crd is None:
        return False
    conditions = (crd.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)
    served = any(
        v.get("name") == version and v.get("served") for v in (crd.get("spec") or {}).get("versions") or []
    )
    return ready and served


class GatewayKinds:
    def __init__(
        self, client: KubeClient, wake: Callable[[], None], controller: str, gateway_class: str = ""
    ) -> None:
        self.client = client
        self.wake = wake
        self.controller = controller
        self.gateway_class = gateway_class
        self.crds = Informer(client, CRDS)
        self.crds.add_handler(
            on_add=lambda _o: wake(), on_update=lambda _o, _n: wake(), on_delete=lambda _o: wake()
        )
        self.caches: dict[str, Informer] = {}  # the kinds being watched (shared with the status writer)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._class_made = False

    @property
    def ready(self) -> bool:
        """Every kind is cached: the Gateway API can be served."""
        return all(p in self.caches and self.caches[p].synced.is_set() for p in KINDS)

    def reconcile(self) -> None:
        """Start the informers of kinds whose CRD is there, stop those of kinds whose CRD went."""
        for plural, version in KINDS.items():
            there = established(self.crds.get(f"{plural}.{GROUP}"), version)
            if there and plural not in self._tasks:
                informer = Informer(self.client, f"/apis/{GROUP}/{version}/{plural}")
                informer.add_handler(
                    on_add=lambda _o: self.wake(),
                    on_update=lambda o, n: self.wake() if changes_config(o, n) else None,
                    on_delete=lambda _o: self.wake(),
                )
                self.caches[plural] = informer
                self._tasks[plural] = asyncio.create_task(self._serve(informer))
                log.info("watching %s: its CRD is established", plural)
            elif not there and plural in self._tasks:
                self._tasks.pop(plural).cancel()
                del self.caches[plural]
                self._class_made = False
                log.info("stopped watching %s: its CRD is gone", plural)

    async def _serve(self, informer: Informer) -> None:
        task = asyncio.create_task(informer.run())
        try:
            await informer.synced.wait()
            self.wake()
            await task
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def ensure_class(self) -> None:
        """Create the named GatewayClass when its CRD exists and it does not."""
        classes = self.caches.get("gatewayclasses")
        if not self.gateway_class or self._class_made or classes is None or not classes.synced.is_set():
            return
        if classes.get(self.gateway_class) is None:
            body = {
                "apiVersion": f"{GROUP}/v1",
                "kind": "GatewayClass",
                "metadata": {"name": self.gateway_class},
                "spec": {"controllerName": self.controller},
            }
            try:
                await self.client.create(f"/apis/{GROUP}/v1/gatewayclasses", body)
                log.info(
                    "GatewayClass created name=%s controllerName=%s", self.gateway_class, self.controller
                )
            except ApiError as err:
                if err.status != 409:
                    log.warning("GatewayClass not created name=%s error=%r", self.gateway_class, str(err))
                    return
        self._class_made = True

    async def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
