"""The node IPAM controller with upstream's range allocator (pkg/controller/nodeipam/ipam/
range_allocator.go): with `--allocate-node-cidrs --cluster-cidr C --node-cidr-mask-size M` every Node
without `spec.podCIDRs` gets the next free /M block of C, as `spec.podCIDR` and `spec.podCIDRs` (one
strategic-merge patch, the field upstream's PatchNodeCIDRs writes); a deleted Node's block returns to
the pool. At start, before any allocation, every Node that already has a CIDR occupies it (so a
restarted controller manager never hands out a block twice); a Node whose CIDR lies outside C stops
the controller with upstream's message, as kube-controller-manager refuses to start then.

It runs as `node-controller`, the identity upstream's nodeipam controller uses. Events as upstream's
(source `cidrAllocator`, involvedObject UID = the node's name as RecordNodeStatusChange writes it):
CIDRNotAvailable when the range is exhausted, CIDRAssignmentFailed when the patch failed three times.
The --service-cluster-ip-range blocks are taken out of the pool when it overlaps C, as upstream.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.nodeipam.cidrset import CIDRSet, CIDRSetError
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL
from kubeclient.informer import meta

log = logging.getLogger("controlplane.controllers")

Obj = dict[str, Any]
COMPONENT = "cidrAllocator"
PATCH_RETRIES = 3  # upstream's cidrUpdateRetries


def pod_cidrs(node: Obj) -> list[str]:
    spec = node.get("spec") or {}
    cidrs = list(spec.get("podCIDRs") or [])
    if not cidrs and spec.get("podCIDR"):
        cidrs = [spec["podCIDR"]]
    return cidrs


def _status_ref(node: Obj) -> Obj:
    """RecordNodeStatusChange's reference: the node, with its name as UID."""
    name = meta(node).get("name", "")
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": name}}


class NodeIpamController(Controller):
    name = "nodeipam"
    account = "node-controller"
    workers = 1  # allocations are in-memory; one worker keeps their order that of the queue

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.enabled = bool(ctx.option("allocate_node_cidrs", False))
        cluster = ctx.option("cluster_cidr", "")
        self.cidrs: CIDRSet | None = None
        if self.enabled and not cluster:
            log.error("Controller: Must specify --cluster-cidr if --allocate-node-cidrs is set")
            self.enabled = False
        if self.enabled:
            self.cidrs = CIDRSet.parse(cluster, int(ctx.option("node_cidr_mask_size", 24)))
            service = ctx.option("service_cluster_ip_range", "")
            if service and ipaddress.IPv4Network(service, strict=False).overlaps(self.cidrs.cluster):
                self.cidrs.occupy(ipaddress.IPv4Network(service, strict=False))
        self.nodes = ctx.informers.get("/api/v1/nodes")
        self.recorder = ctx.recorder(COMPONENT)
        # Patched, not yet seen with its CIDR in the cache: a node's block is never handed out twice.
        self.assigned: dict[str, ipaddress.IPv4Network] = {}
        self.recovered = False
        if self.enabled:
            self.nodes.add_handler(
                on_add=self.enqueue, on_update=lambda _old, new: self._updated(new), on_delete=self._deleted
            )

    def _updated(self, node: Obj) -> None:
        if not pod_cidrs(node) or meta(node).get("name") in self.assigned:
            self.enqueue(node)

    def _deleted(self, node: Obj) -> None:
        name = meta(node).get("name", "")
        assert self.cidrs is not None
        pending = self.assigned.pop(name, None)
        for cidr in [*(pod_cidrs(node)), *([str(pending)] if pending else [])]:
            try:
                self.cidrs.release(ipaddress.IPv4Network(cidr, strict=False))
            except (CIDRSetError, ValueError) as err:
                log.warning("nodeipam: release of node=%s cidr=%s failed: %s", name, cidr, err)
            else:
                log.info("nodeipam: released cidr=%s of deleted node=%s", cidr, name)

    async def run(self, stop) -> None:  # type: ignore[no-untyped-def]
        if not self.enabled:
            log.info("nodeipam: --allocate-node-cidrs is off; not allocating")
            await stop.wait()
            return
        try:
            self.recover(self.nodes.list())
        except CIDRSetError as err:
            log.error("nodeipam: %s; not allocating", err)
            await stop.wait()
            return
        await super().run(stop)

    def recover(self, nodes: list[Obj]) -> None:
        """Occupy every existing node's CIDRs before any allocation (upstream's NewCIDRRangeAllocator)."""
        assert self.cidrs is not None
        for node in nodes:
            self._occupy(node)
        self.recovered = True

    def _occupy(self, node: Obj) -> None:
        assert self.cidrs is not None
        name = meta(node).get("name", "")
        for cidr in pod_cidrs(node)[:1]:  # one cluster CIDR (IPv4): its first entry
            try:
                network = ipaddress.IPv4Network(cidr, strict=False)
            except ValueError:
                raise CIDRSetError(f"failed to parse node {name}, CIDR {cidr}") from None
            try:
                self.cidrs.occupy(network)
            except CIDRSetError as err:
                raise CIDRSetError(
                    f"failed to mark cidr[{network}] at idx [0] as occupied for node: {name}: {err}"
                ) from None

    async def sync(self, key: str) -> None:
        assert self.cidrs is not None
        node = self.nodes.get(key)
        if node is None:
            return
        name = meta(node)["name"]
        if pod_cidrs(node):
            pending = self.assigned.pop(name, None)
            try:
                self._occupy(node)
            except CIDRSetError as err:
                log.error("nodeipam: %s", err)
            if pending is not None and str(pending) not in pod_cidrs(node):
                self.cidrs.release(pending)  # another writer set it first: ours goes back
            return
        if name in self.assigned:
            return  # patched; the watch brings the node with its CIDR
        try:
            cidr = self.cidrs.allocate_next()
        except CIDRSetError as err:
            self._status_event(node, "CIDRNotAvailable")
            raise CIDRSetError(f"failed to allocate cidr from cluster cidr at idx:0: {err}") from None
        await self._assign(node, cidr)

    async def _assign(self, node: Obj, cidr: ipaddress.IPv4Network) -> None:
        assert self.cidrs is not None
        name = meta(node)["name"]
        body = {"spec": {"podCIDR": str(cidr), "podCIDRs": [str(cidr)]}}
        error: ApiError | None = None
        for _ in range(PATCH_RETRIES):
            try:
                await self.client.patch(f"/api/v1/nodes/{name}", body)
            except ApiError as err:
                error = err
                if err.status == 404:
                    break
                continue
            self.assigned[name] = cidr
            log.info("nodeipam: set node=%s podCIDR=%s", name, cidr)
            return
        assert error is not None
        self.cidrs.release(cidr)
        if error.status == 404:
            return  # deleted meanwhile
        self._status_event(node, "CIDRAssignmentFailed")
        raise error

    def _status_event(self, node: Obj, status: str) -> None:
        name = meta(node).get("name", "")
        self.recorder.event(_status_ref(node), NORMAL, status, f"Node {name} status is now: {status}")
