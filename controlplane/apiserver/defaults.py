"""Defaulting, as upstream's SetDefaults_* functions and defaulting admission plugins do it.

Applied on create and update before validation, so clients see exactly the object that is stored
(`kubectl get -o yaml` of a bare pod shows the upstream defaults).
"""

from __future__ import annotations

import base64
from typing import Any

Obj = dict[str, Any]

_PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
_DEFAULT_MODE_SOURCES = ("secret", "configMap", "downwardAPI", "projected")
_VOLUME_SOURCES = (
    "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs", "iscsi",
    "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI",
    "fc", "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk",
    "projected", "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral", "image",
)


def pull_policy_for(image: str) -> str:
    """Always for `:latest` or an untagged image, else IfNotPresent (digests count as pinned)."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "Always"
    return "Always" if last.rsplit(":", 1)[1] == "latest" else "IfNotPresent"


def _probe(probe: Obj | None) -> None:
    if not isinstance(probe, dict):
        return
    for key, value in _PROBE_DEFAULTS.items():
        probe.setdefault(key, value)
    http = probe.get("httpGet")
    if isinstance(http, dict):
        http.setdefault("path", "/")
        http.setdefault("scheme", "HTTP")
    grpc = probe.get("grpc")
    if isinstance(grpc, dict):
        grpc.setdefault("service", "")


def _container(c: Obj) -> None:
    if not isinstance(c, dict):
        return
    if isinstance(c.get("image"), str) and c["image"]:
        c.setdefault("imagePullPolicy", pull_policy_for(c["image"]))
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    resources = c.setdefault("resources", {})
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
        requests = resources.setdefault("requests", {})
        for name, quantity in resources["limits"].items():
            requests.setdefault(name, quantity)
    for port in c.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    for name in ("livenessProbe", "readinessProbe", "startupProbe"):
        _probe(c.get(name))
    for env in c.get("env") or []:
        ref = (env.get("valueFrom") or {}).get("fieldRef") if isinstance(env, dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")


def pod_spec(spec: Obj) -> None:
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for group in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(group) or []:
            _container(c)
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        if not any(source in volume for source in _VOLUME_SOURCES):
            volume["emptyDir"] = {}
        for source in _DEFAULT_MODE_SOURCES:
            if isinstance(volume.get(source), dict):
                volume[source].setdefault("defaultMode", 420)
        if isinstance(volume.get("hostPath"), dict):
            volume["hostPath"].setdefault("type", "")


def _qos(spec: Obj) -> str:
    containers = [c for g in ("initContainers", "containers") for c in spec.get(g) or [] if isinstance(c, dict)]
    requests_any = False
    guaranteed = bool(containers)
    for c in containers:
        resources = c.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = resources.get("requests") or {}
        if limits or requests:
            requests_any = True
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                guaranteed = False
    if not requests_any:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def pod(obj: Obj, creating: bool) -> None:
    spec = obj.setdefault("spec", {})
    pod_spec(spec)
    if creating:
        # These come from admission plugins upstream (ServiceAccount, Priority, DefaultTolerationSeconds).
        spec.setdefault("serviceAccountName", "default")
        spec["serviceAccount"] = spec["serviceAccountName"]
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        tolerations = spec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(isinstance(t, dict) and t.get("key") == key for t in tolerations):
                tolerations.append(
                    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                )
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", _qos(spec))


def _template(spec: Obj) -> None:
    template = spec.get("template")
    if isinstance(template, dict):
        pod_spec(template.setdefault("spec", {}))


def deployment(obj: Obj, creating: bool) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    _template(spec)


def replicaset(obj: Obj, creating: bool) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    _template(spec)


def service(obj: Obj, creating: bool) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])
    if creating:
        obj.setdefault("status", {}).setdefault("loadBalancer", {})


def secret(obj: Obj, creating: bool) -> None:
    obj.setdefault("type", "Opaque")
    # stringData is write-only: it is folded into data (base64) and never stored or returned.
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict):
        data = obj.setdefault("data", {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


def namespace(obj: Obj, creating: bool) -> None:
    meta = obj.setdefault("metadata", {})
    name = meta.get("name")
    if name:
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    if creating:
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {})["phase"] = "Active"


DEFAULTERS = {
    "Pod": pod,
    "Deployment": deployment,
    "ReplicaSet": replicaset,
    "Service": service,
    "Secret": secret,
    "Namespace": namespace,
}


def apply_defaults(kind: str, obj: Obj, creating: bool) -> None:
    defaulter = DEFAULTERS.get(kind)
    if defaulter is not None:
        defaulter(obj, creating)
