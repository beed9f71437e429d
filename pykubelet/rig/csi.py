"""The bundled host-path CSI driver (pykubelet.csidriver) beside the first node, as a cluster runs a CSI
driver: the driver's node plugin registered through the agent's plugins_registry (node topology under
TOPOLOGY_KEY, online expansion, a storage pool of CAPACITY), and its controller sidecars
(csi-provisioner with its storage capacity tracking, csi-attacher, csi-resizer) in a controller manager
beside it on the driver's socket. The provisioner's RBAC (external-provisioner's ClusterRole and its
Role in kube-system for the CSIStorageCapacity objects) is bound to the account kube-system/csi-provisioner
the manager gives it. Its CSIDriver object (no attach, pod info on mount, persistent and ephemeral
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


def provisioner_rbac(namespace: str = NAMESPACE) -> list[dict]:
    """external-provisioner's deploy/kubernetes/rbac.yaml (its rules, role and binding names), bound to
    the account the sidecars' manager runs csi-provisioner and csi-capacity as."""
    subject = [{"kind": "ServiceAccount", "name": PROVISIONER_ACCOUNT, "namespace": namespace}]
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
        _rule(["coordination.k8s.io"], ["leases"], ["get", "watch", "list", "delete", "update", "create"]),
        _rule(
            ["storage.k8s.io"],
            ["csistoragecapacities"],
            ["get", "list", "watch", "create", "update", "patch", "delete"],
        ),
        _rule([""], ["pods"], ["get"]),
        _rule(["apps"], ["replicasets"], ["get"]),
    ]
    version = f"{RBAC}/v1"
    return [
        {
            "apiVersion": version,
            "kind": "ClusterRole",
            "metadata": {"name": "external-provisioner-runner"},
            "rules": runner,
        },
        {
            "apiVersion": version,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "csi-provisioner-role"},
            "subjects": subject,
            "roleRef": {"kind": "ClusterRole", "name": "external-provisioner-runner", "apiGroup": RBAC},
        },
        {
            "apiVersion": version,
            "kind": "Role",
            "metadata": {"name": "external-provisioner-cfg", "namespace": namespace},
            "rules": cfg,
        },
        {
            "apiVersion": version,
            "kind": "RoleBinding",
            "metadata": {"name": "csi-provisioner-role-cfg", "namespace": namespace},
            "subjects": subject,
            "roleRef": {"kind": "Role", "name": "external-provisioner-cfg", "apiGroup": RBAC},
        },
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
    kubeconfig: Path
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
        return [
            sys.executable,
            "-m",
            "pykubelet",
            "controller-manager",
            "--kubeconfig",
            str(self.kubeconfig),
            "--controllers",
            SIDECARS,
            "--csi-address",
            self.endpoint,
            "--capacity-namespace",
            NAMESPACE,
            "--leader-elect=false",
            "--secure-port",
            "0",
        ]

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
        """The driver (until its socket is there), its sidecars, then their RBAC, its CSIDriver and
        StorageClass."""
        self.start_driver(timeout)
        self.sidecars = Daemon(
            "csi-hostpath sidecars", self.sidecars_argv(), self.state / "sidecars.log", on_spawn=self.on_spawn
        )
        self.sidecars.start(lambda: True, timeout=timeout)
        for obj in provisioner_rbac():
            apply(obj)
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
