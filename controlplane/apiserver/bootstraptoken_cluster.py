"""What kubeadm creates at `init` so that nodes can join with a bootstrap token, kept by the server when
`--enable-bootstrap-token-auth` is on (our stack plays kubeadm's part):

- `kube-public/cluster-info`: a kubeconfig holding the cluster's address and CA and nothing secret; the
  controller manager's bootstrapsigner adds a `jws-kubeconfig-<id>` signature per signing token, which a
  joining node checks with its token before trusting the CA (kubeadm's token discovery);
- the Role and RoleBinding `kubeadm:bootstrap-signer-clusterinfo` letting `system:anonymous` read it;
- kubeadm's ClusterRoleBindings for its default token group: `kubeadm:kubelet-bootstrap` (create CSRs,
  system:node-bootstrapper), `kubeadm:node-autoapprove-bootstrap` (their node client CSRs approved), and
  `kubeadm:node-autoapprove-certificate-rotation` (nodes' own renewals approved), and
  `kubeadm:get-nodes`.

The ConfigMap's kubeconfig is rewritten when the address or the CA changed (its signatures are then
redone by the signer); the RBAC objects are created when missing and otherwise left as they are.
"""

from __future__ import annotations

import base64
from typing import Any

import yaml

from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.registry import Registry
from kubeclient import bootstraptoken as bt

Obj = dict[str, Any]

RBAC = "rbac.authorization.k8s.io"
CLUSTER_INFO_ROLE = "kubeadm:bootstrap-signer-clusterinfo"
GET_NODES = "kubeadm:get-nodes"


def cluster_info_kubeconfig(server: str, ca_pem: bytes) -> str:
    """The kubeconfig kubeadm writes into cluster-info (clientcmd's layout of an anonymous config)."""
    config = {
        "apiVersion": "v1",
        "clusters": [
            {
                "cluster": {
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                    "server": server,
                },
                "name": "",
            }
        ],
        "contexts": None,
        "current-context": "",
        "kind": "Config",
        "preferences": {},
        "users": None,
    }
    return yaml.safe_dump(config, default_flow_style=False, sort_keys=True)


def _subject(kind: str, name: str) -> Obj:
    return {"kind": kind, "apiGroup": RBAC, "name": name}


def _binding(kind: str, name: str, role_kind: str, role: str, subject: Obj, namespace: str = "") -> Obj:
    meta: Obj = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role},
        "subjects": [subject],
    }


def join_rbac() -> list[tuple[str, str, Obj]]:
    """(plural, namespace, object) of kubeadm's join RBAC, roles before their bindings."""
    public = bt.CLUSTER_INFO_NAMESPACE
    group = _subject("Group", bt.KUBEADM_DEFAULT_GROUP)
    return [
        (
            "roles",
            public,
            {
                "apiVersion": f"{RBAC}/v1",
                "kind": "Role",
                "metadata": {"name": CLUSTER_INFO_ROLE, "namespace": public},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["configmaps"],
                        "resourceNames": [bt.CLUSTER_INFO],
                        "verbs": ["get"],
                    }
                ],
            },
        ),
        (
            "rolebindings",
            public,
            _binding(
                "RoleBinding",
                CLUSTER_INFO_ROLE,
                "Role",
                CLUSTER_INFO_ROLE,
                _subject("User", "system:anonymous"),
                public,
            ),
        ),
        (
            "clusterroles",
            "",
            {
                "apiVersion": f"{RBAC}/v1",
                "kind": "ClusterRole",
                "metadata": {"name": GET_NODES},
                "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],
            },
        ),
        (
            "clusterrolebindings",
            "",
            _binding("ClusterRoleBinding", GET_NODES, "ClusterRole", GET_NODES, group),
        ),
        (
            "clusterrolebindings",
            "",
            _binding(
                "ClusterRoleBinding",
                "kubeadm:kubelet-bootstrap",
                "ClusterRole",
                "system:node-bootstrapper",
                group,
            ),
        ),
        (
            "clusterrolebindings",
            "",
            _binding(
                "ClusterRoleBinding",
                "kubeadm:node-autoapprove-bootstrap",
                "ClusterRole",
                "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
                group,
            ),
        ),
        (
            "clusterrolebindings",
            "",
            _binding(
                "ClusterRoleBinding",
                "kubeadm:node-autoapprove-certificate-rotation",
                "ClusterRole",
                "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
                _subject("Group", "system:nodes"),
            ),
        ),
    ]


def _kind(registry: Registry, group: str, plural: str) -> Any:
    kind = registry.kinds.by_path(group, "v1", plural)
    if kind is None:  # pragma: no cover - the kinds are always served
        raise RuntimeError(f"{plural} is not served")
    return kind


async def ensure_join_objects(registry: Registry, server: str, ca_pem: bytes) -> None:
    configmaps = _kind(registry, "", "configmaps")
    kubeconfig = cluster_info_kubeconfig(server, ca_pem)
    ns, name = bt.CLUSTER_INFO_NAMESPACE, bt.CLUSTER_INFO
    if registry.cache.get(configmaps.key(ns, name)) is None:
        wanted = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns},
            "data": {bt.KUBECONFIG_KEY: kubeconfig},
        }
        try:
            await registry.create(configmaps, ns, wanted, manager="kubeadm")
        except ApiError as err:
            if err.code != 409:
                raise
    else:

        def point(cm: Obj) -> Obj:
            data = cm.setdefault("data", {})
            data[bt.KUBECONFIG_KEY] = kubeconfig
            return cm

        cached = registry.cache.get(configmaps.key(ns, name))
        current = ((cached.obj if cached is not None else {}).get("data") or {}).get(bt.KUBECONFIG_KEY)
        if current != kubeconfig:
            await registry.guaranteed_update(configmaps, ns, name, point, manager="kubeadm")
    for plural, namespace, obj in join_rbac():
        kind = _kind(registry, RBAC, plural)
        if registry.cache.get(kind.key(namespace, obj["metadata"]["name"])) is not None:
            continue
        try:
            await registry.create(kind, namespace, obj, manager="kubeadm")
        except ApiError as err:
            if err.code != 409:
                raise
