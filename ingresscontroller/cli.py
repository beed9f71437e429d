"""`pykubelet ingress-controller`: the ingress controller (an nginx it configures from the Ingresses of
its IngressClass) against any API server, on its own identity."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from kubeclient.eventloop import run_component, termination_event

log = logging.getLogger("ingresscontroller")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ingresscontroller.manifest import CONTROLLER, LEASE, NAMESPACE

    default = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config")).split(os.pathsep)[0]
    parser.add_argument(
        "--kubeconfig", type=Path, default=Path(default), help="kubeconfig with the controller's identity"
    )
    parser.add_argument(
        "--controller-class", default=CONTROLLER, help="the IngressClass spec.controller served"
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path("/var/lib/pykubelet/ingress"),
        help="nginx's configuration, certificates and logs",
    )
    parser.add_argument(
        "--bind-address", default="", help="the address nginx listens on (default: every address)"
    )
    parser.add_argument("--http-port", type=int, default=80, help="nginx's HTTP port")
    parser.add_argument("--https-port", type=int, default=443, help="nginx's HTTPS port")
    parser.add_argument(
        "--publish-address",
        default="",
        help="the address written into the Ingresses' status (default: --bind-address, else the host's default route address)",
    )
    parser.add_argument(
        "--gateway-class",
        default="",
        help="create this GatewayClass (controllerName pykubelet.io/gateway-controller) once the Gateway API CRDs exist",
    )
    parser.add_argument(
        "--reserved-ports",
        default="",
        help="ports no Gateway listener may have, e.g. 30000-32767 (the Services' node ports): PortUnavailable",
    )
    parser.add_argument("--election-id", default=LEASE, help="the leader-election Lease's name")
    parser.add_argument(
        "--election-namespace", default=NAMESPACE, help="the leader-election Lease's namespace"
    )
    parser.add_argument(
        "--leader-elect", default="true", choices=["true", "false"], help="elect a leader to write status"
    )
    parser.add_argument("--nginx-binary", default="nginx", help=argparse.SUPPRESS)


async def _main(args: argparse.Namespace) -> int:
    from ingresscontroller.controller import ControllerConfig, IngressController
    from ingresscontroller.listenerports import parse_ranges
    from ingresscontroller.nginxconf import Listen
    from kubeclient.client import KubeClient
    from kubeclient.config import load_kubeconfig
    from kubeclient.hostaddr import default_route_ip
    from kubeclient.leaderelection import LeaderElection

    try:
        reserved = parse_ranges(args.reserved_ports)
    except ValueError as err:
        raise SystemExit(f"--reserved-ports: {err}") from err
    publish = args.publish_address or args.bind_address or default_route_ip()
    config = ControllerConfig(
        controller_name=args.controller_class,
        state_dir=args.state_dir.resolve(),
        listen=Listen(args.bind_address, args.http_port, args.https_port),
        publish_address=publish,
        election=LeaderElection(
            args.election_id, enabled=args.leader_elect == "true", namespace=args.election_namespace
        ),
        nginx_binary=args.nginx_binary,
        gateway_class=args.gateway_class,
        reserved_ports=reserved,
    )
    client = KubeClient(load_kubeconfig(args.kubeconfig), component="ingress-nginx-controller")
    controller = IngressController(client, config)
    stop = termination_event()
    log.info(
        "starting controller=%s http=%s:%d https=%s:%d publish=%s",
        config.controller_name,
        args.bind_address or "*",
        args.http_port,
        args.bind_address or "*",
        args.https_port,
        publish,
    )
    try:
        await controller.run(stop)
    finally:
        await client.close()
    return 0


def run(args: argparse.Namespace) -> int:
    return run_component(_main(args))
