"""VolumeBinding (upstream's pkg/scheduler/framework/plugins/volumebinding): a pod's claims decide where it
may go, and claims of WaitForFirstConsumer classes are bound once the pod's node is chosen.

- pre_filter (PreFilter): a claim that does not exist or is being deleted, or an unbound claim whose
  class binds Immediately (or does not exist), makes the pod unschedulable whatever the node.
- filter (Filter): a bound claim's volume must exist and its node affinity admit the node; an unbound
  WaitForFirstConsumer claim needs, on that node, an Available volume that fits (the smallest, node
  affinity checked) or a class that provisions there (allowedTopologies; a claim already given a node
  fits only that node) with room in a CSIStorageCapacity the node reaches when the class's CSIDriver
  asks for capacity tracking (`storagecapacity.py`). The reasons are upstream's, several at once.
- pre_bind (PreBind): on the chosen node, static matches get the claimRef written on the volume (the PV
  controller completes the binding), claims to provision get `volume.kubernetes.io/selected-node`; then
  the pod waits, off the decision path, until every claim is bound (upstream's bind timeout, 600 s),
  and only then is it bound.

The plugin reads claims, volumes, classes, CSIDrivers and CSIStorageCapacities from the scheduler's
informers; it is pure but for pre_bind's writes.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduler import storagecapacity as capacity
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
NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
BIND_TIMEOUT = 600.0


class BindingError(Exception):
    """PreBind could not complete; the pod is retried."""


class PodGone(BindingError):
    """The pod was deleted while PreBind waited for its claims: nothing to retry."""


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


NO_DECISION = Decision((), ())


def _controlled_by(obj: Obj, uid: str) -> bool:
    """metav1.IsControlledBy: the object's controller reference names `uid`."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("controller") and r.get("uid") == uid for r in refs)


class VolumeBinding:
    name = "VolumeBinding"

    def __init__(
        self,
        claims: Informer,
        volumes: Informer,
        classes: Informer,
        drivers: Informer | None = None,
        capacities: Informer | None = None,
        timeout: float = BIND_TIMEOUT,
    ) -> None:
        self.claims, self.volumes, self.classes = claims, volumes, classes
        # CSIDrivers and CSIStorageCapacities: where provisioning has room (None: never checked).
        self.drivers, self.capacities = drivers, capacities
        self.timeout = timeout
        self._pods: dict[str, PodClaims] = {}
        self._changed = asyncio.Event()
        self._waiting: set[str] = set()  # pods whose PreBind waits for their claims
        self._deleted: set[str] = set()  # ... of which deleted meanwhile

    def notify(self) -> None:
        """A claim or volume changed: wake the pods waiting in pre_bind."""
        self._changed.set()

    # --- PreFilter -----------------------------------------------------------------------------------

    def _refusal(self, pod: PodInfo) -> str | None:
        """podHasPVCs: a claim missing, lost, being deleted, or an ephemeral one not owned by the pod."""
        for volume in (pod.obj.get("spec") or {}).get("volumes") or []:
            source = volume.get("persistentVolumeClaim")
            ephemeral = isinstance(volume.get("ephemeral"), dict)
            if isinstance(source, dict) and source.get("claimName"):
                name = source["claimName"]
            elif ephemeral:
                name = vol.ephemeral_claim_name(pod.obj, volume)
            else:
                continue
            claim = self.claims.get(f"{pod.namespace}/{name}")
            if claim is None:
                if ephemeral:
                    return f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{name}"'
                return f'persistentvolumeclaim "{name}" not found'
            spec = claim.get("spec") or {}
            if (claim.get("status") or {}).get("phase") == "Lost":
                return (
                    f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume '
                    f'"{spec.get("volumeName") or ""}"'
                )
            if (claim.get("metadata") or {}).get("deletionTimestamp"):
                return f'persistentvolumeclaim "{name}" is being deleted'
            if ephemeral and not _controlled_by(claim, pod.uid):
                return (
                    f"PVC {pod.namespace}/{name} was not created for pod {pod.namespace}/{pod.name} "
                    "(pod is not owner)"
                )
        return None

    def claims_of(self, pod: PodInfo) -> PodClaims | str:
        """The pod's claims (GetPodVolumeClaims), or the reason no node can take the pod."""
        refusal = self._refusal(pod)
        if refusal is not None:
            return refusal
        out = PodClaims()
        for name in vol.claim_names(pod.obj):
            claim = self.claims.get(f"{pod.namespace}/{name}") or {}
            volume_name = (claim.get("spec") or {}).get("volumeName")
            if volume_name and vol.BIND_COMPLETED in vol.annotations(claim):
                out.bound.append(claim)
                continue
            sc = self.classes.get(vol.claim_class(claim)) if vol.claim_class(claim) else None
            delayed = sc is not None and sc.get("volumeBindingMode") == vol.WAIT_FOR_FIRST_CONSUMER
            if not delayed or volume_name:  # pre-bound claims count as immediate ones, as upstream's
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
        return self.find(claims, node.name, labels)[1]

    def find(self, claims: PodClaims, node: str, labels: dict[str, str]) -> tuple[Decision, tuple[str, ...]]:
        """FindPodVolumes: how the pod's claims bind on `node`, and the reasons they cannot, in upstream's
        order (volume node affinity, binding, storage capacity, a bound volume that does not exist)."""
        bound_ok, bound_found = self._check_bound(claims.bound, node, labels)
        unbound_ok, enough, decision = self._check_delayed(claims.delayed, node, labels)
        reasons = [
            reason
            for ok, reason in (
                (bound_ok, NODE_CONFLICT),
                (unbound_ok, BIND_CONFLICT),
                (enough, NOT_ENOUGH_SPACE),
                (bound_found, PV_NOT_EXIST),
            )
            if not ok
        ]
        return decision, tuple(reasons)

    def _check_bound(self, bound: list[Obj], node: str, labels: dict[str, str]) -> tuple[bool, bool]:
        """checkBoundClaims: (node affinity satisfied, every volume found), stopping at the first miss."""
        for claim in bound:
            volume = self.volumes.get((claim.get("spec") or {}).get("volumeName", ""))
            if volume is None:
                return True, False
            if not vol.node_affinity_fits(volume, node, labels):
                return False, True
        return True, True

    def _check_delayed(
        self, delayed: list[Obj], node: str, labels: dict[str, str]
    ) -> tuple[bool, bool, Decision]:
        """The WaitForFirstConsumer claims: (bindable, enough storage, the decision). A claim given
        another node fails at once; the others take the smallest fitting static volume, smallest claim
        first, and the rest are provisioned if the class provisions here and has the capacity."""
        to_match: list[Obj] = []
        provision: list[Obj] = []
        for claim in delayed:
            selected = vol.annotations(claim).get(vol.SELECTED_NODE)
            if selected is None:
                to_match.append(claim)
            elif selected != node:
                return False, True, NO_DECISION
            else:
                provision.append(claim)
        static: list[tuple[Obj, Obj]] = []
        taken: set[str] = set()
        for claim in sorted(to_match, key=vol.requested_bytes):
            match = vol.find_matching_volume(
                claim, self.volumes.list(), (node, labels), excluded=frozenset(taken)
            )
            if match is None:
                provision.append(claim)
                continue
            taken.add(match["metadata"]["name"])
            static.append((claim, match))
        for claim in provision:
            sc = self.classes.get(vol.claim_class(claim)) or {}
            provisioner = sc.get("provisioner")
            if not provisioner or provisioner == NO_PROVISIONER or not capacity.topology_allows(sc, labels):
                return False, True, NO_DECISION
            if not capacity.has_enough_capacity(claim, sc, labels, self.drivers, self._capacities()):
                return True, False, NO_DECISION
        return True, True, Decision(tuple(static), tuple(provision))

    def _capacities(self) -> list[Obj]:
        return self.capacities.list() if self.capacities is not None else []

    def forget(self, uid: str) -> None:
        self._pods.pop(uid, None)

    def pod_deleted(self, uid: str) -> None:
        """The pod is gone: a PreBind waiting for its claims gives up (upstream's checkBindings)."""
        self._pods.pop(uid, None)
        if uid in self._waiting:
            self._deleted.add(uid)
            self._changed.set()

    # --- PreBind -------------------------------------------------------------------------------------

    async def pre_bind(self, client: KubeClient, pod: PodInfo, node: str, labels: dict[str, str]) -> None:
        """Write the bindings the node needs, then wait until every claim of the pod is bound."""
        claims = self._pods.pop(pod.uid, None)
        if claims is None or not claims.delayed:
            return
        decision, reasons = self.find(claims, node, labels)
        if reasons:
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
        self._waiting.add(pod.uid)
        try:
            await asyncio.wait_for(self._all_bound(pod, names), self.timeout)
        except TimeoutError:
            raise BindingError(
                f"binding volumes: context deadline exceeded (pod {pod.namespace}/{pod.name})"
            ) from None
        finally:
            self._waiting.discard(pod.uid)
            self._deleted.discard(pod.uid)

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

    async def _all_bound(self, pod: PodInfo, names: list[str]) -> None:
        while not all(self._bound(pod.namespace, n) for n in names):
            if pod.uid in self._deleted:
                raise PodGone(f"binding volumes: pod does not exist any more ({pod.namespace}/{pod.name})")
            self._changed.clear()
            await self._changed.wait()
