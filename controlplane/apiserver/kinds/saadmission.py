"""The ServiceAccount admission plugin (upstream's plugin/pkg/admission/serviceaccount, 1.32): every new
pod runs as an account that exists, and gets that account's API credentials as a projected volume.

On a pod's create: serviceAccountName defaults to `default`; the account must exist (the `default` one
is waited for briefly, since the controller manager makes it just after the namespace, as upstream
retries it ten times); unless automountServiceAccountToken says no (the pod's word wins over the
account's), a `kube-api-access-<5 chars>` projected volume (a 3607 s bound token at `token`, the
kube-root-ca.crt ConfigMap's `ca.crt`, the namespace from the downward API; defaultMode 0644) is added
and mounted read-only at /var/run/secrets/kubernetes.io/serviceaccount in every init and app container
that has nothing mounted there; the account's imagePullSecrets are copied when the pod names none.
Ephemeral containers are added by an update, which this plugin leaves alone, as upstream. An account
annotated `kubernetes.io/enforce-mountable-secrets: "true"` limits the secrets the pod may use to the
ones it lists. Mirror pods may name no account, secret or token projection.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

from controlplane.apiserver import errors
from controlplane.apiserver.kinds.pod import KIND as POD
from controlplane.apiserver.meta import random_suffix
from controlplane.apiserver.satokens import WARN_ONLY_EXPIRATION

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import AdmissionRequest, Registry

Obj = dict[str, Any]

DEFAULT_ACCOUNT = "default"
VOLUME_PREFIX = "kube-api-access-"
MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
ENFORCE_MOUNTABLE = "kubernetes.io/enforce-mountable-secrets"
MIRROR = "kubernetes.io/config.mirror"
ROOT_CA = "kube-root-ca.crt"
DEFAULT_ACCOUNT_ATTEMPTS = 10  # upstream looks the default account up ten times, 100-200 ms apart


def token_volume(name: str) -> Obj:
    """Upstream's TokenVolumeSource, defaultMode set explicitly as upstream does (#104464)."""
    return {
        "name": name,
        "projected": {
            "defaultMode": 0o644,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": WARN_ONLY_EXPIRATION, "path": "token"}},
                {"configMap": {"name": ROOT_CA, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
        },
    }


def should_automount(account: Obj, spec: Obj) -> bool:
    if spec.get("automountServiceAccountToken") is not None:
        return bool(spec["automountServiceAccountToken"])
    if account.get("automountServiceAccountToken") is not None:
        return bool(account["automountServiceAccountToken"])
    return True


def mount_token(spec: Obj) -> None:
    volumes = spec.get("volumes") or []
    existing = next(
        (v.get("name") for v in volumes if str(v.get("name", "")).startswith(VOLUME_PREFIX)), None
    )
    name = existing or VOLUME_PREFIX + random_suffix()
    needed = False
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or []:
            mounts = container.get("volumeMounts") or []
            if any(m.get("mountPath") == MOUNT_PATH for m in mounts):
                continue  # something the pod chose is mounted there
            container["volumeMounts"] = [*mounts, {"name": name, "readOnly": True, "mountPath": MOUNT_PATH}]
            needed = True
    if existing is None and needed:
        spec["volumes"] = [*volumes, token_volume(name)]


def _account_key(namespace: str, name: str) -> str:
    from controlplane.apiserver.kinds.serviceaccount import KIND as ACCOUNTS

    return ACCOUNTS.key(namespace, name)


def _cached_account(registry: Registry, namespace: str, name: str) -> Obj | None:
    cached = registry.cache.get(_account_key(namespace, name))
    return cached.obj if cached is not None else None


async def _account(registry: Registry, namespace: str, name: str) -> Obj | None:
    """The account, waiting a little for `default`, which the controller manager is about to make."""
    attempts = DEFAULT_ACCOUNT_ATTEMPTS if name == DEFAULT_ACCOUNT else 1
    interval = random.uniform(0.1, 0.2)
    for attempt in range(attempts):
        if attempt:
            await asyncio.sleep(interval)
        account = _cached_account(registry, namespace, name)
        if account is not None:
            return account
    return None


def _forbidden(request: AdmissionRequest, why: str) -> errors.ApiError:
    meta = request.obj.get("metadata") or {}
    name = request.name or meta.get("generateName") or "Unknown"
    return errors.forbidden_request(f'pods "{name}" is forbidden: {why}', "pods", "", name)


def _not_found(request: AdmissionRequest, account: str) -> errors.ApiError:
    return _forbidden(
        request,
        f'error looking up service account {request.namespace}/{account}: serviceaccount "{account}" not found',
    )


def _enforces(account: Obj) -> bool:
    value = ((account.get("metadata") or {}).get("annotations") or {}).get(ENFORCE_MOUNTABLE, "")
    return value.lower() in ("1", "t", "true")


def secret_reference_problem(account: Obj, spec: Obj) -> str | None:
    """Upstream's limitSecretReferences: the first secret the pod uses that the account does not list."""
    name = (account.get("metadata") or {}).get("name", "")
    mountable = {s.get("name") for s in account.get("secrets") or []}
    for volume in spec.get("volumes") or []:
        secret = (volume.get("secret") or {}).get("secretName") if volume.get("secret") is not None else None
        if secret is not None and secret not in mountable:
            return f'volume with secret.secretName="{secret}" is not allowed because service account {name} does not reference that secret'
    for group, noun in (("initContainers", "init container"), ("containers", "container")):
        for c in spec.get(group) or []:
            for env in c.get("env") or []:
                ref = ((env.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name")
                if ref is not None and ref not in mountable:
                    return (
                        f'{noun} {c.get("name")} with envVar {env.get("name")} referencing secret.secretName="{ref}" '
                        f"is not allowed because service account {name} does not reference that secret"
                    )
            for source in c.get("envFrom") or []:
                ref = (source.get("secretRef") or {}).get("name")
                if ref is not None and ref not in mountable:
                    return (
                        f'{noun} {c.get("name")} with envFrom referencing secret.secretName="{ref}" is not allowed '
                        f"because service account {name} does not reference that secret"
                    )
    pulls = {s.get("name") for s in account.get("imagePullSecrets") or []}
    for i, ref in enumerate(spec.get("imagePullSecrets") or []):
        if ref.get("name") not in pulls:
            return (
                f'imagePullSecrets[{i}].name="{ref.get("name")}" is not allowed because service account {name} '
                "does not reference that imagePullSecret"
            )
    return None


def _mirror_problem(spec: Obj) -> str | None:
    if spec.get("serviceAccountName"):
        return "a mirror pod may not reference service accounts"
    uses_secrets = any(v.get("secret") is not None for v in spec.get("volumes") or []) or bool(
        spec.get("imagePullSecrets")
    )
    for group in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(group) or []:
            uses_secrets |= any(((e.get("valueFrom") or {}).get("secretKeyRef")) for e in c.get("env") or [])
            uses_secrets |= any(s.get("secretRef") for s in c.get("envFrom") or [])
    for v in spec.get("volumes") or []:
        for source in (v.get("projected") or {}).get("sources") or []:
            uses_secrets |= source.get("secret") is not None
            if source.get("serviceAccountToken") is not None:
                return "a mirror pod may not use ServiceAccountToken volume projections"
    return "a mirror pod may not reference secrets" if uses_secrets else None


def _is_pod_create(request: AdmissionRequest) -> bool:
    return request.kind is POD and not request.subresource and request.operation == "CREATE"


def _mirror(request: AdmissionRequest) -> bool:
    return MIRROR in ((request.obj.get("metadata") or {}).get("annotations") or {})


class ServiceAccountAdmission:
    name = "ServiceAccount"

    async def admit(self, request: AdmissionRequest) -> None:
        if not _is_pod_create(request) or _mirror(request):
            return
        spec = request.obj.setdefault("spec", {})
        if not spec.get("serviceAccountName"):
            spec["serviceAccountName"] = DEFAULT_ACCOUNT
        spec["serviceAccount"] = spec[
            "serviceAccountName"
        ]  # the deprecated alias follows, as upstream's conversion
        account = await _account(request.registry, request.namespace, spec["serviceAccountName"])
        if account is None:
            raise _not_found(request, spec["serviceAccountName"])
        if should_automount(account, spec):
            mount_token(spec)
        if not spec.get("imagePullSecrets") and account.get("imagePullSecrets"):
            spec["imagePullSecrets"] = [{"name": s.get("name")} for s in account["imagePullSecrets"]]

    def validate(self, request: AdmissionRequest) -> None:
        if not _is_pod_create(request):
            return
        spec = request.obj.get("spec") or {}
        if _mirror(request):
            problem = _mirror_problem(spec)
            if problem:
                raise _forbidden(request, problem)
            return
        name = spec.get("serviceAccountName")
        if not name:
            raise _forbidden(
                request, f"no service account specified for pod {request.namespace}/{request.name}"
            )
        account = _cached_account(request.registry, request.namespace, name)
        if account is None:
            raise _not_found(request, name)
        if _enforces(account):
            problem = secret_reference_problem(account, spec)
            if problem:
                raise _forbidden(request, problem)


__all__ = ["MOUNT_PATH", "ServiceAccountAdmission", "mount_token", "should_automount", "token_volume"]
