"""A StatefulSet pod's identity and storage (upstream's stateful_set_utils.go), without I/O.

Pod `<set>-<ordinal>` is labelled `statefulset.kubernetes.io/pod-name` and `apps.kubernetes.io/pod-index`
(the PodIndexLabel gate, on in 1.32), has hostname = its name and subdomain = spec.serviceName (so the
headless Service's DNS gives it `<pod>.<service>.<ns>.svc.<zone>`), and a volume per volumeClaimTemplate
naming the claim `<template>-<set>-<ordinal>`. The claims' ownerReferences carry the
persistentVolumeClaimRetentionPolicy: the set as their controller when they go with the set
(whenDeleted: Delete), the pod when they go with a scaled-down pod (whenScaled: Delete), none while
both are Retain, so the garbage collector does the deleting.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from controlplane.controllers.podcontrol import controller_ref as owner_ref
from controlplane.controllers.podcontrol import pod_from_template

Obj = dict[str, Any]

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
REVISION_LABEL = "controller-revision-hash"
RETAIN, DELETE = "Retain", "Delete"
SET_API, SET_KIND = "apps/v1", "StatefulSet"

_ORDINAL = re.compile(r"^(.*)-([0-9]+)$")


def parent_and_ordinal(name: str) -> tuple[str, int]:
    """getParentNameAndOrdinal: ("", -1) for a name that is not `<parent>-<number>`."""
    match = _ORDINAL.match(name or "")
    if not match:
        return "", -1
    ordinal = int(match.group(2))
    return (match.group(1), ordinal) if ordinal < 2**31 else (match.group(1), -1)


def ordinal_of(pod: Obj) -> int:
    return parent_and_ordinal((pod.get("metadata") or {}).get("name", ""))[1]


def is_member(sts: Obj, pod: Obj) -> bool:
    return parent_and_ordinal((pod.get("metadata") or {}).get("name", ""))[0] == sts["metadata"]["name"]


def start_ordinal(sts: Obj) -> int:
    return int(((sts.get("spec") or {}).get("ordinals") or {}).get("start") or 0)


def replicas(sts: Obj) -> int:
    value = (sts.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def in_range(sts: Obj, ordinal: int) -> bool:
    start = start_ordinal(sts)
    return start <= ordinal < start + replicas(sts)


def pod_name(sts: Obj, ordinal: int) -> str:
    return f"{sts['metadata']['name']}-{ordinal}"


def claim_name(sts: Obj, template: str, ordinal: int) -> str:
    return f"{template}-{sts['metadata']['name']}-{ordinal}"


def retention(sts: Obj) -> tuple[str, str]:
    """(whenDeleted, whenScaled), Retain where unset."""
    policy = (sts.get("spec") or {}).get("persistentVolumeClaimRetentionPolicy") or {}
    return policy.get("whenDeleted") or RETAIN, policy.get("whenScaled") or RETAIN


def claims_for(sts: Obj, ordinal: int) -> dict[str, Obj]:
    """getPersistentVolumeClaims: template name -> the claim the pod at `ordinal` uses."""
    spec = sts.get("spec") or {}
    match_labels = (spec.get("selector") or {}).get("matchLabels") or {}
    out: dict[str, Obj] = {}
    for template in spec.get("volumeClaimTemplates") or []:
        tmeta = template.get("metadata") or {}
        name = tmeta.get("name", "")
        meta: Obj = {
            "name": claim_name(sts, name, ordinal),
            "namespace": sts["metadata"]["namespace"],
            "labels": {**(tmeta.get("labels") or {}), **match_labels},
        }
        if tmeta.get("annotations"):
            meta["annotations"] = dict(tmeta["annotations"])
        out[name] = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": meta,
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
    return out


def with_storage(sts: Obj, pod: Obj, ordinal: int) -> None:
    """updateStorage: a volume per claim template (replacing a template volume of the same name)."""
    claims = claims_for(sts, ordinal)
    spec = pod.setdefault("spec", {})
    volumes = [
        {"name": name, "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}
        for name, claim in claims.items()
    ]
    volumes += [v for v in spec.get("volumes") or [] if v.get("name") not in claims]
    if volumes:
        spec["volumes"] = volumes


def identity_labels(sts: Obj, ordinal: int) -> dict[str, str]:
    return {POD_NAME_LABEL: pod_name(sts, ordinal), POD_INDEX_LABEL: str(ordinal)}


def new_pod(sts: Obj, ordinal: int, revision: str) -> Obj:
    """newStatefulSetPod + setPodRevision: the pod at `ordinal` from this (versioned) set's template."""
    pod = pod_from_template((sts.get("spec") or {}).get("template") or {}, sts)
    meta = pod["metadata"]
    meta["name"] = pod_name(sts, ordinal)
    meta.setdefault("labels", {}).update(identity_labels(sts, ordinal))
    meta["labels"][REVISION_LABEL] = revision
    pod["spec"]["hostname"] = meta["name"]
    service = (sts.get("spec") or {}).get("serviceName")
    if service:
        pod["spec"]["subdomain"] = service
    with_storage(sts, pod, ordinal)
    return pod


def identity_matches(sts: Obj, pod: Obj) -> bool:
    meta = pod.get("metadata") or {}
    parent, ordinal = parent_and_ordinal(meta.get("name", ""))
    return (
        ordinal >= 0
        and parent == sts["metadata"]["name"]
        and meta.get("namespace") == sts["metadata"]["namespace"]
        and (meta.get("labels") or {}).get(POD_NAME_LABEL) == meta.get("name")
    )


def revision_of(pod: Obj) -> str:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL, "")


# --- claim ownership (the retention policy) ------------------------------------------------------------


def _matches_ref(ref: Obj, api_version: str, kind: str, name: str) -> bool:
    return ref.get("apiVersion") == api_version and ref.get("kind") == kind and ref.get("name") == name


def _refs(obj: Obj) -> list[Obj]:
    return list((obj.get("metadata") or {}).get("ownerReferences") or [])


def _has_ref(claim: Obj, owner: Obj) -> bool:
    uid = (owner.get("metadata") or {}).get("uid")
    return any(r.get("uid") == uid for r in _refs(claim))


def _stale_ref(claim: Obj, owner: Obj, api_version: str, kind: str) -> bool:
    meta = owner.get("metadata") or {}
    for ref in _refs(claim):
        if _matches_ref(ref, api_version, kind, meta.get("name", "")):
            return ref.get("uid") != meta.get("uid")
    return False


def _unexpected_controller(claim: Obj, sts: Obj, pod: Obj) -> bool:
    """hasUnexpectedController: under a Delete policy, a controller other than this set or pod."""
    if retention(sts) == (RETAIN, RETAIN):
        return False
    for ref in _refs(claim):
        for owner, api_version, kind in ((sts, SET_API, SET_KIND), (pod, "v1", "Pod")):
            if _matches_ref(ref, api_version, kind, owner["metadata"]["name"]):
                if ref.get("uid") != owner["metadata"].get("uid"):
                    return True
                break
        else:
            if ref.get("controller"):
                return True
    return False


def _wanted(sts: Obj, pod: Obj) -> tuple[bool, bool]:
    """(set owns it, pod owns it) under the retention policy."""
    when_deleted, when_scaled = retention(sts)
    scaled_down = not in_range(sts, ordinal_of(pod))
    if when_scaled == DELETE:
        return (not scaled_down and when_deleted == DELETE), scaled_down
    return when_deleted == DELETE, False


def claim_owner_up_to_date(claim: Obj, sts: Obj, pod: Obj) -> bool:
    """isClaimOwnerUpToDate: stale or foreign references are left alone; otherwise the owners must be
    exactly what the policy wants, each as controller."""
    if _stale_ref(claim, sts, SET_API, SET_KIND) or _stale_ref(claim, pod, "v1", "Pod"):
        return True
    if _unexpected_controller(claim, sts, pod):
        return not (_has_ref(claim, sts) or _has_ref(claim, pod))
    uids = {sts["metadata"].get("uid"), pod["metadata"].get("uid")}
    if any(r.get("uid") in uids and not r.get("controller") for r in _refs(claim)):
        return False
    return (_has_ref(claim, sts), _has_ref(claim, pod)) == _wanted(sts, pod)


def claim_owner_refs(claim: Obj, sts: Obj, pod: Obj) -> list[Obj]:
    """updateClaimOwnerRefForSetAndPod: the claim's ownerReferences as the policy wants them."""
    unexpected = _unexpected_controller(claim, sts, pod)
    refs = [
        r
        for r in _refs(claim)
        if not _matches_ref(r, SET_API, SET_KIND, sts["metadata"]["name"])
        and not _matches_ref(r, "v1", "Pod", pod["metadata"]["name"])
    ]
    if unexpected:
        return refs
    set_owns, pod_owns = _wanted(sts, pod)
    if set_owns:
        refs.append(owner_ref({**sts, "apiVersion": SET_API, "kind": SET_KIND}))
    if pod_owns:
        refs.append(owner_ref({**pod, "apiVersion": "v1", "kind": "Pod"}))
    return refs


def claim_is_stale(claim: Obj | None, sts: Obj, name: str) -> bool:
    """PodClaimIsStale for a pod not yet created (no UID yet): under whenScaled Delete, a claim still
    owned by an earlier pod of that name is on its way out, so the new pod waits for it to go."""
    if claim is None or retention(sts)[1] == RETAIN:
        return False
    return any(_matches_ref(r, "v1", "Pod", name) for r in _refs(claim))
