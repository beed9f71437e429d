"""`pykubelet agent`: flags named as the upstream kubelet's, plus --config for a KubeletConfiguration file.

Flags given on the command line win over the file, as upstream.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from agent.config import AgentConfig, ConfigFileError, load_config, swap_on
from agent.nodelabels import NodeLabelError, parse_node_labels, validate_node_labels
from agent.taints import TaintError, parse_taints
from kubeclient import logsetup


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig for the API server (default: in-cluster config)")
    parser.add_argument(
        "--bootstrap-kubeconfig",
        dest="bootstrap_kubeconfig",
        help="kubeconfig with a bootstrap credential: without a usable client certificate, get one by CSR",
    )
    parser.add_argument("--cert-dir", dest="cert_dir", help="client certificate directory (default ROOT/pki)")
    parser.add_argument(
        "--rotate-certificates",
        dest="rotate_certificates",
        action="store_true",
        default=None,
        help="renew the client certificate through the CSR API before it expires",
    )
    parser.add_argument("--node-name", dest="node_name", help="the Node's name (default: the hostname)")
    parser.add_argument("--hostname-override", dest="hostname_override", help="alias of --node-name")
    parser.add_argument(
        "--container-runtime-endpoint",
        dest="container_runtime_endpoint",
        help="the CRI runtime's endpoint (default unix:///run/containerd/containerd.sock)",
    )
    parser.add_argument(
        "--image-service-endpoint",
        dest="image_service_endpoint",
        help="the CRI image service's endpoint (default: --container-runtime-endpoint)",
    )
    parser.add_argument("--config", help="KubeletConfiguration (kubelet.config.k8s.io/v1beta1) YAML file")
    parser.add_argument(
        "--root-dir", dest="root_dir", help="agent state directory (default /var/lib/kubelet)"
    )
    parser.add_argument(
        "--node-ip", dest="node_ip", help="the Node's InternalIP (default: the default route's)"
    )
    parser.add_argument(
        "--node-labels",
        dest="node_labels",
        help="labels to register the Node with: k1=v1,k2=v2 (of the kubernetes.io and k8s.io domains only "
        "those a kubelet may set, e.g. topology.kubernetes.io/zone or node.kubernetes.io/*)",
    )
    parser.add_argument(
        "--pod-cidr", dest="pod_cidr", help="this node's pod range (default: the Node's podCIDR)"
    )
    parser.add_argument(
        "--max-pods", dest="max_pods", type=int, help="pods this node runs at most (default 110)"
    )
    parser.add_argument(
        "--cluster-domain", dest="cluster_domain", help="the cluster's DNS domain (default cluster.local)"
    )
    parser.add_argument("--cluster-dns", dest="cluster_dns", help="comma-separated DNS server IPs")
    parser.add_argument(
        "--cni-conf-dir",
        dest="cni_conf_dir",
        help="run pykubelet's own pod network: write its conflist here (containerd's CNI conf_dir)",
    )
    parser.add_argument(
        "--cni-bin-dir", dest="cni_bin_dir", help="where to install pykubelet-cni (default /opt/cni/bin)"
    )
    parser.add_argument(
        "--cni-data-dir", dest="cni_data_dir", help="IPAM state (default /var/lib/cni/networks)"
    )
    parser.add_argument("--cni-bridge", dest="cni_bridge", help="the pod network's bridge (default cni0)")
    add_config_file_flags(parser)


def add_config_file_flags(parser: argparse.ArgumentParser) -> None:
    """Upstream's flags for what the config file also sets (and --config-dir): one place, for the merge."""
    parser.add_argument(
        "--config-dir",
        dest="config_dir",
        help="drop-in KubeletConfiguration files (*.conf), merged over --config in name order (default none)",
    )
    parser.add_argument(
        "--pod-manifest-path",
        dest="static_pod_path",
        help="static pod manifests: a directory or one file (staticPodPath; default none)",
    )
    parser.add_argument(
        "--register-with-taints",
        dest="register_with_taints",
        help="taints the Node registers with: key=value:Effect,key2:Effect (default none)",
    )
    parser.add_argument(
        "--healthz-port",
        dest="healthz_port",
        type=int,
        help="plain-HTTP /healthz port, 0 off (default 10248)",
    )
    parser.add_argument(
        "--healthz-bind-address", dest="healthz_bind_address", help="/healthz address (default 127.0.0.1)"
    )
    parser.add_argument(
        "--runtime-cgroups",
        dest="runtime_cgroups",
        help="the runtime's cgroup for the Summary (default: found)",
    )


def build_config(args: argparse.Namespace) -> AgentConfig:
    cfg = AgentConfig()
    if args.config or getattr(args, "config_dir", None):
        load_config(args.config, getattr(args, "config_dir", None), cfg)
    name = args.node_name or args.hostname_override
    if name:
        cfg.node_name = name.lower()
    for attr in (
        "kubeconfig",
        "bootstrap_kubeconfig",
        "cert_dir",
        "rotate_certificates",
        "container_runtime_endpoint",
        "image_service_endpoint",
        "root_dir",
        "node_ip",
        "pod_cidr",
        "max_pods",
        "cluster_domain",
        "cni_conf_dir",
        "cni_bin_dir",
        "cni_data_dir",
        "cni_bridge",
        "static_pod_path",
        "healthz_port",
        "healthz_bind_address",
        "runtime_cgroups",
    ):
        value = getattr(args, attr, None)
        if value is not None:
            setattr(cfg, attr, value)
    if args.node_labels:
        try:
            cfg.node_labels.update(parse_node_labels(args.node_labels))
        except NodeLabelError as err:
            raise ConfigFileError(str(err)) from None
    if getattr(args, "register_with_taints", None) is not None:
        try:
            cfg.register_with_taints = parse_taints(args.register_with_taints)
        except TaintError as err:
            raise ConfigFileError(f"--register-with-taints: {err}") from None
    if args.cluster_dns:
        cfg.cluster_dns = [s.strip() for s in args.cluster_dns.split(",") if s.strip()]
    return cfg


def run(args: argparse.Namespace) -> int:
    try:
        cfg = build_config(args)
    except ConfigFileError as err:
        print(f"pykubelet agent: {err}", file=sys.stderr)
        return 2
    try:
        validate_node_labels(cfg.node_labels)
    except NodeLabelError as err:  # upstream's kubelet exits 1 before it starts anything
        print(f"pykubelet agent: failed to validate kubelet flags: {err}", file=sys.stderr)
        return 1
    flag_v, flag_format = getattr(args, "v", 0), getattr(args, "logging_format", "text")
    if (cfg.verbosity and not flag_v) or (cfg.logging_format and flag_format == "text"):
        # the config file's logging.verbosity and .format where the flags did not say (flags win)
        logsetup.configure(
            flag_v or cfg.verbosity, cfg.logging_format if flag_format == "text" else flag_format
        )
    if cfg.fail_swap_on and swap_on():
        print(
            "pykubelet agent: running with swap on is not supported, please disable swap or set "
            "failSwapOn to false in the config file",
            file=sys.stderr,
        )
        return 1
    from agent.app import serve
    from kubeclient.config import ConfigError
    from kubeclient.eventloop import loop_factory

    try:
        # uvloop, as every other component: its TLS is what the streaming server's bytes pass through
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            return runner.run(serve(cfg))
    except ConfigError as err:
        print(f"pykubelet agent: {err}", file=sys.stderr)
        return 2
