"""The struct-typed fields upstream always serializes: Go's encoding/json ignores `omitempty` on a field
of struct type that is not a pointer, so every object upstream answers carries them, empty or not
(`"status":{}` on a new Deployment, `"status":{"loadBalancer":{}}` on a Service, `"lastState":{}` in a
container status). Clients that read `obj.status.x` (the official Python client, client-go users reading
JSON into maps) rely on them. `typed.fill_required` adds them, empty, where they are missing, at every
depth where their struct occurs (each container, each endpoint), and then the required scalars inside
them (a Node's `nodeInfo` gets its ten strings, `daemonEndpoints.kubeletEndpoint` its `Port`).

Read from upstream 1.32's Go types (k8s.io/api <group>/<version>/types.go): a field is listed when its
type is a struct, not a pointer, slice or map, for the types of the groups this server serves (core,
apps, batch, networking, policy, storage, rbac, coordination, discovery, events, autoscaling,
certificates, admissionregistration, flowcontrol). Keys are the type names of `fields.json` (the Python
client's). Left out on purpose: metav1.Time and RawExtension values (Go writes them as `null`),
`omitempty`-less slices (written `null`), and the apiextensions and apiregistration kinds, whose
controllers read their status as written.
"""

from __future__ import annotations

VALUE_STRUCTS: dict[str, tuple[str, ...]] = {
    # core/v1: the kinds
    "V1Pod": ("spec", "status"),
    "V1Node": ("spec", "status"),
    "V1Service": ("spec", "status"),
    "V1Namespace": ("spec", "status"),
    "V1PersistentVolume": ("spec", "status"),
    "V1PersistentVolumeClaim": ("spec", "status"),
    "V1ReplicationController": ("spec", "status"),  # its spec.template is a pointer
    "V1ResourceQuota": ("spec", "status"),
    "V1LimitRange": ("spec",),
    "V1PodTemplate": ("template",),
    "V1Binding": ("target",),
    "CoreV1Event": ("involvedObject", "source"),
    # core/v1: inside them
    "V1PodTemplateSpec": ("metadata", "spec"),
    "V1Container": ("resources",),
    "V1EphemeralContainer": ("resources",),
    "V1ContainerStatus": ("state", "lastState"),
    "V1NodeStatus": ("daemonEndpoints", "nodeInfo"),
    "V1NodeDaemonEndpoints": ("kubeletEndpoint",),
    "V1ServiceStatus": ("loadBalancer",),
    "V1PersistentVolumeClaimSpec": ("resources",),
    "V1PersistentVolumeClaimTemplate": ("metadata", "spec"),
    "V1WeightedPodAffinityTerm": ("podAffinityTerm",),
    "V1PreferredSchedulingTerm": ("preference",),
    # apps/v1
    "V1Deployment": ("spec", "status"),
    "V1DeploymentSpec": ("template", "strategy"),
    "V1StatefulSet": ("spec", "status"),
    "V1StatefulSetSpec": ("template", "updateStrategy"),
    "V1DaemonSet": ("spec", "status"),
    "V1DaemonSetSpec": ("template", "updateStrategy"),
    "V1ReplicaSet": ("spec", "status"),
    "V1ReplicaSetSpec": ("template",),
    # batch/v1
    "V1Job": ("spec", "status"),
    "V1JobSpec": ("template",),
    "V1CronJob": ("spec", "status"),
    "V1CronJobSpec": ("jobTemplate",),
    "V1JobTemplateSpec": ("metadata", "spec"),
    # networking.k8s.io/v1
    "V1Ingress": ("spec", "status"),
    "V1IngressStatus": ("loadBalancer",),
    "V1HTTPIngressPath": ("backend",),
    "V1IngressServiceBackend": ("port",),
    "V1IngressClass": ("spec",),
    "V1NetworkPolicy": ("spec",),
    "V1NetworkPolicySpec": ("podSelector",),
    # policy/v1
    "V1PodDisruptionBudget": ("spec", "status"),
    # storage.k8s.io/v1
    "V1VolumeAttachment": ("spec", "status"),
    "V1VolumeAttachmentSpec": ("source",),
    "V1CSIDriver": ("spec",),
    "V1CSINode": ("spec",),
    # rbac.authorization.k8s.io/v1
    "V1RoleBinding": ("roleRef",),
    "V1ClusterRoleBinding": ("roleRef",),
    # coordination.k8s.io/v1
    "V1Lease": ("spec",),
    # discovery.k8s.io/v1
    "V1Endpoint": ("conditions",),
    # events.k8s.io/v1
    "EventsV1Event": ("regarding", "deprecatedSource"),
    # autoscaling/v1 and v2
    "V1HorizontalPodAutoscaler": ("spec", "status"),
    "V1HorizontalPodAutoscalerSpec": ("scaleTargetRef",),
    "V1Scale": ("spec", "status"),
    "V2HorizontalPodAutoscaler": ("spec", "status"),
    "V2HorizontalPodAutoscalerSpec": ("scaleTargetRef",),
    "V2ObjectMetricSource": ("describedObject", "target", "metric"),
    "V2PodsMetricSource": ("metric", "target"),
    "V2ResourceMetricSource": ("target",),
    "V2ContainerResourceMetricSource": ("target",),
    "V2ExternalMetricSource": ("metric", "target"),
    "V2ObjectMetricStatus": ("metric", "current", "describedObject"),
    "V2PodsMetricStatus": ("metric", "current"),
    "V2ResourceMetricStatus": ("current",),
    "V2ContainerResourceMetricStatus": ("current",),
    "V2ExternalMetricStatus": ("metric", "current"),
    # certificates.k8s.io/v1, admissionregistration.k8s.io/v1, flowcontrol.apiserver.k8s.io/v1
    "V1CertificateSigningRequest": ("spec", "status"),
    "V1ValidatingAdmissionPolicy": ("spec", "status"),
    "V1ValidatingAdmissionPolicyBinding": ("spec",),
    "V1FlowSchema": ("spec", "status"),
    "V1PriorityLevelConfiguration": ("spec", "status"),
}

# Scalars Go always writes (no omitempty) that `fields.json`'s required lists miss (the Python client's
# models leave them optional), with their zero values.
ZERO_SCALARS: dict[str, dict[str, int]] = {
    "V1PodDisruptionBudgetStatus": {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    },
}
