"""Local APIServices for the group/versions this server serves itself, as kube-aggregator's
autoregister controller keeps them (k8s.io/kube-aggregator/pkg/controllers/autoregister, fed by
createAggregatorServer from the delegate's listed paths): `v1.` for the core group, `v1.apps`,
`v2.autoscaling`, ... each with `spec.service: null` (Local, so always Available) and upstream's
discovery priorities, labelled `kube-aggregator.kubernetes.io/automanaged: onstart`. So `kubectl get
apiservices` lists every built-in API beside the aggregated ones, as on any cluster.

At each start the set is made to match the kinds served: missing ones created, an automanaged one
whose priorities differ put right, automanaged `onstart` ones for versions no longer served deleted.
An APIService without the label is a user's and is never touched. A group/version without a priority
in upstream's table is skipped, as upstream's makeAPIService skips it (it could otherwise shadow a
CRD of that name forever). `sync_crds` does the same for the CRDs' served versions (upstream's
crdRegistrationController, label `true`, priorities 1000/100), called by the CRD controller on every
change."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.kinds.apiservice import KIND as APISERVICES
from controlplane.apiserver.options import DeleteOptions
from controlplane.apiserver.registry import Registry

log = logging.getLogger("controlplane.apiserver.aggregator")
Obj = dict[str, Any]
AUTOMANAGED = "kube-aggregator.kubernetes.io/automanaged"
ON_START = "onstart"
CONTINUOUSLY = "true"  # upstream's manageContinuously: the CRDs' APIServices
CRD_PRIORITY = (1000, 100)  # crdregistration_controller.go: groupPriorityMinimum, versionPriority

# upstream's DefaultGenericAPIServicePriorities merged with kube-apiserver's apiVersionPriorities:
# (group, version) -> (groupPriorityMinimum, versionPriority).
PRIORITIES: dict[tuple[str, str], tuple[int, int]] = {
    ("", "v1"): (18000, 1),
    ("apps", "v1"): (17800, 15),
    ("events.k8s.io", "v1"): (17750, 15),
    ("events.k8s.io", "v1beta1"): (17750, 5),
    ("authentication.k8s.io", "v1"): (17700, 15),
    ("authentication.k8s.io", "v1beta1"): (17700, 9),
    ("authentication.k8s.io", "v1alpha1"): (17700, 1),
    ("authorization.k8s.io", "v1"): (17600, 15),
    ("autoscaling", "v1"): (17500, 15),
    ("autoscaling", "v2"): (17500, 30),
    ("autoscaling", "v2beta1"): (17500, 9),
    ("autoscaling", "v2beta2"): (17500, 1),
    ("batch", "v1"): (17400, 15),
    ("batch", "v1beta1"): (17400, 9),
    ("batch", "v2alpha1"): (17400, 9),
    ("certificates.k8s.io", "v1"): (17300, 15),
    ("certificates.k8s.io", "v1alpha1"): (17300, 1),
    ("networking.k8s.io", "v1"): (17200, 15),
    ("networking.k8s.io", "v1beta1"): (17200, 9),
    ("policy", "v1"): (17100, 15),
    ("policy", "v1beta1"): (17100, 9),
    ("rbac.authorization.k8s.io", "v1"): (17000, 15),
    ("storage.k8s.io", "v1"): (16800, 15),
    ("storage.k8s.io", "v1beta1"): (16800, 9),
    ("storage.k8s.io", "v1alpha1"): (16800, 1),
    ("apiextensions.k8s.io", "v1"): (16700, 15),
    ("admissionregistration.k8s.io", "v1"): (16700, 15),
    ("admissionregistration.k8s.io", "v1beta1"): (16700, 12),
    ("admissionregistration.k8s.io", "v1alpha1"): (16700, 9),
    ("scheduling.k8s.io", "v1"): (16600, 15),
    ("coordination.k8s.io", "v1"): (16500, 15),
    ("node.k8s.io", "v1"): (16300, 15),
    ("node.k8s.io", "v1beta1"): (16300, 9),
    ("node.k8s.io", "v1alpha1"): (16300, 1),
    ("discovery.k8s.io", "v1"): (16200, 15),
    ("discovery.k8s.io", "v1beta1"): (16200, 12),
    ("resource.k8s.io", "v1beta2"): (16200, 15),
    ("resource.k8s.io", "v1beta1"): (16200, 9),
    ("resource.k8s.io", "v1alpha3"): (16200, 1),
    ("flowcontrol.apiserver.k8s.io", "v1"): (16100, 21),
    ("flowcontrol.apiserver.k8s.io", "v1beta3"): (16100, 18),
    ("flowcontrol.apiserver.k8s.io", "v1beta2"): (16100, 15),
    ("flowcontrol.apiserver.k8s.io", "v1beta1"): (16100, 12),
    ("flowcontrol.apiserver.k8s.io", "v1alpha1"): (16100, 9),
    ("internal.apiserver.k8s.io", "v1alpha1"): (16000, 9),
    ("storagemigration.k8s.io", "v1alpha1"): (15800, 9),
}


def name_of(group: str, version: str) -> str:
    return f"{version}.{group}"


def local_apiservice(group: str, version: str, label: str = ON_START) -> Obj | None:
    """upstream's makeAPIService: None for a group/version without a priority."""
    priority = PRIORITIES.get((group, version))
    if priority is None:
        return None
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": name_of(group, version), "labels": {AUTOMANAGED: label}},
        "spec": {
            "group": group,
            "version": version,
            "groupPriorityMinimum": priority[0],
            "versionPriority": priority[1],
            "service": None,
        },
    }


def _spec_differs(current: Obj, wanted: Obj) -> bool:
    spec, want = current.get("spec") or {}, wanted["spec"]
    return any(
        spec.get(k) != want[k] for k in ("group", "version", "groupPriorityMinimum", "versionPriority")
    ) or bool(spec.get("service"))


def crd_apiservice(group: str, version: str) -> Obj:
    """What upstream's crdRegistrationController asks for a CRD's group/version: low priority, the
    version order left to the kube-like version names (all CRD versions share versionPriority 100)."""
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": name_of(group, version), "labels": {AUTOMANAGED: CONTINUOUSLY}},
        "spec": {
            "group": group,
            "version": version,
            "groupPriorityMinimum": CRD_PRIORITY[0],
            "versionPriority": CRD_PRIORITY[1],
            "service": None,
        },
    }


async def sync(registry: Registry, served: Iterable[tuple[str, str]]) -> None:
    """Make the automanaged `onstart` APIServices match `served` (group, version) pairs."""
    wanted = {
        obj["metadata"]["name"]: obj
        for obj in (local_apiservice(g, v) for g, v in dict.fromkeys(served))
        if obj is not None
    }
    await _reconcile(registry, wanted, ON_START)


async def sync_crds(registry: Registry, served: Iterable[tuple[str, str]]) -> None:
    """Make the automanaged `true` APIServices match the CRDs' served (group, version) pairs; a
    group/version the server has built in is left to it (upstream's APIServiceAlreadyExists)."""
    wanted = {
        name_of(g, v): crd_apiservice(g, v)
        for g, v in dict.fromkeys(served)
        if g and (g, v) not in PRIORITIES
    }
    await _reconcile(registry, wanted, CONTINUOUSLY)


async def _reconcile(registry: Registry, wanted: dict[str, Obj], label: str) -> None:
    await registry.cache.wait_fresh()
    current = {
        c.obj["metadata"]["name"]: c.obj
        for c in registry.cache.list(APISERVICES.bucket, APISERVICES.prefix(""))
    }
    for name, obj in wanted.items():
        have = current.get(name)
        if have is None:
            try:
                await registry.create(APISERVICES, "", obj)
            except ApiError as err:
                if err.code != 409:  # another API server made it first
                    raise
        elif ((have["metadata"].get("labels") or {}).get(AUTOMANAGED)) and _spec_differs(have, obj):

            def put(o: Obj, spec: Obj = obj["spec"]) -> Obj:
                o["spec"] = dict(spec)
                return o

            await registry.guaranteed_update(APISERVICES, "", name, put)
    for name, have in current.items():
        if name in wanted or (have["metadata"].get("labels") or {}).get(AUTOMANAGED) != label:
            continue
        log.info("event=local-apiservice-removed apiservice=%s", name)
        try:
            await registry.delete(APISERVICES, "", name, DeleteOptions(uid=have["metadata"].get("uid")))
        except ApiError as err:
            if err.code not in (404, 409):
                raise
