"""A further node of a multi-node stack on the same machine, joined the way `pykubelet join` joins a host:
a bootstrap token the administrator creates, kubeadm's discovery of the cluster CA pinned by its hash,
then the agent's TLS bootstrap (a CSR the approver approves and the signer signs) to a certificate for
system:node:<name>. Its pod CIDR comes from the control plane's node IPAM (spec.podCIDR).

Each node has its own dir `<state>/nodes/<name>` in a joined node's layout (pykubelet.rig.nodeplan: agent/,
containerd/ with its own root, state, socket and config, cni/, pod-logs/, stack.json), its own bridge
and kubelet port; the sweep (`pykubelet down`) finds it there like a joined node's root. What the nodes
share is the host: one routing table (each bridge carries its node's pod CIDR, so the kernel's route for
that CIDR points at that node's bridge and a pod on one node reaches a pod on another through the host),
one NAT table (pykubelet-cni's sets hold every node's CIDR, so pod-to-pod traffic is never
masqueraded) and one service proxy (the host's nftables are every node's), as on kind's nodes the
service rules are per host.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from pykubelet.rig.nodelabels import node_labels_flag
from pykubelet.rig.nodeplan import NodePlan, agent_argv, containerd_for, node_record, write_node_files
from pykubelet.rig.process import Daemon, free_port
from pykubelet.rig.record import NODES_DIR, RECORD_FILE

if TYPE_CHECKING:
    from pykubelet.rig.stack import Stack


def node_bridge(first_bridge: str, index: int) -> str:
    """Node `index`'s bridge, named after the first node's (Linux allows 15 characters)."""
    name = f"{first_bridge}-{index}"
    if len(name) > 15:
        raise ValueError(f"bridge name {name!r} is longer than 15 characters")
    return name


class StackNode:
    """Node `index` (2, 3, ...) of `stack`: its containerd and agent, started and stopped by this owner."""

    def __init__(self, stack: Stack, index: int) -> None:
        assert stack.images is not None
        self.stack = stack
        self.index = index
        name = f"{stack.node_name}-{index}"
        self.plan = NodePlan(
            root=stack.config.state_dir / NODES_DIR / name,
            node_name=name,
            pod_cidr="",  # the node IPAM's
            bridge=node_bridge(stack.config.bridge, index),
            port=free_port(),
            sandbox_image=stack.images.pause,
            registry_mirror=stack.registry.address,
            server_tls_bootstrap=False,
            healthz_port=free_port(),
            cluster_dns=stack.config.dns_ip,
            node_labels=node_labels_flag(stack.config.labels_of(index)),
        )
        self.containerd = containerd_for(self.plan)
        self.agent: Daemon | None = None
        self.pod_cidr = ""

    @property
    def name(self) -> str:
        return self.plan.node_name

    @property
    def root(self) -> Path:
        return self.plan.root

    def log_path(self) -> Path:
        """The log of the node's part started last (its agent's, else its containerd's)."""
        return self.agent.log_path if self.agent is not None else self.containerd.daemon.log_path

    def _record(self) -> None:
        pids = {
            k: p
            for k, p in (
                ("containerd", self.containerd.daemon.pid),
                ("agent", self.agent.pid if self.agent else None),
            )
            if p
        }
        node_record(replace(self.plan, pod_cidr=self.pod_cidr), self.containerd.endpoint, pids).save()

    def start(self, wait_ready: float = 120.0) -> StackNode:
        """Join: discovery with a fresh token, the node's files, containerd, the agent; until Ready."""
        from kubeclient import bootstraptoken as bt
        from pykubelet.discovery import discover

        assert self.stack.apiserver is not None
        token = self.stack.create_bootstrap_token()
        ca_hash = bt.ca_cert_hash(self.stack.apiserver.ca_cert.read_bytes())
        info = discover(self.stack.apiserver.url, token, [ca_hash])
        self.root.mkdir(parents=True, exist_ok=True)
        self._record()  # before anything runs: where the node's network and files will be
        write_node_files(self.plan, info, token)
        self.containerd.daemon.on_spawn = lambda _pid: self._record()
        self.containerd.start()
        self.agent = Daemon(
            "pykubelet agent",
            agent_argv(self.plan, self.containerd.endpoint),
            self.plan.agent_dir / "agent.log",
            on_spawn=lambda _pid: self._record(),
        )
        self.agent.start(lambda: self.stack.ready(self.name), timeout=wait_ready, interval=0.5)
        self.pod_cidr = self.stack.pod_cidr_of(self.name)
        self.plan = replace(self.plan, pod_cidr=self.pod_cidr)
        self._record()
        return self

    def _network_cidr(self) -> str:
        """The node's pod CIDR, from the API or, when it never got that far, the agent's conflist."""
        if self.pod_cidr:
            return self.pod_cidr
        for conflist in sorted((self.plan.cni_dir / "net.d").glob("*.conflist")):
            try:
                subnet = json.loads(conflist.read_text())["plugins"][0]["ipam"]["ranges"][0][0]["subnet"]
                return str(ipaddress.IPv4Network(subnet, strict=False))
            except (OSError, ValueError, KeyError, IndexError, TypeError):
                continue
        return ""

    def stop(self) -> list[str]:
        """The agent, then containerd with its sandboxes (CNI DEL for each), then the node's network."""
        from agent.cni.node import NodeNetwork

        problems = []
        if self.agent is not None:
            self.agent.stop()
        left = self.containerd.stop()
        if not left.empty():
            problems.append(f"containerd of node {self.name} left {left}")
        cidr = self._network_cidr()
        if cidr:
            NodeNetwork(
                conf_dir=self.plan.cni_dir / "net.d",
                bin_dir=self.plan.cni_dir / "bin",
                data_dir=self.plan.cni_dir / "ipam",
                pod_cidr=cidr,
                bridge=self.plan.bridge,
                socket_path=str(self.plan.agent_dir / "cni.sock"),
            ).remove()
        (self.root / RECORD_FILE).unlink(missing_ok=True)
        return problems
