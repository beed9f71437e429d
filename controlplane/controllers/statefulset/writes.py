"""The StatefulSet controller's writes (upstream's StatefulPodControl), with its events.

A pod is created after its claims (a claim being deleted blocks it: `pvc <name> is being deleted`); once
it exists its claims' ownerReferences are set for the retention policy. Events are upstream's:
`SuccessfulCreate` `create Pod web-0 in StatefulSet web successful`, `create Claim data-web-0 Pod web-0
in StatefulSet web success`, `SuccessfulDelete` `delete Pod web-2 in StatefulSet web successful`,
`SuccessfulUpdate` for a relabelled pod, and the `Failed<Verb>` forms `... failed error: <why>`.
A pod whose name is already taken is left for the cache to show (the next sync sees it).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any
from urllib.parse import quote

from controlplane.controllers.statefulset import identity
from controlplane.controllers.statefulset.logic import Inputs, Plan, Step
from kubeclient.client import STRATEGIC_PATCH, KubeClient
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL, WARNING, EventRecorder

Obj = dict[str, Any]


def pods_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{quote(namespace)}/pods"
    return f"{base}/{quote(name)}" if name else base


def claims_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{quote(namespace)}/persistentvolumeclaims"
    return f"{base}/{quote(name)}" if name else base


class StatefulWrites:
    def __init__(self, client: KubeClient, recorder: EventRecorder) -> None:
        self.client = client
        self.recorder = recorder

    # --- events --------------------------------------------------------------------------------------

    def _pod_event(self, verb: str, sts: Obj, pod: Obj, err: BaseException | None = None) -> None:
        name, owner = pod["metadata"]["name"], sts["metadata"]["name"]
        if err is None:
            self.recorder.event(
                sts,
                NORMAL,
                f"Successful{verb}",
                f"{verb.lower()} Pod {name} in StatefulSet {owner} successful",
            )
        else:
            self.recorder.event(
                sts,
                WARNING,
                f"Failed{verb}",
                f"{verb.lower()} Pod {name} in StatefulSet {owner} failed error: {_text(err)}",
            )

    def _claim_event(self, sts: Obj, pod: Obj, claim: Obj, err: BaseException | None = None) -> None:
        names = (claim["metadata"]["name"], pod["metadata"]["name"], sts["metadata"]["name"])
        if err is None:
            self.recorder.event(
                sts,
                NORMAL,
                "SuccessfulCreate",
                "create Claim {} Pod {} in StatefulSet {} success".format(*names),
            )
        else:
            self.recorder.event(
                sts,
                WARNING,
                "FailedCreate",
                "create Claim {} for Pod {} in StatefulSet {} failed error: {}".format(*names, _text(err)),
            )

    # --- the plan ------------------------------------------------------------------------------------

    async def carry_out(self, inp: Inputs, plan: Plan) -> None:
        """Each phase's steps at once (a phase of OrderedReady holds at most one create or delete); the
        first error ends the sync."""
        for steps in plan.steps:
            if not steps:
                continue
            results = await asyncio.gather(*(self._step(inp, s) for s in steps), return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            if errors:
                raise errors[0]

    async def _step(self, inp: Inputs, step: Step) -> None:
        if step.verb == "create":
            await self.create_pod(inp, step.pod)
        elif step.verb == "delete":
            await self.delete_pod(inp.sts, step.pod)
        elif step.verb == "identity":
            await self.relabel_pod(inp.sts, step.pod)
        elif step.verb == "claims":
            await self.create_claims(inp, step.pod)
        elif step.verb == "owners":
            await self.fix_claim_owners(inp, inp.update_set, step.pod)

    # --- pods ----------------------------------------------------------------------------------------

    async def create_pod(self, inp: Inputs, pod: Obj) -> None:
        sts = inp.sts
        try:
            await self.create_claims(inp, pod)
        except Exception as err:
            self._pod_event("Create", sts, pod, err)
            raise
        try:
            created = await self.client.create(pods_path(pod["metadata"]["namespace"]), pod)
        except ApiError as err:
            if err.already_exists:
                return  # made by an earlier sync the cache has not shown yet
            if not (err.forbidden and "being terminated" in err.message):
                self._pod_event("Create", sts, pod, err)
            raise
        self._pod_event("Create", sts, created)
        await self.fix_claim_owners(inp, sts, created, fresh=True)

    async def delete_pod(self, sts: Obj, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            await self.client.delete(
                pods_path(meta["namespace"], meta["name"]), {"preconditions": {"uid": meta["uid"]}}
            )
        except ApiError as err:
            if err.not_found:
                return
            self._pod_event("Delete", sts, pod, err)
            raise
        self._pod_event("Delete", sts, pod)

    async def relabel_pod(self, sts: Obj, pod: Obj) -> None:
        """updateIdentity on a live pod: its pod-name and pod-index labels (name, hostname and subdomain
        cannot change on a pod)."""
        meta = pod["metadata"]
        ordinal = identity.ordinal_of(pod)
        patch = {"metadata": {"labels": identity.identity_labels(sts, ordinal), "uid": meta["uid"]}}
        try:
            await self.client.patch(
                pods_path(meta["namespace"], meta["name"]), patch, content_type=STRATEGIC_PATCH
            )
        except ApiError as err:
            if err.not_found:
                return
            self._pod_event("Update", sts, pod, err)
            raise
        self._pod_event("Update", sts, pod)

    # --- claims --------------------------------------------------------------------------------------

    async def create_claims(self, inp: Inputs, pod: Obj) -> None:
        """createPersistentVolumeClaims: each missing claim of the pod; one being deleted is an error."""
        sts = inp.sts
        errors: list[str] = []
        for claim in identity.claims_for(sts, identity.ordinal_of(pod)).values():
            name = claim["metadata"]["name"]
            existing = inp.claims.get(name)
            if existing is not None:
                if existing["metadata"].get("deletionTimestamp"):
                    errors.append(f"pvc {name} is being deleted")
                continue
            try:
                made = await self.client.create(claims_path(claim["metadata"]["namespace"]), claim)
            except ApiError as err:
                errors.append(f"failed to create PVC {name}: {_text(err)}")
                if not err.already_exists:
                    self._claim_event(sts, pod, claim, err)
                continue
            inp.claims[name] = made
            self._claim_event(sts, pod, claim)
        if errors:
            raise RuntimeError(", ".join(errors) if len(errors) == 1 else "[" + ", ".join(errors) + "]")

    async def fix_claim_owners(self, inp: Inputs, sts: Obj, pod: Obj, fresh: bool = False) -> None:
        """UpdatePodClaimForRetentionPolicy: each existing claim's ownerReferences as the policy wants."""
        owner = {**sts, "metadata": {**sts["metadata"], "uid": inp.sts["metadata"]["uid"]}}
        for wanted in identity.claims_for(sts, identity.ordinal_of(pod)).values():
            name = wanted["metadata"]["name"]
            claim = inp.claims.get(name)
            if claim is None:
                continue
            if identity.claim_owner_up_to_date(claim, owner, pod):
                continue
            body = copy.deepcopy(claim)
            body["metadata"]["ownerReferences"] = identity.claim_owner_refs(claim, owner, pod)
            if not body["metadata"]["ownerReferences"]:
                del body["metadata"]["ownerReferences"]
            try:
                inp.claims[name] = await self.client.replace(
                    claims_path(body["metadata"]["namespace"], name), body
                )
            except ApiError as err:
                if err.not_found:
                    continue
                if err.conflict and fresh:
                    continue  # changed since the cache saw it: the next sync looks again
                raise RuntimeError(
                    f"could not update claim {name} for delete policy ownerRefs: {_text(err)}"
                ) from err


def _text(err: BaseException) -> str:
    if isinstance(err, ApiError):
        return err.message or str(err)
    return str(err)
