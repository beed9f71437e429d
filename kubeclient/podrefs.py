"""The objects a pod names (upstream's podutil.VisitPodSecretNames and VisitPodConfigmapNames, and its
claims): the API server's Node authorizer lets a node read exactly these, and the node agent keeps its
copies of exactly these while a pod on it names them. One reading of the pod spec for both."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

# Volume sources naming a secret, and the field that does (podutil.VisitPodSecretNames).
_SECRET_REFS: dict[str, tuple[str, ...]] = {
    "azureFile": ("secretName",),
    "cephfs": ("secretRef", "name"),
    "cinder": ("secretRef", "name"),
    "flexVolume": ("secretRef", "name"),
    "rbd": ("secretRef", "name"),
    "scaleIO": ("secretRef", "name"),
    "iscsi": ("secretRef", "name"),
    "storageos": ("secretRef", "name"),
    "csi": ("nodePublishSecretRef", "name"),
}


@dataclass(frozen=True)
class PodObjectNames:
    """The names, in the pod's namespace, of the Secrets, ConfigMaps and claims a pod references."""

    secrets: frozenset[str]
    configmaps: frozenset[str]
    pvcs: frozenset[str]


def _containers(spec: Obj) -> Iterator[Obj]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            if isinstance(c, dict):
                yield c


def _get(obj: Any, *path: str) -> str:
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj if isinstance(obj, str) else ""


def pod_object_names(pod: Obj) -> PodObjectNames:
    """What the pod's spec names: image pull secrets, env and envFrom of every container (init and
    ephemeral ones too), secret, configMap and projected volumes, the secret references of the volume
    plugins that take one, claims (a generic ephemeral volume's claim is `<pod>-<volume>`)."""
    spec = pod.get("spec") or {}
    secrets = {_get(s, "name") for s in spec.get("imagePullSecrets") or []}
    configmaps: set[str] = set()
    for c in _containers(spec):
        for env_from in c.get("envFrom") or []:
            secrets.add(_get(env_from, "secretRef", "name"))
            configmaps.add(_get(env_from, "configMapRef", "name"))
        for env in c.get("env") or []:
            secrets.add(_get(env, "valueFrom", "secretKeyRef", "name"))
            configmaps.add(_get(env, "valueFrom", "configMapKeyRef", "name"))
    pvcs: set[str] = set()
    pod_name = _get(pod, "metadata", "name")
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        secrets.add(_get(volume, "secret", "secretName"))
        configmaps.add(_get(volume, "configMap", "name"))
        pvcs.add(_get(volume, "persistentVolumeClaim", "claimName"))
        if isinstance(volume.get("ephemeral"), dict):
            pvcs.add(f"{pod_name}-{volume.get('name', '')}")
        for source in (volume.get("projected") or {}).get("sources") or []:
            secrets.add(_get(source, "secret", "name"))
            configmaps.add(_get(source, "configMap", "name"))
        for field, path in _SECRET_REFS.items():
            if isinstance(volume.get(field), dict):
                secrets.add(_get(volume[field], *path))
    return PodObjectNames(frozenset(secrets - {""}), frozenset(configmaps - {""}), frozenset(pvcs - {""}))
