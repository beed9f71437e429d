"""A node's plan and the files and commands that follow from it, shared by `pykubelet join` (a host joining
a cluster) and the rig's further nodes of a multi-node stack (pykubelet.rig.nodes), which join the same way.

It sits below both: it imports neither the command nor the stack, so the rig never reaches up into a
command (the import contract in pyproject.toml keeps it so).

A node's root dir, laid out as `pykubelet reset` and `pykubelet down` (pykubelet.rig.sweep) expect it:
agent/ (bootstrap kubeconfig, the pinned CA, the kubelet config, the kubeconfig the TLS bootstrap writes),
containerd/, cni/, pod-logs/ and the record (stack.json).
"""

from __future__ import annotations

import base64
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from pykubelet.rig.nodelabels import node_labels_args
from pykubelet.rig.record import StackRecord

if TYPE_CHECKING:
    from pykubelet.discovery import ClusterInfo
    from pykubelet.rig.containerd import Containerd

DEFAULT_BRIDGE = "pykbr0"
# The cluster DNS Service's address, as kubeadm's default service range puts it.
KUBE_DNS_IP = "10.96.0.10"
BOOTSTRAP_USER = "tls-bootstrap-token-user"


def default_node_name() -> str:
    return socket.gethostname().split(".")[0].lower()


@dataclass(frozen=True)
class NodePlan:
    """Everything a joining node writes and starts, fixed before anything is written."""

    root: Path
    node_name: str
    pod_cidr: str
    bridge: str
    port: int
    sandbox_image: str
    registry_mirror: str
    server_tls_bootstrap: bool
    cri_socket: str = ""  # --cri-socket: the host's runtime (unix://...), or "" for join's own containerd
    healthz_port: int = 10248  # the rig gives each node of one host its own
    cluster_dns: str = KUBE_DNS_IP  # the cluster DNS Service's address
    node_labels: str = ""  # the agent's --node-labels (k=v,...), as kubeadm's kubeletExtraArgs carry it

    @property
    def agent_dir(self) -> Path:
        return self.root / "agent"

    @property
    def bootstrap_kubeconfig(self) -> Path:
        return self.agent_dir / "bootstrap-kubelet.conf"

    @property
    def kubeconfig(self) -> Path:
        return self.agent_dir / "kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.agent_dir / "pki" / "ca.crt"

    @property
    def config_file(self) -> Path:
        return self.agent_dir / "config.yaml"

    @property
    def cni_dir(self) -> Path:
        return self.root / "cni"


def write_file(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write-then-rename, so a re-run (or a reader) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".writing")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def bootstrap_kubeconfig(info: ClusterInfo, token: str) -> dict:
    """kubeadm's bootstrap-kubelet.conf: the discovered server and CA with the bootstrap token."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kubernetes",
                "cluster": {
                    "server": info.server,
                    "certificate-authority-data": base64.b64encode(info.ca_pem).decode(),
                },
            }
        ],
        "contexts": [{"name": "tls-bootstrap", "context": {"cluster": "kubernetes", "user": BOOTSTRAP_USER}}],
        "current-context": "tls-bootstrap",
        "users": [{"name": BOOTSTRAP_USER, "user": {"token": token}}],
    }


def kubelet_config(plan: NodePlan) -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        **({"podCIDR": plan.pod_cidr} if plan.pod_cidr else {}),
        "podLogsDir": str(plan.root / "pod-logs"),
        "clusterDomain": "cluster.local",
        "clusterDNS": [plan.cluster_dns],
        "resolvConf": "/etc/resolv.conf",
        "port": plan.port,
        "healthzPort": plan.healthz_port,
        "rotateCertificates": True,
        "serverTLSBootstrap": plan.server_tls_bootstrap,
        "authentication": {"x509": {"clientCAFile": str(plan.ca_file)}},
    }


def containerd_for(plan: NodePlan) -> Containerd:
    """The node's own containerd (root, state, socket and config under <root>/containerd)."""
    from pykubelet.rig.containerd import Containerd

    return Containerd(
        plan.root / "containerd",
        cni_bin_dir=plan.cni_dir / "bin",
        cni_conf_dir=plan.cni_dir / "net.d",
        sandbox_image=plan.sandbox_image,
        registry=plan.registry_mirror or None,
        mirror_docker_io=bool(plan.registry_mirror),
    )


def cri_endpoint(text: str) -> str:
    """kubeadm's --cri-socket spellings: a bare path means unix://PATH."""
    return text if "://" in text or not text else f"unix://{text}"


def agent_argv(plan: NodePlan, endpoint: str, python: str = sys.executable) -> list[str]:
    """The agent's command line: `python -m pykubelet agent ...` with `python` the environment pykubelet is
    installed in (this one's by default); with --cri-socket the runtime's own pod network, none of ours."""
    argv = [
        python,
        "-m",
        "pykubelet",
        "agent",
        "--kubeconfig",
        str(plan.kubeconfig),
        "--bootstrap-kubeconfig",
        str(plan.bootstrap_kubeconfig),
        "--node-name",
        plan.node_name,
        "--container-runtime-endpoint",
        endpoint,
        "--config",
        str(plan.config_file),
        "--root-dir",
        str(plan.agent_dir),
        *node_labels_args(plan.node_labels),
    ]
    if plan.cri_socket:
        return argv
    return [
        *argv,
        "--cni-conf-dir",
        str(plan.cni_dir / "net.d"),
        "--cni-bin-dir",
        str(plan.cni_dir / "bin"),
        "--cni-data-dir",
        str(plan.cni_dir / "ipam"),
        "--cni-bridge",
        plan.bridge,
    ]


def write_node_files(plan: NodePlan, info: ClusterInfo, token: str) -> None:
    """Everything but the daemons' own state; write-then-rename, so a re-run rewrites each file whole."""
    write_file(plan.ca_file, info.ca_pem)
    write_file(
        plan.bootstrap_kubeconfig,
        yaml.safe_dump(bootstrap_kubeconfig(info, token), sort_keys=False).encode(),
        0o600,
    )
    write_file(plan.config_file, yaml.safe_dump(kubelet_config(plan), sort_keys=False).encode())
    (plan.root / "pod-logs").mkdir(parents=True, exist_ok=True)


def node_record(plan: NodePlan, containerd_endpoint: str, pids: dict[str, int]) -> StackRecord:
    """The node's record: where its network, files and daemons are, for reset and down."""
    return StackRecord(
        state_dir=str(plan.root),
        node_name=plan.node_name,
        kubeconfig=str(plan.kubeconfig),
        pids=pids,
        registry=plan.registry_mirror,
        containerd_endpoint=containerd_endpoint,
        bridge=plan.bridge,
        pod_cidr=plan.pod_cidr,
    )
