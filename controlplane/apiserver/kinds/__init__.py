"""The served kinds: one module each, one entry each in BUILT_IN.

A kind module holds its strategy (names and verbs, defaults, validation, storage form, status rules,
table, field selectors, protobuf schema, list keys, etcd key path) and imports nothing of the REST layer
(README.md says what a kind may import and what kindparts.py attaches). The server serves the kinds
through a table of its own (kindtable.KindTable, built by kindparts.builtin_table), which adds custom
resources at run time. Adding a kind is a new module holding its `Kind` and an entry here (then `python
-m controlplane.apiserver.gen_fields` to add its types to the decoder's table). The order is
discovery's: the core group first, then the API groups in upstream's order; a namespace is emptied in
this order.
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
    csidriver,
    csinode,
    csistoragecapacity,
    daemonset,
    deployment,
    endpoints,
    endpointslice,
    event,
    eventsv1,
    flowschema,
    hpa,
    hpav1,
    ingress,
    ingressclass,
    job,
    lease,
    limitrange,
    namespace,
    networkpolicy,
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
    volumeattachment,
    webhookconfiguration,
)
from controlplane.apiserver.kinds.base import Kind

BUILT_IN: tuple[Kind, ...] = (
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
    ingressclass.KIND,
    ingress.KIND,
    networkpolicy.KIND,
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
    volumeattachment.KIND,
    csidriver.KIND,
    csinode.KIND,
    csistoragecapacity.KIND,
    flowschema.KIND,
    prioritylevelconfiguration.KIND,
    # Upstream's plugin order: MutatingAdmissionWebhook, ValidatingAdmissionPolicy, ValidatingAdmissionWebhook.
    webhookconfiguration.MUTATING,
    validatingadmissionpolicy.POLICY,
    validatingadmissionpolicy.BINDING,
    webhookconfiguration.VALIDATING,
    crd.KIND,
)
# The name tests and tools iterate: the built-in kinds (a server's own table adds custom resources).
KINDS = BUILT_IN


def groups() -> list[tuple[str, str]]:
    """The built-in API groups (not core) and their versions, in the order BUILT_IN first names them."""
    return list(dict.fromkeys((k.group, k.version) for k in BUILT_IN if k.group))


__all__ = ["BUILT_IN", "KINDS", "Kind", "groups"]
