"""The served kinds: one module each, one entry each in KINDS.

Everything the server does per kind (routes, discovery, OpenAPI, decoding, strategic merge, tables,
field selectors, admission, bootstrap objects, in-process controllers) is read from this list; adding
a kind is a new module holding its `Kind` and an entry here (then `python -m
controlplane.apiserver.gen_fields` to add its types to the decoder's table). The order is discovery's:
the core group first, then the API groups in upstream's order; a namespace is emptied in this order.
"""

from __future__ import annotations

from controlplane.apiserver.apiextensions import crd
from controlplane.apiserver.kinds import (
    accessreview,
    apiservice,
    binding,
    certificatesigningrequest,
    clusterrole,
    clusterrolebinding,
    configmap,
    controllerrevision,
    cronjob,
    daemonset,
    deployment,
    endpoints,
    endpointslice,
    event,
    eventsv1,
    flowschema,
    hpa,
    hpav1,
    job,
    lease,
    limitrange,
    namespace,
    node,
    persistentvolume,
    persistentvolumeclaim,
    pod,
    poddisruptionbudget,
    podtemplate,
    priorityclass,
    prioritylevelconfiguration,
    replicaset,
    replicationcontroller,
    resourcequota,
    role,
    rolebinding,
    rulesreview,
    runtimeclass,
    secret,
    selfsubjectreview,
    service,
    serviceaccount,
    statefulset,
    storageclass,
    tokenreview,
    validatingadmissionpolicy,
    webhookconfiguration,
)
from controlplane.apiserver.kinds.base import Kind

KINDS: list[Kind] = [
    namespace.KIND,
    node.KIND,
    pod.KIND,
    binding.KIND,
    podtemplate.KIND,
    replicationcontroller.KIND,
    event.KIND,
    configmap.KIND,
    secret.KIND,
    serviceaccount.KIND,
    service.KIND,
    endpoints.KIND,
    persistentvolume.KIND,
    persistentvolumeclaim.KIND,
    limitrange.KIND,
    resourcequota.KIND,
    apiservice.KIND,
    deployment.KIND,
    replicaset.KIND,
    controllerrevision.KIND,
    daemonset.KIND,
    statefulset.KIND,
    eventsv1.KIND,
    tokenreview.KIND,
    selfsubjectreview.KIND,
    *accessreview.KINDS[:2],
    rulesreview.KIND,
    accessreview.KINDS[2],
    hpa.KIND,
    hpav1.KIND,
    job.KIND,
    cronjob.KIND,
    poddisruptionbudget.KIND,
    clusterrolebinding.KIND,
    clusterrole.KIND,
    rolebinding.KIND,
    role.KIND,
    priorityclass.KIND,
    lease.KIND,
    runtimeclass.KIND,
    endpointslice.KIND,
    certificatesigningrequest.KIND,
    storageclass.KIND,
    flowschema.KIND,
    prioritylevelconfiguration.KIND,
    # Upstream's plugin order: MutatingAdmissionWebhook, ValidatingAdmissionPolicy, ValidatingAdmissionWebhook.
    webhookconfiguration.MUTATING,
    validatingadmissionpolicy.POLICY,
    validatingadmissionpolicy.BINDING,
    webhookconfiguration.VALIDATING,
    crd.KIND,
]

_BY_PATH = {(k.group, k.version, k.plural): k for k in KINDS}
_GENERATION = [0]


def add(kind: Kind) -> None:
    """Serve `kind` from now on, after the built-in kinds (custom resources: apiextensions/controller.py)."""
    key = (kind.group, kind.version, kind.plural)
    old = _BY_PATH.get(key)
    if old is not None:
        KINDS.remove(old)
    KINDS.append(kind)
    _BY_PATH[key] = kind
    _GENERATION[0] += 1


def remove(kind: Kind) -> None:
    """Stop serving `kind` (a kind `add` added)."""
    if kind in KINDS:
        KINDS.remove(kind)
    key = (kind.group, kind.version, kind.plural)
    if _BY_PATH.get(key) is kind:
        del _BY_PATH[key]
    _GENERATION[0] += 1


def generation() -> int:
    """Grows with every `add` and `remove`: what caches derived from the kinds list (OpenAPI) compare."""
    return _GENERATION[0]


def by_path(group: str, version: str, plural: str) -> Kind | None:
    return _BY_PATH.get((group, version, plural))


def by_group_version(group: str, version: str) -> list[Kind]:
    return [k for k in KINDS if k.group == group and k.version == version]


def groups() -> list[tuple[str, str]]:
    """The API groups (not core) and their one version, in the order KINDS first names them."""
    return list(dict.fromkeys((k.group, k.version) for k in KINDS if k.group))


def by_kind(api_version: str, kind: str) -> Kind | None:
    return next((k for k in KINDS if k.api_version == api_version and k.kind == kind), None)


def sweepable() -> list[Kind]:
    """One stored, deletable namespaced kind per storage bucket: what emptying a namespace deletes."""
    seen: set[str] = set()
    out = []
    for k in KINDS:
        if k.namespaced and k.stored and "delete" in k.verbs and k.bucket not in seen:
            seen.add(k.bucket)
            out.append(k)
    return out


__all__ = [
    "KINDS",
    "Kind",
    "add",
    "by_group_version",
    "by_kind",
    "by_path",
    "generation",
    "groups",
    "remove",
    "sweepable",
]
