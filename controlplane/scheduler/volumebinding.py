"""VolumeBinding (upstream's pkg/scheduler/framework/plugins/volumebinding): a pod's claims decide where it
may go, and claims of WaitForFirstConsumer classes are bound once the pod's node is chosen.

- pre_filter (PreFilter): a claim that does not exist or is being deleted, or an unbound claim whose
  class binds Immediately (or does not exist), makes the pod unschedulable whatever the node.
- filter (Filter): a bound claim's volume must exist and its node affinity admit the node; an unbound
  WaitForFirstConsumer claim needs, on that node, an Available volume that fits (the smallest, node
  affinity checked) or a class that provisions (a claim already given a node fits only that node).
- pre_bind (PreBind): on the chosen node, static matches get the claimRef written on the volume (the PV
  controller completes the binding), claims to provision get `volume.kubernetes.io/selected-node`; then
  the pod waits, off the decision path, until every claim is bound (upstream's bind timeout, 600 s),
  and only then is it bound.

The plugin reads claims, volumes and classes from the scheduler's informers; it is pure but for
pre_bind's writes.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduler.framework import FITS
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo
from kubeclient import volumes as vol
from kubeclient.client import KubeClient
from kubeclient.informer import Informer

Obj = dict[str, Any]
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
NODE_CONFLICT = "node(s) had volume node affinity conflict"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
BIND_TIMEOUT = 600.0


class BindingError(Exception):
    """PreBind could not complete; the pod is retried."""


@dataclass
class PodClaims:
    """The pod's claims, sorted as upstream's GetPodVolumeClaims sorts them."""

    bound: list[Obj] = field(default_factory=list)
    delayed: list[Obj] = field(default_factory=list)


@dataclass(frozen=True)
class Decision:
    """What binding the pod's delayed claims on one node takes."""

    static: tuple[tuple[Obj, Obj], ...]  # (claim, volume)
    provision: tuple[Obj, ...]


class VolumeBinding:
    name = "VolumeBinding"

    def __init__(
        self, claims: Informer, volumes: Informer, classes: Informer, timeout: float = BIND_TIMEOUT
    ) -> None:
        self.claims, self.volumes, self.classes = claims, volumes, classes
        self.timeout = timeout
        self._pods: dict[str, PodClaims] = {}
        self._changed = asyncio.Event()

    def notify(self) -> None:
        """A claim or volume changed: wake the pods waiting in pre_bind."""
        self._changed.set()

    # --- PreFilter -----------------------------------------------------------------------------------

    def claims_of(self, pod: PodInfo) -> PodClaims | str:
        """The pod's claims, or the reason no node can take the pod."""
        out = PodClaims()
        for name in vol.claim_names(pod.obj):
            claim = self.claims.get(f"{pod.namespace}/{name}")
            if claim is None:
                return f'persistentvolumeclaim "{name}" not found'
            if (claim.get("metadata") or {}).get("deletionTimestamp"):
                return f'persistentvolumeclaim "{name}" is being deleted'
            if (claim.get("spec") or {}).get("volumeName"):
                out.bound.append(claim)
                continue
            sc = self.classes.get(vol.claim_class(claim)) if vol.claim_class(claim) else None
            if sc is None or sc.get("volumeBindingMode") != vol.WAIT_FOR_FIRST_CONSUMER:
                return UNBOUND_IMMEDIATE
            out.delayed.append(claim)
        return out

    def applies(self, pod: PodInfo) -> bool:
        return bool(vol.claim_names(pod.obj))

    def pre_filter(self, pod: PodInfo) -> str | None:
        found = self.claims_of(pod)
        if isinstance(found, str):
            self._pods.pop(pod.uid, None)
            return found
        self._pods[pod.uid] = found
        return None

    # --- Filter --------------------------------------------------------------------------------------

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        claims = self._pods.get(pod.uid)
        if claims is None:
            return FITS
        labels = node.facts.labels if node.facts is not None else {}
        for claim in claims.bound:
            volume = self.volumes.get((claim.get("spec") or {}).get("volumeName", ""))
            if volume is None:
                return (PV_NOT_EXIST,)
            if not vol.node_affinity_fits(volume, node.name, labels):
                return (NODE_CONFLICT,)
        return FITS if self.decide(claims, node.name, labels) is not None else (BIND_CONFLICT,)

    def decide(self, claims: PodClaims, node: str, labels: dict[str, str]) -> Decision | None:
        """How the delayed claims bind on `node` (None: they cannot)."""
        static: list[tuple[Obj, Obj]] = []
        provision: list[Obj] = []
        taken: set[str] = set()
        for claim in claims.delayed:
            selected = vol.annotations(claim).get(vol.SELECTED_NODE)
            if selected is not None:
                if selected != node:
                    return None
                provision.append(claim)
                continue
            match = vol.find_matching_volume(
                claim, self.volumes.list(), (node, labels), excluded=frozenset(taken)
            )
            if match is not None:
                taken.add(match["metadata"]["name"])
                static.append((claim, match))
                continue
            sc = self.classes.get(vol.claim_class(claim)) or {}
            if not sc.get("provisioner") or sc["provisioner"] == NO_PROVISIONER:
                return None
            provision.append(claim)
        return Decision(tuple(static), tuple(provision))

    def forget(self, uid: str) -> None:
        self._pods.pop(uid, None)

    # --- PreBind -------------------------------------------------------------------------------------

    async def pre_bind(self, client: KubeClient, pod: PodInfo, node: str, labels: dict[str, str]) -> None:
        """Write the bindings the node needs, then wait until every claim of the pod is bound."""
        claims = self._pods.pop(pod.uid, None)
        if claims is None or not claims.delayed:
            return
        decision = self.decide(claims, node, labels)
        if decision is None:
            raise BindingError(f"pod {pod.namespace}/{pod.name}: its volumes no longer fit node {node}")
        for claim, volume in decision.static:
            bound = copy.deepcopy(volume)
            bound["spec"]["claimRef"] = vol.claim_ref(claim)
            bound["metadata"].setdefault("annotations", {})[vol.BOUND_BY_CONTROLLER] = "yes"
            await client.replace(vol.volume_path(bound["metadata"]["name"]), bound)
        for claim in decision.provision:
            if vol.annotations(claim).get(vol.SELECTED_NODE) == node:
                continue
            chosen = copy.deepcopy(claim)
            chosen["metadata"].setdefault("annotations", {})[vol.SELECTED_NODE] = node
            m = chosen["metadata"]
            await client.replace(vol.claim_path(m["namespace"], m["name"]), chosen)
        names = [c["metadata"]["name"] for c in claims.delayed]
        try:
            await asyncio.wait_for(self._all_bound(pod.namespace, names), self.timeout)
        except TimeoutError:
            raise BindingError(
                f"binding volumes: context deadline exceeded (pod {pod.namespace}/{pod.name})"
            ) from None

    def _bound(self, namespace: str, name: str) -> bool:
        claim = self.claims.get(f"{namespace}/{name}")
        if claim is None:
            raise BindingError(f'persistentvolumeclaim "{name}" not found')
        volume = self.volumes.get((claim.get("spec") or {}).get("volumeName") or "")
        return (
            vol.annotations(claim).get(vol.BIND_COMPLETED) == "yes"
            and volume is not None
            and vol.is_bound_to_claim(volume, claim)
        )

    async def _all_bound(self, namespace: str, names: list[str]) -> None:
        while not all(self._bound(namespace, n) for n in names):
            self._changed.clear()
            await self._changed.wait()
