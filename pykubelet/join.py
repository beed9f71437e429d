"""`pykubelet join https://HOST:PORT --token ID.SECRET --discovery-token-ca-cert-hash sha256:HEX`: make this
host a node of an existing cluster, as `kubeadm join` does for a kubelet.

Discovery comes first and writes nothing (pykubelet.discovery): a refused server, token or CA pin leaves
the host as it was. Then, under the root dir (default /var/lib/pykubelet), laid out as the rig lays out a
node so that `pykubelet reset` (pykubelet.rig.sweep) finds every part:

  agent/bootstrap-kubelet.conf   the discovered server and CA with the token (kubeadm's bootstrap-kubelet.conf)
  agent/pki/ca.crt               the pinned CA, also the kubelet API's client CA
  agent/config.yaml              the KubeletConfiguration (rotateCertificates on)
  agent/kubeconfig               written by the agent once its CSR is issued (TLS bootstrap)
  containerd/                    the node's own containerd (config, root, state, socket)
  cni/                           the pod network's plugin, conflist and IPAM state (the agent's)
  stack.json                     the node's record (bridge, pod CIDR, pids) for reset
  join.json                      what was asked (without the token)
  netpolicy/                     the network-policy agent's log (its table: inet pykubelet-netpol[-<bridge>])

The Debian packages come through pykubelet.rig.install. containerd and the agent then run as systemd
units where systemd is PID 1 (pykubelet-containerd.service, pykubelet-node.service; the agent from
pykubelet's own virtual environment, pykubelet.hostenv: /opt/pykubelet/venv on a host install), in the
foreground otherwise (`--foreground` forces it): this command then runs until SIGTERM/SIGINT and stops them.
With join's own pod network (no --cri-socket) the network-policy agent (`pykubelet netpolicy`) runs for
this node as `up` runs it for its nodes, on the node's own credentials (netpolicy.rbac binds its
ClusterRole to system:nodes), as pykubelet-netpolicy.service or a third child.
Running join again over a half-finished one stops what the earlier one left running and starts again;
the agent keeps its certificate if it already has one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from agent.nodelabels import NodeLabelError
from kubeclient.duration import format_go_duration
from kubeclient.flags import go_duration
from pykubelet.discovery import DEFAULT_TIMEOUT, DiscoveryError, discover
from pykubelet.hostenv import VenvError, check_venv, chosen_venv
from pykubelet.progress import Progress
from pykubelet.rig.nodelabels import checked_labels, node_labels_flag
from pykubelet.rig.nodeplan import (
    DEFAULT_BRIDGE,
    NodePlan,
    agent_argv,
    containerd_for,
    cri_endpoint,
    default_node_name,
    node_record,
    write_file,
    write_node_files,
)

if TYPE_CHECKING:
    from pykubelet.rig.process import Daemon

DEFAULT_ROOT = Path("/var/lib/pykubelet")
DEFAULT_SANDBOX_IMAGE = "registry.k8s.io/pause:3.10"
SYSTEMD_DIR = Path("/etc/systemd/system")
CONTAINERD_UNIT = "pykubelet-containerd.service"
AGENT_UNIT = "pykubelet-node.service"
NETPOLICY_UNIT = "pykubelet-netpolicy.service"
MARKER = "join.json"
INSTALL_LOG = "install.log"  # apt's output, when packages were missing


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("endpoint", metavar="https://HOST:PORT", help="the API server to join")
    parser.add_argument(
        "--token", required=True, help="a bootstrap token (ID.SECRET) for discovery and TLS bootstrap"
    )
    parser.add_argument(
        "--discovery-token-ca-cert-hash",
        dest="ca_hashes",
        action="append",
        default=[],
        metavar="sha256:HEX",
        help="the cluster CA's public key hash (pykubelet token create --print-join-command prints it)",
    )
    parser.add_argument("--node-name", default="", help="the Node's name (default: this host's name)")
    parser.add_argument("--root-dir", type=Path, default=DEFAULT_ROOT, help="where the node's files live")
    parser.add_argument(
        "--foreground", action="store_true", help="run containerd and the agent here, not as units"
    )
    parser.add_argument(
        "--pod-cidr",
        default="",
        help="the node's pod network, when the cluster allocates none (default: the spec.podCIDR the "
        "cluster's node IPAM gives the Node)",
    )
    parser.add_argument("--bridge", default=DEFAULT_BRIDGE, help="the pod network's bridge")
    parser.add_argument("--port", type=int, default=10250, help="the kubelet API's port")
    parser.add_argument("--sandbox-image", default=DEFAULT_SANDBOX_IMAGE, help="containerd's pause image")
    parser.add_argument(
        "--registry-mirror",
        default="",
        metavar="HOST:PORT",
        help="a plain-HTTP registry mirror for containerd",
    )
    parser.add_argument(
        "--server-tls-bootstrap", action="store_true", help="serverTLSBootstrap: true in the kubelet config"
    )
    parser.add_argument(
        "--discovery-timeout",
        type=go_duration,
        default=format_go_duration(DEFAULT_TIMEOUT),
        help="how long one discovery request may take",
    )
    parser.add_argument(
        "--cri-socket",
        default="",
        help="the CRI socket of a container runtime already running on this host (unix:///PATH or PATH): "
        "the agent uses it and join starts no containerd of its own; the pod network is then the "
        "runtime's CNI configuration, as with kubeadm (default: join runs its own containerd)",
    )
    parser.add_argument(
        "--node-labels",
        default="",
        metavar="KEY=VALUE,...",
        help="labels the node registers with (the agent's --node-labels, as kubeadm's kubeletExtraArgs "
        "carry them; of the kubernetes.io and k8s.io domains only those a kubelet may set)",
    )
    parser.add_argument("--systemd-dir", type=Path, default=SYSTEMD_DIR, help=argparse.SUPPRESS)


def systemd_running() -> bool:
    """sd_booted(): systemd is PID 1 when /run/systemd/system exists."""
    return Path("/run/systemd/system").is_dir()


def netpolicy_argv(plan: NodePlan, python: str = sys.executable) -> list[str]:
    """The network-policy agent of this node, on the credential the node agent's TLS bootstrap writes."""
    from pykubelet.rig.stack import netpolicy_table

    kubeconfig, table = str(plan.kubeconfig), netpolicy_table(plan.bridge)
    return [python, "-m", "pykubelet", "netpolicy", "--kubeconfig", kubeconfig, "--node-name", plan.node_name,
            "--nft-table", table]  # fmt: skip


def units(
    plan: NodePlan, containerd_argv: list[str] | None, agent: list[str], netpolicy: list[str] | None = None
) -> dict[str, str]:
    """The units, as the shipped systemd/ ones run containerd and the agent (KillMode=process: pods
    outlive a restarted agent or containerd); only the agent's with --cri-socket (containerd_argv None);
    the network-policy agent's when `netpolicy` is given (it restarts until the node's credential exists)."""
    import shlex

    if containerd_argv is None:
        return {
            AGENT_UNIT: (
                f"# The pykubelet node agent in {plan.root} (written by pykubelet join; pykubelet reset removes it)\n"
                "[Unit]\nDescription=pykubelet: Kubernetes node agent in Python\n"
                "Wants=network-online.target\nAfter=network-online.target\n\n"
                f"[Service]\nExecStart={shlex.join(agent)}\n"
                "Restart=always\nRestartSec=5\nKillMode=process\nLimitNOFILE=1048576\n\n[Install]\nWantedBy=multi-user.target\n"
            )
        }
    policy = (
        {
            NETPOLICY_UNIT: (
                f"# The network-policy agent of the pykubelet node in {plan.root} (written by join)\n"
                f"[Unit]\nDescription=pykubelet: network policies of the node's pods\nAfter={AGENT_UNIT}\n\n"
                f"[Service]\nExecStart={shlex.join(netpolicy)}\nRestart=always\nRestartSec=5\n\n"
                "[Install]\nWantedBy=multi-user.target\n"
            )
        }
        if netpolicy is not None
        else {}
    )
    return {
        **policy,
        CONTAINERD_UNIT: (
            f"# containerd for the pykubelet node in {plan.root} (written by pykubelet join; pykubelet reset removes it)\n"
            "[Unit]\nDescription=containerd for the pykubelet node\nAfter=network-online.target\n"
            f"Wants=network-online.target\nBefore={AGENT_UNIT}\n\n"
            f"[Service]\nExecStart={shlex.join(containerd_argv)}\nRestart=always\nRestartSec=5\n"
            "Delegate=yes\nKillMode=process\nLimitNOFILE=1048576\n\n[Install]\nWantedBy=multi-user.target\n"
        ),
        AGENT_UNIT: (
            f"# The pykubelet node agent in {plan.root} (written by pykubelet join; pykubelet reset removes it)\n"
            "[Unit]\nDescription=pykubelet: Kubernetes node agent in Python\n"
            "Documentation=https://kubernetes.io/docs/reference/command-line-tools-reference/kubelet/\n"
            f"Wants=network-online.target\nAfter=network-online.target {CONTAINERD_UNIT}\nRequires={CONTAINERD_UNIT}\n\n"
            f"[Service]\nExecStart={shlex.join(agent)}\n"
            "Restart=always\nRestartSec=5\nKillMode=process\nLimitNOFILE=1048576\n\n[Install]\nWantedBy=multi-user.target\n"
        ),
    }


def _fail(message: str) -> int:
    print(f"error execution phase preflight: {message}", file=sys.stderr)
    return 1


def _refuse(message: str) -> int:
    print(f"pykubelet join: {message}", file=sys.stderr)
    return 1


def plan_from(args: argparse.Namespace) -> NodePlan:
    return NodePlan(
        root=Path(os.path.realpath(args.root_dir)),
        node_name=args.node_name or default_node_name(),
        pod_cidr=args.pod_cidr,
        bridge=args.bridge,
        port=args.port,
        sandbox_image=args.sandbox_image,
        registry_mirror=args.registry_mirror,
        server_tls_bootstrap=args.server_tls_bootstrap,
        cri_socket=cri_endpoint(args.cri_socket),
        node_labels=node_labels_flag(checked_labels(args.node_labels, ())),
    )


def run(args: argparse.Namespace) -> int:
    try:
        plan = plan_from(args)
    except NodeLabelError as err:  # what the agent would refuse to start with: before anything is written
        return _refuse(str(err))
    if (plan.root / "apiserver").exists():
        return _refuse(f"{plan.root} holds a control plane (pykubelet up): join with another --root-dir")
    if plan.cri_socket:
        socket_path = Path(plan.cri_socket.removeprefix("unix://"))
        if not plan.cri_socket.startswith("unix://") or not socket_path.is_socket():
            return _fail(f"container runtime is not running: no CRI socket at {plan.cri_socket}")
    as_units = not args.foreground and systemd_running()
    try:
        # The units start the agent from pykubelet's own environment: checked before anything is written.
        units_python = str(check_venv(chosen_venv())) if as_units else None
    except VenvError as err:
        return _refuse(str(err))
    progress = Progress(sys.stderr, prefix="pykubelet join")
    try:
        return _join(args, plan, progress, units_python)
    except Exception as err:
        if progress.reported(err):
            return 1  # the stage said what failed, with its log
        raise


def _join(args: argparse.Namespace, plan: NodePlan, progress: Progress, units_python: str | None) -> int:
    """Discovery, the packages, the node's files, then the daemons: as units with `units_python`'s
    environment, else in the foreground."""
    try:
        with progress.stage(f"discovery of {args.endpoint}"):
            info = discover(args.endpoint, args.token, args.ca_hashes, args.discovery_timeout)
    except DiscoveryError as err:
        return _fail(f"couldn't validate the identity of the API Server: {err}")
    progress.note(f"[discovery] cluster-info validated; CA {info.ca_hash} pinned; server {info.server}")
    from pykubelet.rig.install import ensure_packages

    with progress.stage("packages", plan.root / INSTALL_LOG):
        ensure_packages(log_path=plan.root / INSTALL_LOG)
    with progress.stage("node files"):
        _stop_previous(plan, args.systemd_dir)
        write_node_files(plan, info, args.token)
        marker = {**asdict(plan), "root": str(plan.root), "server": info.server, "caHash": info.ca_hash}
        write_file(plan.root / MARKER, json.dumps(marker, indent=2).encode())
    if units_python is None:
        return _run_foreground(plan, progress)
    with progress.stage("units"):
        return _install_units(plan, args.systemd_dir, units_python)


def _stop_previous(plan: NodePlan, systemd_dir: Path) -> None:
    """A half-finished (or finished) earlier join on this root: its units stopped, its daemons and
    network swept; its files (and the agent's certificate) stay to be rewritten or reused."""
    if (systemd_dir / AGENT_UNIT).exists() and shutil.which("systemctl") and systemd_running():
        subprocess.run(["systemctl", "stop", NETPOLICY_UNIT, AGENT_UNIT, CONTAINERD_UNIT], check=False)
    from pykubelet.rig.sweep import looks_like_a_stack, sweep

    if looks_like_a_stack(plan.root):
        for problem in sweep(plan.root, settle=2.0):
            print(f"[reset] {problem}", file=sys.stderr)


def _install_units(plan: NodePlan, systemd_dir: Path, python: str) -> int:
    if plan.cri_socket:
        for name, text in units(plan, None, agent_argv(plan, plan.cri_socket, python)).items():
            write_file(systemd_dir / name, text.encode())
        node_record(plan, plan.cri_socket, {}).save()
        subprocess.run(["systemctl", "daemon-reload"], check=True)
        subprocess.run(["systemctl", "enable", "--now", AGENT_UNIT], check=True)
        print(f"This node has joined the cluster as {plan.node_name} ({AGENT_UNIT}).", file=sys.stderr)
        return 0
    ctd = containerd_for(plan)
    for d in (ctd.root, ctd.state, ctd.cni_conf_dir):
        d.mkdir(parents=True, exist_ok=True)
    ctd.config_path.write_text(ctd.render_config())
    (plan.root / "netpolicy").mkdir(exist_ok=True)  # its table is swept with the node's
    written = units(
        plan, ctd.daemon.argv, agent_argv(plan, ctd.endpoint, python), netpolicy_argv(plan, python)
    )
    for name, text in written.items():
        write_file(systemd_dir / name, text.encode())
    node_record(plan, ctd.endpoint, {}).save()
    subprocess.run(["systemctl", "daemon-reload"], check=True)
    subprocess.run(["systemctl", "enable", "--now", CONTAINERD_UNIT, AGENT_UNIT, NETPOLICY_UNIT], check=True)
    print(f"This node has joined the cluster as {plan.node_name} ({AGENT_UNIT}).", file=sys.stderr)
    return 0


def _on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _run_foreground(plan: NodePlan, progress: Progress) -> int:
    """containerd and the agent as this process's children until a signal or the agent's exit."""
    from pykubelet.rig.process import Daemon

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    ctd = None if plan.cri_socket else containerd_for(plan)
    endpoint = plan.cri_socket or (ctd.endpoint if ctd is not None else "")
    agent: Daemon | None = None
    policies: Daemon | None = None
    code = 1
    try:
        node_record(plan, endpoint, {}).save()
        if ctd is not None:
            ctd.daemon.on_spawn = lambda pid: node_record(plan, endpoint, {"containerd": pid}).save()
            with progress.stage("containerd", ctd.daemon.log_path):
                ctd.start()
        agent = Daemon("pykubelet agent", agent_argv(plan, endpoint), plan.agent_dir / "agent.log")
        with progress.stage(f"TLS bootstrap of node {plan.node_name}", agent.log_path):
            agent.start(lambda: True, timeout=10)
            pids = {"containerd": ctd.daemon.pid or 0} if ctd is not None else {}
            node_record(plan, endpoint, {**pids, "agent": agent.pid or 0}).save()
            while agent.running() and not plan.kubeconfig.exists():  # the agent writes it once issued
                time.sleep(0.5)
            if not agent.running():
                raise RuntimeError("the agent exited before its certificate was issued")
        if ctd is not None:
            (plan.root / "netpolicy").mkdir(exist_ok=True)  # its table is swept with the node's
            policies = Daemon(
                "pykubelet netpolicy", netpolicy_argv(plan), plan.root / "netpolicy" / "netpolicy.log"
            )
            _start_netpolicy(policies, plan, progress)
            node_record(
                plan, endpoint, {**pids, "agent": agent.pid or 0, "netpolicy": policies.pid or 0}
            ).save()
        progress.note(
            f"[kubelet-start] node {plan.node_name} runs (log {agent.log_path}); stop with Ctrl-C, "
            f"remove with pykubelet reset --root-dir {plan.root}"
        )
        while agent.running():
            time.sleep(0.5)
        print(f"pykubelet join: the agent exited:\n{agent.log_tail()}", file=sys.stderr)
    except KeyboardInterrupt:
        code = 130
    except SystemExit as stop:
        code = int(stop.code or 0)
    finally:
        if policies is not None:
            policies.stop()  # its rules stay until reset, as the rig's agent leaves them
        if agent is not None:
            agent.stop()
        if ctd is not None:
            ctd.stop(remove_state=False)
    return code


def _start_netpolicy(policies: Daemon, plan: NodePlan, progress: Progress) -> None:
    """The network-policy agent as a child, until its table exists (as the rig waits for its own)."""
    from pykubelet.rig.stack import netpolicy_table

    listed = ["nft", "list", "chain", "inet", netpolicy_table(plan.bridge), "forward"]
    with progress.stage("network policies", policies.log_path):
        policies.start(lambda: subprocess.run(listed, capture_output=True).returncode == 0, timeout=60)
