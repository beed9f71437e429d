"""The disruption controller's loop (upstream's pkg/controller/disruption): for each PodDisruptionBudget,
find its pods, the scale of their controllers (ReplicaSet, Deployment, ReplicationController from the
caches; StatefulSet and any other kind through its scale subresource), and write the status the
eviction subresource decides from (logic.py computes it). A sync that fails for another reason than a
conflict writes the fail-safe status (no disruptions, SyncFailed), as upstream, so a budget whose
numbers are unknown never lets a pod go.

Pods are mapped to the budgets whose selector matches them (an empty selector matches every pod of the
namespace, policy/v1's rule), so a pod turning Ready, going or changing labels re-syncs its budgets; a
budget with recorded disruptions is looked at again when the earliest one expires. A pod left with
a DisruptionTarget condition but no deletion has the condition set back to False after 2 min
(syncStalePodDisruption; its own keys, `pod:<namespace>/<name>`, share the queue).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import quote

from controlplane.controllers import podutil
from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.disruption import logic
from kubeclient.errors import ApiError
from kubeclient.informer import by_namespace, controller_ref, key_of, split_key
from kubeclient.selectors import SelectorError, from_label_selector

log = logging.getLogger("controlplane.controllers")
Obj = dict[str, Any]

PDBS = "/apis/policy/v1/poddisruptionbudgets"
STALE = "pod:"  # the queue's keys for pods whose DisruptionTarget may be stale
FIELD_MANAGER = "DisruptionController"
UNMANAGED = (
    "Pods selected by this PodDisruptionBudget (selector: {selector}) were found to be unmanaged. As a "
    "result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. "
    'To account for these pods please set ".spec.minAvailable" field of the PDB to an integer value.'
)


def rfc3339(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def selects(pdb: Obj, pod: Obj) -> bool:
    try:
        selector = from_label_selector((pdb.get("spec") or {}).get("selector"))
    except SelectorError:
        return False
    return selector.matches(pod["metadata"].get("labels") or {})


class DisruptionController(Controller):
    name = "disruption"
    workers = 5

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        # Tests hand it a clock through the manager options (disruptedPods expiry).
        self.clock: Callable[[], datetime] = ctx.option("disruption_clock", podutil.now)
        self.recorder = ctx.recorder("controllermanager")
        self.pdbs = ctx.informers.get(PDBS, indexers={"namespace": by_namespace})
        self.pods = ctx.informers.get("/api/v1/pods", indexers={"namespace": by_namespace})
        self.replicasets = ctx.informers.get("/apis/apps/v1/replicasets")
        self.deployments = ctx.informers.get("/apis/apps/v1/deployments")
        self.rcs = ctx.informers.get("/api/v1/replicationcontrollers")
        self.pdbs.add_handler(**self.handlers())
        self.pods.add_handler(
            on_add=self._pod_added,
            on_update=self._pod_updated,
            on_delete=self._pod_changed,
        )

    # --- feeding the queue -------------------------------------------------------------------------------

    def _pod_changed(self, pod: Obj) -> None:
        namespace = pod["metadata"].get("namespace", "")
        for pdb in self.pdbs.by_index("namespace", namespace):
            if selects(pdb, pod):
                self.enqueue(pdb)

    def _pod_added(self, pod: Obj) -> None:
        self._pod_changed(pod)
        wait = logic.stale_disruption_wait(pod, self.clock())
        if wait is not None:
            self.queue.add_after(STALE + key_of(pod), wait.total_seconds())

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        self._pod_added(new)
        if (old["metadata"].get("labels") or {}) != (new["metadata"].get("labels") or {}):
            self._pod_changed(old)

    # --- the controllers' scale (the finders) ------------------------------------------------------------

    async def _scale_of(self, ref: Obj, namespace: str) -> logic.Scale | None:
        """getPodReplicaSet, getPodDeployment, getPodReplicationController, then getScaleController."""
        kind, group = ref.get("kind"), _group(ref.get("apiVersion", ""))
        if kind == "ReplicaSet" and group in ("apps", "extensions"):
            rs = self.replicasets.get(f"{namespace}/{ref.get('name')}")
            if rs is None or rs["metadata"].get("uid") != ref.get("uid"):
                return None
            owner = controller_ref(rs)
            if owner is not None and owner.get("kind") == "Deployment":
                return self._deployment_scale(owner, namespace)
            return logic.Scale(rs["metadata"]["uid"], int((rs.get("spec") or {}).get("replicas", 1)))
        if kind == "ReplicationController" and group == "":
            rc = self.rcs.get(f"{namespace}/{ref.get('name')}")
            if rc is None or rc["metadata"].get("uid") != ref.get("uid"):
                return None
            return logic.Scale(rc["metadata"]["uid"], int((rc.get("spec") or {}).get("replicas", 1)))
        return await self._scale_subresource(ref, namespace)

    def _deployment_scale(self, owner: Obj, namespace: str) -> logic.Scale | None:
        if _group(owner.get("apiVersion", "")) not in ("apps", "extensions"):
            return None
        deployment = self.deployments.get(f"{namespace}/{owner.get('name')}")
        if deployment is None or deployment["metadata"].get("uid") != owner.get("uid"):
            return None
        replicas = int((deployment.get("spec") or {}).get("replicas", 1))
        return logic.Scale(deployment["metadata"]["uid"], replicas)

    async def _scale_subresource(self, ref: Obj, namespace: str) -> logic.Scale | None:
        """Any other controller (StatefulSet among them) through its scale subresource."""
        api_version, kind = ref.get("apiVersion", ""), ref.get("kind", "")
        if not kind:
            return None
        plural = kind.lower() + ("es" if kind.lower().endswith("s") else "s")
        base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        path = f"{base}/namespaces/{quote(namespace)}/{plural}/{quote(ref.get('name', ''))}/scale"
        try:
            scale = await self.client.get(path)
        except ApiError as err:
            if err.not_found:
                return None
            raise
        if (scale.get("metadata") or {}).get("uid") != ref.get("uid"):
            return None
        return logic.Scale(ref["uid"], int((scale.get("spec") or {}).get("replicas", 0)))

    # --- the sync ---------------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        if key.startswith(STALE):
            await self._sync_stale_pod(key[len(STALE) :])
            return
        pdb = self.pdbs.get(key)
        if pdb is None:
            return
        try:
            await self._try_sync(key, pdb)
        except ApiError as err:
            if err.conflict or err.not_found:
                raise  # retried without the fail-safe, as upstream
            log.warning("sync failed pdb=%s error=%s", key, err)
            await self._fail_safe(pdb, str(err))
        except logic.ExpectedCountError as err:
            log.warning("sync failed pdb=%s error=%s", key, err)
            await self._fail_safe(pdb, str(err))

    def _pods_of(self, pdb: Obj) -> list[Obj]:
        selector = from_label_selector((pdb.get("spec") or {}).get("selector"))
        namespace = pdb["metadata"].get("namespace", "")
        return [
            p
            for p in self.pods.by_index("namespace", namespace)
            if selector.matches(p["metadata"].get("labels") or {})
        ]

    async def _try_sync(self, key: str, pdb: Obj) -> None:
        try:
            pods = self._pods_of(pdb)
        except SelectorError as err:
            self.recorder.event(pdb, "Warning", "NoPods", f"Failed to get pods: {err}")
            raise logic.ExpectedCountError(str(err)) from None
        if not pods:
            self.recorder.event(pdb, "Normal", "NoPods", "No matching pods found")
        spec = pdb.get("spec") or {}
        finders: dict[str, logic.Scale | None] = {}
        if spec.get("maxUnavailable") is not None or isinstance(spec.get("minAvailable"), str):
            for pod in pods:
                ref = controller_ref(pod)
                if ref is not None and ref.get("uid") not in finders:
                    finders[ref["uid"]] = await self._scale_of(ref, pod["metadata"].get("namespace", ""))
        try:
            found = logic.expected_count(spec, pods, lambda ref, _ns: finders.get(ref.get("uid")))
        except logic.ExpectedCountError as err:
            self.recorder.event(
                pdb,
                "Warning",
                "CalculateExpectedPodCountFailed",
                f"Failed to calculate the number of expected pods: {err}",
            )
            raise
        if found.unmanaged:
            selector = json_selector(spec.get("selector"))
            self.recorder.event(pdb, "Warning", "UnmanagedPods", UNMANAGED.format(selector=selector))
        now = self.clock()
        recorded = (pdb.get("status") or {}).get("disruptedPods")
        disrupted, recheck, overdue = logic.disrupted_pods(pods, recorded, now)
        for pod in overdue:
            self.recorder.event(
                pod,
                "Warning",
                "NotDeleted",
                # (upstream names the namespace twice here)
                f"Pod was expected by PDB {pdb['metadata']['namespace']}/{pdb['metadata']['namespace']} "
                "to be deleted but it wasn't",
            )
        healthy = logic.current_healthy(pods, disrupted, now)
        status = logic.new_status(pdb, healthy, found, disrupted, rfc3339(now))
        if status is not None:
            await self._write(pdb, status)
        if recheck is not None:
            self.queue.add_after(key, max((recheck - now).total_seconds(), 0) + 0.05)

    async def _sync_stale_pod(self, key: str) -> None:
        """syncStalePodDisruption: DisruptionTarget back to False, at the version read."""
        pod = self.pods.get(key)
        if pod is None:
            return
        wait = logic.stale_disruption_wait(pod, self.clock())
        if wait is None:
            return
        if wait.total_seconds() > 0:
            self.queue.add_after(STALE + key, wait.total_seconds())
            return
        namespace, name = split_key(key)
        patch = {
            "metadata": {"resourceVersion": pod["metadata"].get("resourceVersion")},
            "status": {
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "False",
                        "lastTransitionTime": rfc3339(self.clock()),
                    }
                ]
            },
        }
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/status"
        await self.client.patch(path, patch, fieldManager=FIELD_MANAGER)
        log.info("reset stale DisruptionTarget condition to False pod=%s", key)

    async def _fail_safe(self, pdb: Obj, message: str) -> None:
        """failSafe: its write's error (a conflict among them) retries the key."""
        await self._write(pdb, logic.fail_safe_status(pdb, message, rfc3339(self.clock())))

    async def _write(self, pdb: Obj, status: Obj) -> None:
        namespace, name = split_key(key_of(pdb))
        body = {**pdb, "status": status}
        path = f"/apis/policy/v1/namespaces/{quote(namespace)}/poddisruptionbudgets/{quote(name)}/status"
        await self.client.replace(path, body)


def json_selector(selector: Any) -> str:
    """The selector as upstream's %v prints a *metav1.LabelSelector: close enough to recognise."""
    if not selector:
        return "nil"
    return str(from_label_selector(selector)) if isinstance(selector, dict) else str(selector)
