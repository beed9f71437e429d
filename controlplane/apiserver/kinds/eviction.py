"""pods/{name}/eviction: a delete that respects PodDisruptionBudgets (upstream's
pkg/registry/core/pod/storage/eviction.go), what `kubectl drain` posts for every pod it moves.

A pod that is not running (Pending, Succeeded, Failed) or already terminating has disrupted nothing
more by going, so it is deleted without a budget check. Otherwise the one PodDisruptionBudget selecting
it (more than one is upstream's 500) must allow a disruption: its status is decremented by a
conflict-checked status write that records the pod in disruptedPods (so the disruption controller does
not count it healthy while it terminates), then the pod is deleted with the eviction's deleteOptions.
A budget at zero, or one whose status the controller has not recomputed since its spec changed, is a
429 TooManyRequests with upstream's message and DisruptionBudget cause, which kubectl drain retries.
An unready pod goes without spending the budget when the policy is AlwaysAllow, or (IfHealthyBudget,
the default) while the budget is otherwise met; its deletion then carries the resourceVersion read, so
a pod that turned ready meanwhile is not deleted (another 429). Every deletion first records the
DisruptionTarget condition (EvictionByEvictionAPI), as 1.32 does.

The body is policy/v1 Eviction, or policy/v1beta1 (accepted as upstream's AcceptsGroupVersion);
kubectl's typed client posts protobuf. Authorized as `create` on pods/eviction.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import random
from typing import TYPE_CHECKING, Any

from aiohttp import web

from controlplane.apiserver import errors
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.kinds.base import Subresource
from controlplane.apiserver.kinds.ports import AdmissionRequest
from controlplane.apiserver.meta import timestamp
from controlplane.apiserver.options import DeleteOptions
from kubeclient.selectors import SelectorError, from_label_selector

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.base import Kind
    from controlplane.apiserver.kinds.ports import Registry, RequestInfo, RestHandler
    from controlplane.apiserver.userinfo import UserInfo

Obj = dict[str, Any]
SCHEMA = "V1Eviction"
API_VERSIONS = ("policy/v1", "policy/v1beta1")
# MaxDisruptedPodSize: evictions the controller has not yet confirmed, beyond which the handler refuses.
MAX_DISRUPTED_PODS = 2000
# EvictionsRetry: 20 steps of 500 ms (jitter 0.1) on conflicts.
RETRY_STEPS = 20
RETRY_DELAY = 0.5
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."
MORE_THAN_ONE = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"


# --- the errors ------------------------------------------------------------------------------------------


def too_many_requests(cause: str, retry_after: int) -> ApiError:
    """errors.NewTooManyRequests with the DisruptionBudget cause eviction.go appends."""
    details: Obj = {"causes": [{"reason": DISRUPTION_BUDGET_CAUSE, "message": cause}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return ApiError(429, "TooManyRequests", VIOLATES, details)


def still_processing(pdb_name: str) -> ApiError:
    """createTooManyRequestsError: the budget's status is behind its spec (or the pod turned ready)."""
    return too_many_requests(f"The disruption budget {pdb_name} is still being processed by the server.", 10)


def _forbidden_pdb(name: str, why: str) -> ApiError:
    # upstream names the resource in the singular here (policy.Resource("poddisruptionbudget")).
    return errors.forbidden_request(
        f'poddisruptionbudget.policy "{name}" is forbidden: {why}', "poddisruptionbudget", "policy", name
    )


# --- pure decisions --------------------------------------------------------------------------------------


def pod_ready(pod: Obj) -> bool:
    """podutil.IsPodReady: the Ready condition is True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def can_ignore_pdb(pod: Obj) -> bool:
    """A pod that is not running or already terminating goes without a budget check."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(pod["metadata"].get("deletionTimestamp"))


def should_enforce_resource_version(pod: Obj) -> bool:
    """Pending pods are deleted at the version read, so one turning ready meanwhile is not."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def selects(pdb: Obj, pod: Obj) -> bool:
    """getPodDisruptionBudgets: policy/v1's selector rules (none selects nothing, an empty one every pod
    of the namespace); an invalid selector matches nothing."""
    try:
        selector = from_label_selector((pdb.get("spec") or {}).get("selector"))
        return selector.matches(pod["metadata"].get("labels") or {})
    except SelectorError:
        return False


def unhealthy_may_go(pod: Obj, pdb: Obj) -> bool:
    """An unready pod goes without spending the budget: AlwaysAllow, or (IfHealthyBudget, the default)
    while the budget is met without it."""
    if pod_ready(pod):
        return False
    if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    status = pdb.get("status") or {}
    desired = status.get("desiredHealthy", 0)
    return status.get("currentHealthy", 0) >= desired > 0


def set_disruption_allowed(status: Obj) -> None:
    """pdbhelper.UpdateDisruptionAllowedCondition (meta.SetStatusCondition: the transition time moves
    only when the status changes)."""
    allowed = status.get("disruptionsAllowed", 0) > 0
    wanted = {
        "type": "DisruptionAllowed",
        "status": "True" if allowed else "False",
        "reason": "SufficientPods" if allowed else "InsufficientPods",
        "message": "",
        "observedGeneration": status.get("observedGeneration", 0),
    }
    conditions = status.setdefault("conditions", [])
    for cond in conditions:
        if cond.get("type") == "DisruptionAllowed":
            if cond.get("status") != wanted["status"]:
                cond["lastTransitionTime"] = timestamp()
            cond.update({k: v for k, v in wanted.items() if k != "type"})
            return
    conditions.append({**wanted, "lastTransitionTime": timestamp()})


def decrement(pdb: Obj, pod_name: str, dry_run: bool) -> Obj | None:
    """checkAndDecrement on a copy of `pdb`: the status to write (None for a dry run), or the error."""
    pdb = copy.deepcopy(pdb)
    meta, status = pdb["metadata"], pdb.setdefault("status", {})
    name = meta.get("name", "")
    if status.get("observedGeneration", 0) < meta.get("generation", 0):
        raise still_processing(name)
    allowed = status.get("disruptionsAllowed", 0)
    if allowed < 0:
        raise _forbidden_pdb(name, "pdb disruptions allowed is negative")
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
        raise _forbidden_pdb(
            name, "DisruptedPods map too big - too many evictions not confirmed by PDB controller"
        )
    if allowed == 0:
        raise too_many_requests(
            f"The disruption budget {name} needs {status.get('desiredHealthy', 0)} healthy pods "
            f"and has {status.get('currentHealthy', 0)} currently",
            0,
        )
    status["disruptionsAllowed"] = allowed - 1
    if status["disruptionsAllowed"] == 0:
        set_disruption_allowed(status)
    if dry_run:
        return None
    status["disruptedPods"] = {**(status.get("disruptedPods") or {}), pod_name: timestamp()}
    return pdb


def delete_options(eviction: Obj, query: Any) -> DeleteOptions:
    """propagateDryRun: the request's dryRun goes into the eviction's deleteOptions; two different
    ones are an error."""
    body = eviction.get("deleteOptions")
    query_dry_run = list(query.getall("dryRun", []))
    if body is None:
        return DeleteOptions(dry_run_values=query_dry_run).check()
    options = DeleteOptions.parse(body, {})
    if not options.dry_run_values:
        options.dry_run_values = query_dry_run
    elif query_dry_run and query_dry_run != options.dry_run_values:
        raise errors.internal(
            f"Non-matching dry-run options in request and content: [{' '.join(query_dry_run)}] and "
            f"[{' '.join(options.dry_run_values)}]"
        )
    return options.check()


# --- the steps ---------------------------------------------------------------------------------------------


async def _retrying(step: Any, retry: Any) -> Any:
    """retry.OnError(EvictionsRetry, retry, step)."""
    for attempt in range(RETRY_STEPS):
        try:
            return await step()
        except ApiError as err:
            if attempt == RETRY_STEPS - 1 or not retry(err):
                raise
        await asyncio.sleep(RETRY_DELAY * (1 + 0.1 * random.random()))
    return None


def _conflict(err: ApiError) -> bool:
    return err.code == 409 and err.reason == "Conflict"


class Evictor:
    """One eviction request against the registry."""

    def __init__(self, registry: Registry, user: UserInfo, namespace: str, name: str, options: DeleteOptions):
        from controlplane.apiserver.kinds.pod import KIND as POD
        from controlplane.apiserver.kinds.poddisruptionbudget import KIND as PDB

        self.registry, self.user = registry, user
        self.namespace, self.name, self.options = namespace, name, options
        self.pods: Kind = POD
        self.pdbs: Kind = PDB

    async def evict(self) -> Obj | None:
        """None once the pod is deleted; a Status to answer with otherwise (more than one budget)."""
        pod: Obj = {}

        async def ignoring_pdb() -> bool:
            nonlocal pod
            pod = (await self.registry.get(self.pods, self.namespace, self.name)).obj
            if not can_ignore_pdb(pod):
                return False
            options = self.options
            if should_enforce_resource_version(pod) and options.resource_version is None:
                options = dataclasses.replace(options, resource_version=pod["metadata"]["resourceVersion"])
            await self._delete(options)
            return True

        rv_given = self.options.resource_version is not None
        if await _retrying(ignoring_pdb, lambda err: _conflict(err) and not rv_given):
            return None
        budgets = [p.obj for p in self._budgets() if selects(p.obj, pod)]
        if len(budgets) > 1:
            return {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": MORE_THAN_ONE,
                "code": 500,
            }
        options, pdb_name = self.options, ""
        if budgets:
            pdb = budgets[0]
            pdb_name = pdb["metadata"]["name"]
            if unhealthy_may_go(pod, pdb):
                options = dataclasses.replace(options, resource_version=pod["metadata"]["resourceVersion"])
            else:
                await self._spend(pdb)
        try:
            await self._delete(options)
        except ApiError as err:
            if _conflict(err) and options is not self.options and not rv_given:
                raise still_processing(pdb_name) from None
            raise
        return None

    def _budgets(self) -> list[Any]:
        return self.registry.cache.list(self.pdbs.bucket, self.pdbs.prefix(self.namespace), None)

    async def _spend(self, pdb: Obj) -> None:
        """Verify and decrement the budget, refreshed after each conflict."""
        current = pdb

        async def step() -> None:
            nonlocal current
            try:
                updated = decrement(current, self.name, self.options.dry_run)
                if updated is not None:
                    await self.registry.update(
                        self.pdbs, self.namespace, current["metadata"]["name"], updated, "status", self.user
                    )
            except ApiError:
                current = (await self.registry.get(self.pdbs, self.namespace, pdb["metadata"]["name"])).obj
                raise

        try:
            await _retrying(step, _conflict)
        except ApiError as err:
            if _conflict(err):
                raise ApiError(
                    504,
                    "Timeout",
                    f'Timeout: couldn\'t update PodDisruptionBudget "{pdb["metadata"]["name"]}" due to conflicts',
                    {"retryAfterSeconds": 10},
                ) from None
            raise

    async def _delete(self, options: DeleteOptions) -> None:
        """addConditionAndDeletePod: the DisruptionTarget condition, then the delete."""
        if not options.dry_run:

            def mark(pod: Obj) -> Obj:
                meta = pod["metadata"]
                if options.uid is not None and options.uid != meta.get("uid"):
                    raise errors.conflict("Pod", "", self.name, _uid_mismatch(options.uid, meta.get("uid")))
                rv = options.resource_version
                if rv is not None and rv != meta.get("resourceVersion"):
                    raise errors.conflict("Pod", "", self.name, _rv_mismatch(rv, meta.get("resourceVersion")))
                _set_disruption_target(pod)
                return pod

            updated = await self.registry.guaranteed_update(
                self.pods, self.namespace, self.name, mark, "status", self.user
            )
            if options.resource_version is not None:
                options = dataclasses.replace(
                    options, resource_version=updated["metadata"]["resourceVersion"]
                )
        await self.registry.delete(self.pods, self.namespace, self.name, options)


def _uid_mismatch(want: str, have: Any) -> str:
    return (
        f"the UID in the precondition ({want}) does not match the UID in record ({have}). "
        "The object might have been deleted and then recreated"
    )


def _rv_mismatch(want: str, have: Any) -> str:
    return (
        f"the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record "
        f"({have}). The object might have been modified"
    )


def _set_disruption_target(pod: Obj) -> None:
    """podutil.UpdatePodCondition with DisruptionTarget=True, EvictionByEvictionAPI."""
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    wanted = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
    }
    for cond in conditions:
        if cond.get("type") == "DisruptionTarget":
            if cond.get("status") != "True":
                cond["lastTransitionTime"] = timestamp()
            cond.update(wanted)
            return
    conditions.append({**wanted, "lastProbeTime": None, "lastTransitionTime": timestamp()})


class EvictionSubresource(Subresource):
    """pods/{name}/eviction (create only)."""

    name = "eviction"
    group = "policy"
    version = "v1"
    kind = "Eviction"
    verbs = ("create",)
    schema = SCHEMA

    async def create(self, rest: RestHandler, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        body = await rest.body(request)
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON or YAML object")
        api_version = body.get("apiVersion") or "policy/v1"
        if api_version not in API_VERSIONS:
            api_version = "policy/v1"  # check_kind names the mismatch
        eviction = rest.check_kind(body, self.kind, api_version)
        unknown = rest.decode(eviction, self.kind, api_version, SCHEMA, request)
        if (eviction.get("metadata") or {}).get("name") != info.name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        rest.dry_run(request)  # an unknown dryRun value is a 400
        options = delete_options(eviction, request.query)
        # createValidation: the admission plugins judge the Eviction (NodeRestriction: a node evicts
        # only its own pods).
        user = rest.user(request)
        admission = AdmissionRequest(
            "CREATE", info.resource, self.name, info.namespace, info.name, eviction, None, user, rest.registry
        )
        await rest.registry.admission.admit(admission)
        await rest.registry.admission.validate(admission)
        evictor = Evictor(rest.registry, rest.user(request), info.namespace, info.name, options)
        status = await evictor.evict()
        if status is not None:
            return rest.json(status, status["code"])
        success = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
        return rest.warn(rest.json(success, 201), unknown)


EVICTION = EvictionSubresource()
