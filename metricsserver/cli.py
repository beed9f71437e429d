"""`pykubelet metrics-server`: the metrics server against any API server, with metrics-server's flags.

The requestheader settings and the client CA come from kube-system/extension-apiserver-authentication
(as upstream reads them) unless --requestheader-client-ca-file is given. Without --tls-cert-file the
serving certificate is a self-signed one made in --cert-dir (apiserver.crt/.key), valid for
metrics-server.kube-system.svc, the name the aggregation layer verifies it for."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from kubeclient.duration import format_go_duration
from kubeclient.eventloop import run_component, termination_event
from kubeclient.flags import StringSlice, go_duration

log = logging.getLogger("metricsserver")
SERVICE_NAME = "metrics-server.kube-system.svc"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    default = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config")).split(os.pathsep)[0]
    parser.add_argument(
        "--kubeconfig", type=Path, default=Path(default), help="kubeconfig with the server's identity"
    )
    parser.add_argument("--bind-address", default="0.0.0.0", help="the IP address on which to serve")
    parser.add_argument("--secure-port", type=int, default=10250, help="the port on which to serve HTTPS")
    parser.add_argument(
        "--cert-dir",
        type=Path,
        default=Path("apiserver.local.config/certificates"),
        help="where the self-signed serving certificate is kept (without --tls-cert-file)",
    )
    parser.add_argument("--tls-cert-file", type=Path, help="serving certificate (PEM)")
    parser.add_argument("--tls-private-key-file", type=Path, help="key of --tls-cert-file (PEM)")
    parser.add_argument(
        "--metric-resolution",
        type=go_duration,
        default="15s",
        help="the interval at which metrics are scraped",
    )
    parser.add_argument(
        "--kubelet-insecure-tls", action="store_true", help="do not verify kubelets' certificates"
    )
    parser.add_argument("--kubelet-certificate-authority", help="CA for kubelets' serving certificates")
    parser.add_argument(
        "--kubelet-preferred-address-types",
        action=StringSlice,
        default=["Hostname", "InternalDNS", "InternalIP", "ExternalDNS", "ExternalIP"],
        help="the priority of node address types to use when determining which address to connect to",
    )
    parser.add_argument(
        "--kubelet-use-node-status-port",
        action="store_true",
        help="use the port in the node status (daemonEndpoints) instead of --kubelet-port",
    )
    parser.add_argument(
        "--kubelet-port", type=int, default=10250, help="the port to use to connect to kubelets"
    )
    parser.add_argument(
        "--kubelet-request-timeout",
        type=go_duration,
        default="10s",
        help="the timeout of requests to kubelets",
    )
    parser.add_argument(
        "--requestheader-client-ca-file",
        type=Path,
        help="CA of the front proxy's client certificates (default: the API server's ConfigMap)",
    )
    parser.add_argument(
        "--requestheader-allowed-names",
        action=StringSlice,
        default=[],
        help="common names the front proxy's certificate may have (empty: any)",
    )
    parser.add_argument(
        "--client-ca-file", type=Path, help="CA of client certificates (default: the API server's ConfigMap)"
    )


async def _main(args: argparse.Namespace) -> int:
    from aiohttp import web

    from kubeclient.client import KubeClient
    from kubeclient.config import load_kubeconfig
    from kubeclient.delegatedauth import delegated_auth
    from kubeclient.serving import ensure_self_signed
    from metricsserver.scraper import KubeletOptions, Scraper
    from metricsserver.server import MetricsServer

    config = load_kubeconfig(args.kubeconfig)
    client = KubeClient(config, component="metrics-server")
    auth = await delegated_auth(
        client, args.requestheader_client_ca_file, args.requestheader_allowed_names, args.client_ca_file
    )
    if args.tls_cert_file and args.tls_private_key_file:
        cert, key = args.tls_cert_file, args.tls_private_key_file
    else:
        ips = [args.bind_address] if args.bind_address not in ("0.0.0.0", "::") else []
        cert, key = ensure_self_signed(args.cert_dir, SERVICE_NAME, ips, stem="apiserver")
    options = KubeletOptions(
        address_types=tuple(t for t in args.kubelet_preferred_address_types if t),
        use_node_status_port=args.kubelet_use_node_status_port,
        port=args.kubelet_port,
        insecure_tls=args.kubelet_insecure_tls,
        ca_file=args.kubelet_certificate_authority,
        timeout=args.kubelet_request_timeout,
    )
    server = MetricsServer(
        client,
        Scraper(config, options),
        auth,
        args.metric_resolution,
    )
    await server.start()
    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(
        runner,
        args.bind_address,
        args.secure_port,
        ssl_context=auth.ssl_context(cert, key),
    )
    await site.start()
    log.info(
        "event=serving address=%s port=%d resolution=%s",
        args.bind_address,
        args.secure_port,
        format_go_duration(args.metric_resolution),
    )
    stop = termination_event()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await server.stop()
        await client.close()
    return 0


def run(args: argparse.Namespace) -> int:
    return run_component(_main(args))
