"""The bundled host-path CSI driver (pykubelet.csidriver) beside the first node, as a cluster runs a CSI
driver: the driver's node plugin registered through the agent's plugins_registry (node topology under
TOPOLOGY_KEY, online expansion, a storage pool of CAPACITY), and its controller sidecars
(csi-provisioner with its storage capacity tracking, csi-attacher, csi-resizer) in a controller manager
beside it on the driver's socket. Each sidecar writes on its own account, as upstream runs each in
its own pod: the manager signs each one's credentials with the cluster CA
(--use-service-account-credentials) for kube-system/csi-provisioner (csi-capacity too), csi-attacher and
csi-resizer, and each account holds what its kubernetes-csi repo's rbac.yaml grants (its ServiceAccount,
ClusterRole and namespace Role, applied here before the manager starts). The manager's own identity,
system:csi-sidecars, only reads what its shared informers list and watch. Its CSIDriver object (no attach, pod info on mount, persistent and ephemeral
volumes, fsGroupPolicy File, storage capacity tracking, so the scheduler places a claim only where the
pool has room) and the StorageClass
`csi-hostpath` (WaitForFirstConsumer, so a volume is made on the node its pod got; expandable) are
applied. The class is the default only when no other class is: `local-path` is the default a stack
starts with (k3s's provisioner, the class claims without one have always got), so claims keep it and
`csi-hostpath` is asked for by name."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pykubelet.csidriver.driver import registration_socket
from pykubelet.rig.process import Daemon

DRIVER = "hostpath.csi.pykubelet.io"
CLASS = "csi-hostpath"
TOPOLOGY_KEY = "topology.hostpath.csi.pykubelet.io/node"
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
SIDECARS = "csi-provisioner,csi-capacity,csi-attacher,csi-resizer"
CAPACITY = "100Gi"  # the driver's pool: what the CSIStorageCapacity objects offer before any volume
NAMESPACE = "kube-system"  # the sidecars' (and their CSIStorageCapacity objects')
PROVISIONER_ACCOUNT = "csi-provisioner"  # the account the manager gives csi-provisioner and csi-capacity
MANAGER_USER = (
    "system:csi-sidecars"  # the sidecars' manager's own identity: what its shared informers read as
)
RBAC = "rbac.authorization.k8s.io"


def csidriver_object() -> dict:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": DRIVER},
        "spec": {
            "attachRequired": False,
            "podInfoOnMount": True,
            "volumeLifecycleModes": ["Persistent", "Ephemeral"],
            "fsGroupPolicy": "File",
            "storageCapacity": True,
        },
    }


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


def sidecar_rbac(sidecar: str, runner: list[dict], cfg: list[dict], namespace: str = NAMESPACE) -> list[dict]:
    """What a kubernetes-csi sidecar's deploy/kubernetes/rbac.yaml ships, under its names (its
    ServiceAccount csi-<sidecar>, ClusterRole external-<sidecar>-runner bound by csi-<sidecar>-role, Role external-<sidecar>-cfg in the
    sidecars' namespace bound by csi-<sidecar>-role-cfg), bound to the account csi-<sidecar> the sidecars'
    manager runs it as."""
    subject = [{"kind": "ServiceAccount", "name": f"csi-{sidecar}", "namespace": namespace}]
    version = f"{RBAC}/v1"
    cluster_role, role = f"external-{sidecar}-runner", f"external-{sidecar}-cfg"
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": f"csi-{sidecar}", "namespace": namespace},
        },
        {"apiVersion": version, "kind": "ClusterRole", "metadata": {"name": cluster_role}, "rules": runner},
        {
            "apiVersion": version,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"csi-{sidecar}-role"},
            "subjects": subject,
            "roleRef": {"kind": "ClusterRole", "name": cluster_role, "apiGroup": RBAC},
        },
        {
            "apiVersion": version,
            "kind": "Role",
            "metadata": {"name": role, "namespace": namespace},
            "rules": cfg,
        },
        {
            "apiVersion": version,
            "kind": "RoleBinding",
            "metadata": {"name": f"csi-{sidecar}-role-cfg", "namespace": namespace},
            "subjects": subject,
            "roleRef": {"kind": "Role", "name": role, "apiGroup": RBAC},
        },
    ]


_LEASES = _rule(["coordination.k8s.io"], ["leases"], ["get", "watch", "list", "delete", "update", "create"])


def provisioner_rbac(namespace: str = NAMESPACE) -> list[dict]:
    """external-provisioner's rules (csi-provisioner and csi-capacity run on its account)."""
    runner = [
        _rule([""], ["persistentvolumes"], ["get", "list", "watch", "create", "patch", "delete"]),
        _rule([""], ["persistentvolumeclaims"], ["get", "list", "watch", "update"]),
        _rule(["storage.k8s.io"], ["storageclasses"], ["get", "list", "watch"]),
        _rule([""], ["events"], ["list", "watch", "create", "update", "patch"]),
        _rule(["snapshot.storage.k8s.io"], ["volumesnapshots"], ["get", "list"]),
        _rule(["snapshot.storage.k8s.io"], ["volumesnapshotcontents"], ["get", "list"]),
        _rule(["storage.k8s.io"], ["csinodes"], ["get", "list", "watch"]),
        _rule([""], ["nodes"], ["get", "list", "watch"]),
        _rule(["storage.k8s.io"], ["volumeattachments"], ["get", "list", "watch"]),
    ]
    cfg = [
        _LEASES,
        _rule(
            ["storage.k8s.io"],
            ["csistoragecapacities"],
            ["get", "list", "watch", "create", "update", "patch", "delete"],
        ),
        _rule([""], ["pods"], ["get"]),
        _rule(["apps"], ["replicasets"], ["get"]),
    ]
    return sidecar_rbac("provisioner", runner, cfg, namespace)


def attacher_rbac(namespace: str = NAMESPACE) -> list[dict]:
    """external-attacher's rules: it writes VolumeAttachments (their status through the subresource, as
    the attacher has since 3.0) and the finalizers of PersistentVolumes; it records no events."""
    runner = [
        _rule([""], ["persistentvolumes"], ["get", "list", "watch", "update", "patch"]),
        _rule(["storage.k8s.io"], ["csinodes"], ["get", "list", "watch"]),
        _rule(["storage.k8s.io"], ["volumeattachments"], ["get", "list", "watch", "update", "patch"]),
        _rule(["storage.k8s.io"], ["volumeattachments/status"], ["patch"]),
    ]
    return sidecar_rbac("attacher", runner, [_LEASES], namespace)


def resizer_rbac(namespace: str = NAMESPACE) -> list[dict]:
    """external-resizer's rules: the volume's capacity, the claim's status, its events."""
    runner = [
        _rule([""], ["persistentvolumes"], ["get", "list", "watch", "patch"]),
        _rule([""], ["persistentvolumeclaims"], ["get", "list", "watch"]),
        _rule([""], ["persistentvolumeclaims/status"], ["patch"]),
        _rule([""], ["events"], ["list", "watch", "create", "update", "patch"]),
    ]
    return sidecar_rbac("resizer", runner, [_LEASES], namespace)


def manager_rbac(namespace: str = NAMESPACE) -> list[dict]:
    """The sidecars' manager's own rights (MANAGER_USER, its client certificate from the cluster CA): read
    of what the sidecars' shared informers list and watch, and get of the sidecars' ServiceAccounts (the
    rig applies them, so the manager finds them and creates none). It writes nothing itself: each sidecar
    writes on its account."""
    subject = [{"kind": "User", "name": MANAGER_USER, "apiGroup": RBAC}]
    read = ["get", "list", "watch"]
    cluster_rules = [
        _rule([""], ["persistentvolumes", "persistentvolumeclaims", "nodes"], read),
        _rule(["storage.k8s.io"], ["storageclasses", "csinodes", "csidrivers", "volumeattachments"], read),
    ]
    rules = [
        _rule([""], ["serviceaccounts"], ["get"]),
        _rule(["storage.k8s.io"], ["csistoragecapacities"], read),  # csi-capacity's, in its namespace
    ]
    version = f"{RBAC}/v1"
    ref = {"apiGroup": RBAC, "name": MANAGER_USER}
    return [
        {
            "apiVersion": version,
            "kind": "ClusterRole",
            "metadata": {"name": MANAGER_USER},
            "rules": cluster_rules,
        },
        {
            "apiVersion": version,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": MANAGER_USER},
            "subjects": subject,
            "roleRef": {"kind": "ClusterRole", **ref},
        },
        {
            "apiVersion": version,
            "kind": "Role",
            "metadata": {"name": MANAGER_USER, "namespace": namespace},
            "rules": rules,
        },
        {
            "apiVersion": version,
            "kind": "RoleBinding",
            "metadata": {"name": MANAGER_USER, "namespace": namespace},
            "subjects": subject,
            "roleRef": {"kind": "Role", **ref},
        },
    ]


def sidecars_rbac(namespace: str = NAMESPACE) -> list[dict]:
    """What the rig applies before the sidecars start: each sidecar's own, bound to its account, and the
    manager's."""
    return (
        provisioner_rbac(namespace)
        + attacher_rbac(namespace)
        + resizer_rbac(namespace)
        + manager_rbac(namespace)
    )


def sidecars_argv(
    kubeconfig: Path, controllers: str, endpoint: str, signing: tuple[Path, Path], *extra: str
) -> list[str]:
    """A controller manager running CSI sidecars beside a driver's socket, each sidecar writing as its own
    account (kube-system/csi-provisioner, csi-attacher, csi-resizer: --use-service-account-credentials,
    its credentials signed with the cluster CA `signing` (certificate, key))."""
    return [
        sys.executable,
        "-m",
        "pykubelet",
        "controller-manager",
        "--kubeconfig",
        str(kubeconfig),
        "--controllers",
        controllers,
        "--csi-address",
        endpoint,
        "--use-service-account-credentials",
        "--cluster-signing-cert-file",
        str(signing[0]),
        "--cluster-signing-key-file",
        str(signing[1]),
        "--leader-elect=false",
        "--secure-port",
        "0",
        *extra,
    ]


def storage_class(default: bool) -> dict:
    meta: dict = {"name": CLASS}
    if default:
        meta["annotations"] = {DEFAULT_CLASS: "true"}
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": meta,
        "provisioner": DRIVER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": True,
    }


def has_default(classes: list[dict]) -> bool:
    """Whether one of the classes is marked default (the GA or the beta annotation)."""
    keys = (DEFAULT_CLASS, "storageclass.beta.kubernetes.io/is-default-class")
    return any(
        ((c.get("metadata") or {}).get("annotations") or {}).get(k) == "true" for c in classes for k in keys
    )


@dataclass
class HostPathCSI:
    """The driver's and its sidecars' daemons for one node (`state` is <state-dir>/csi-hostpath)."""

    state: Path
    node_name: str
    registration_dir: Path  # the agent's <root-dir>/plugins_registry
    kubeconfig: Path  # the manager's own (MANAGER_USER)
    signing: tuple[Path, Path]  # the cluster CA's certificate and key the sidecars' credentials are signed by
    on_spawn: Callable[[int], None] | None = None
    driver: Daemon | None = field(default=None, init=False)
    sidecars: Daemon | None = field(default=None, init=False)

    @property
    def endpoint(self) -> str:
        return str(self.state / "csi.sock")

    @property
    def call_log(self) -> Path:
        """Every call the driver took, a JSON line each (secrets left out)."""
        return self.state / "calls.jsonl"

    @property
    def backing(self) -> Path:
        """Where the driver keeps its volumes' folders."""
        return self.state / "volumes-state" / "volumes"

    def driver_argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "pykubelet.csidriver",
            "--name",
            DRIVER,
            "--endpoint",
            self.endpoint,
            "--node-id",
            self.node_name,
            "--state-dir",
            str(self.state / "volumes-state"),
            "--registration-dir",
            str(self.registration_dir),
            "--topology-key",
            TOPOLOGY_KEY,
            "--call-log",
            str(self.call_log),
            "--capacity",
            CAPACITY,
        ]

    def sidecars_argv(self) -> list[str]:
        return sidecars_argv(
            self.kubeconfig, SIDECARS, self.endpoint, self.signing, "--capacity-namespace", NAMESPACE
        )

    def start_driver(self, timeout: float = 30.0) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        self.driver = Daemon(
            "csi-hostpath driver", self.driver_argv(), self.state / "driver.log", on_spawn=self.on_spawn
        )
        self.driver.start(self._driver_ready, timeout=timeout)

    def _driver_ready(self) -> bool:
        """Both of its sockets are there: the CSI endpoint and the registration socket."""
        return os.path.exists(self.endpoint) and os.path.exists(
            registration_socket(str(self.registration_dir), DRIVER)
        )

    def start(
        self, apply: Callable[[dict], dict], classes: Callable[[], list[dict]], timeout: float = 30.0
    ) -> None:
        """The driver (until its socket is there), the sidecars' RBAC, the sidecars, its CSIDriver and
        StorageClass."""
        self.start_driver(timeout)
        for obj in sidecars_rbac():
            apply(obj)
        self.sidecars = Daemon(
            "csi-hostpath sidecars", self.sidecars_argv(), self.state / "sidecars.log", on_spawn=self.on_spawn
        )
        self.sidecars.start(lambda: True, timeout=timeout)
        apply(csidriver_object())
        if not any((c.get("metadata") or {}).get("name") == CLASS for c in classes()):
            apply(storage_class(default=not has_default(classes())))

    def restart_driver(self) -> None:
        """Stop the driver (its sockets go) and start it again, as a driver pod's restart does."""
        if self.driver is not None:
            self.driver.stop()
        self.start_driver()

    def stop(self) -> None:
        for daemon in (self.sidecars, self.driver):
            if daemon is not None:
                daemon.stop()
