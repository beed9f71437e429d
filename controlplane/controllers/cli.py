"""`pykubelet controller-manager`: run the control loops against any API server."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import tempfile
from pathlib import Path

from controlplane.controllers import options as tunables
from kubeclient.eventloop import loop_factory
from kubeclient.flags import StringSlice, go_duration
from kubeclient.orphan import exit_if_orphaned, watch_parent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    default = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config")).split(os.pathsep)[0]
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=Path(default),
        help="kubeconfig of the API server (default: $KUBECONFIG or ~/.kube/config)",
    )
    parser.add_argument(
        "--controllers",
        action=StringSlice,
        default=["*"],
        help="'*' (the default set), 'name' to turn one on, '-name' to turn one off",
    )
    parser.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="hold the kube-system/kube-controller-manager Lease before acting",
    )
    parser.add_argument(
        "--leader-elect-lease-duration",
        type=go_duration,
        default="15s",
        help="how long a non-leader waits after the last renewal before taking over",
    )
    parser.add_argument(
        "--leader-elect-renew-deadline",
        type=go_duration,
        default="10s",
        help="how long the leader retries renewing before giving up leadership",
    )
    parser.add_argument(
        "--leader-elect-retry-period",
        type=go_duration,
        default="2s",
        help="how long clients wait between tries to acquire or renew the lease",
    )
    parser.add_argument("--bind-address", default="127.0.0.1", help="address of the healthz/metrics endpoint")
    parser.add_argument(
        "--service-account-private-key-file",
        type=Path,
        default=None,
        help="the key that signs the tokens of kubernetes.io/service-account-token Secrets (serviceaccount-token)",
    )
    parser.add_argument(
        "--secure-port", type=int, default=10257, help="HTTPS port for healthz and metrics (0: none)"
    )
    parser.add_argument(
        "--cert-dir", type=Path, default=None, help="where the self-signed serving certificate goes"
    )
    parser.add_argument(
        "--client-ca-file", default=None, help="CA whose client certificates may read /metrics"
    )
    parser.add_argument(
        "--root-ca-file",
        type=Path,
        default=None,
        help="the CA published as kube-root-ca.crt (default: the kubeconfig's CA)",
    )
    parser.add_argument(
        "--use-service-account-credentials",
        action="store_true",
        help="run each controller as its service account kube-system/<controller> (kubeadm sets it)",
    )
    parser.add_argument(
        "--cluster-signing-cert-file",
        type=Path,
        default=None,
        help="the cluster CA certificate (PEM) the controllers' credentials are signed with",
    )
    parser.add_argument(
        "--cluster-signing-key-file", type=Path, default=None, help="the cluster CA's private key (PEM)"
    )
    parser.add_argument(
        "--csi-address",
        default=None,
        help="the CSI driver's controller socket (for the csi-provisioner, csi-capacity, csi-attacher and "
        "csi-resizer controllers)",
    )
    parser.add_argument(
        "--capacity-namespace",
        default=None,
        help="where csi-capacity keeps the driver's CSIStorageCapacity objects (default kube-system; "
        "external-provisioner's NAMESPACE)",
    )
    parser.add_argument(
        "--capacity-poll-interval",
        type=float,
        default=None,
        help="seconds between csi-capacity's GetCapacity refreshes (default 60, external-provisioner's 1m)",
    )
    parser.add_argument(
        "--capacity-for-immediate-binding",
        action="store_true",
        help="csi-capacity tracks classes with Immediate binding too",
    )
    parser.add_argument(
        "--local-path-root", default=None, help="the local-path provisioner's volume folder on each node"
    )
    parser.add_argument(
        "--local-path-helper-image",
        default=None,
        help="the image of the local-path provisioner's helper pods",
    )
    add_node_ipam_arguments(parser)
    parser.add_argument(
        "--kube-api-qps", type=float, default=20.0, help="QPS to use while talking with kubernetes apiserver"
    )
    parser.add_argument(
        "--kube-api-burst", type=int, default=30, help="burst to use while talking with kubernetes apiserver"
    )
    tunables.add_arguments(parser)


def add_node_ipam_arguments(parser: argparse.ArgumentParser) -> None:
    """The node IPAM flags, kube-controller-manager's (the API server's CLI passes them on)."""
    parser.add_argument(
        "--allocate-node-cidrs",
        action="store_true",
        help="Should CIDRs for Pods be allocated and set on the cloud provider.",
    )
    parser.add_argument("--cluster-cidr", default="", help="CIDR Range for Pods in cluster.")
    parser.add_argument(
        "--node-cidr-mask-size",
        type=int,
        default=24,
        help="Mask size for node cidr in cluster. Default is 24 for IPv4 and 64 for IPv6.",
    )
    parser.add_argument(
        "--service-cluster-ip-range",
        default="",
        help="CIDR Range for Services in cluster (the API server allocates ClusterIPs from it, default "
        "10.96.0.0/16; the controller manager's node IPAM needs --allocate-node-cidrs)",
    )


def node_ipam_argv(args: argparse.Namespace) -> list[str]:
    """The node IPAM flags of `args` as a command line (for a child controller manager)."""
    if not args.allocate_node_cidrs:
        return []
    argv = ["--allocate-node-cidrs", "--cluster-cidr", args.cluster_cidr]
    argv += ["--node-cidr-mask-size", str(args.node_cidr_mask_size)]
    if args.service_cluster_ip_range:
        argv += ["--service-cluster-ip-range", args.service_cluster_ip_range]
    return argv


def run(args: argparse.Namespace) -> int:
    exit_if_orphaned("controller-manager")
    watch_parent("controller-manager")
    from controlplane.controllers.manager import LEASE_NAME, ManagerConfig, serve_forever
    from controlplane.controllers.registry import enabled
    from kubeclient.client import KubeClient
    from kubeclient.config import load_kubeconfig
    from kubeclient.gctuning import tune_for_large_caches
    from kubeclient.leaderelection import LeaderElection, LeadershipLost

    if args.allocate_node_cidrs and not args.cluster_cidr:
        logging.getLogger(__name__).error(
            "Controller: Must specify --cluster-cidr if --allocate-node-cidrs is set"
        )
        return 2
    try:
        controllers = enabled(",".join(args.controllers))
    except ValueError as err:
        logging.getLogger(__name__).error("--controllers: %s", err)
        return 2
    cluster = load_kubeconfig(args.kubeconfig)
    root_ca = args.root_ca_file.read_bytes() if args.root_ca_file else (cluster.ca_data or b"")
    if not root_ca and cluster.ca_file:
        root_ca = Path(cluster.ca_file).read_bytes()
    election = LeaderElection(
        LEASE_NAME,
        enabled=args.leader_elect,
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
    )
    signer = None
    # csrsigning's CA (upstream: the signing controller starts only with both files).
    cluster_signing = None
    if args.cluster_signing_cert_file is not None and args.cluster_signing_key_file is not None:
        cluster_signing = (
            args.cluster_signing_cert_file.read_bytes(),
            args.cluster_signing_key_file.read_bytes(),
        )
    if args.use_service_account_credentials:
        if args.cluster_signing_cert_file is None or args.cluster_signing_key_file is None:
            logging.getLogger(__name__).error(
                "--use-service-account-credentials needs --cluster-signing-cert-file "
                "and --cluster-signing-key-file"
            )
            return 2
        signer = (args.cluster_signing_cert_file.read_bytes(), args.cluster_signing_key_file.read_bytes())
    sa_key = None
    if args.service_account_private_key_file is not None:
        from controlplane.controllers.serviceaccounttoken import load_private_key

        try:
            sa_key = load_private_key(args.service_account_private_key_file)
        except (OSError, ValueError) as err:
            logging.getLogger(__name__).error("--service-account-private-key-file: %s", err)
            return 2
    config = ManagerConfig(
        controllers=controllers,
        leader_election=election,
        bind_address=args.bind_address,
        secure_port=args.secure_port,
        cert_dir=args.cert_dir or Path(tempfile.gettempdir()) / "pykubelet-controller-manager",
        client_ca_file=args.client_ca_file,
        options={
            "root_ca": root_ca,
            "service_account_private_key": sa_key,
            "cluster_signing": cluster_signing,
            "allocate_node_cidrs": args.allocate_node_cidrs,
            "cluster_cidr": args.cluster_cidr,
            "node_cidr_mask_size": args.node_cidr_mask_size,
            "service_cluster_ip_range": args.service_cluster_ip_range,
            **tunables.from_args(args),
            **{
                k: v
                for k, v in (
                    ("local_path_root", args.local_path_root),
                    ("csi_address", args.csi_address),
                    ("capacity_namespace", args.capacity_namespace),
                    ("capacity_poll_interval", args.capacity_poll_interval),
                    ("capacity_immediate_binding", args.capacity_for_immediate_binding),
                    ("local_path_helper_image", args.local_path_helper_image),
                )
                if v
            },
        },
        service_account_signer=signer,
    )
    client = KubeClient(
        cluster, qps=args.kube_api_qps, burst=args.kube_api_burst, component="kube-controller-manager"
    )
    tune_for_large_caches()  # the informers hold every pod, node and ReplicaSet of the cluster
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        try:
            runner.run(serve_forever(client, config))
        except LeadershipLost as err:
            logging.getLogger(__name__).error("%s; exiting", err)
            return 1
    return 0
