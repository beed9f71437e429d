"""`pykubelet metrics-server`: the metrics server against any API server, with metrics-server's flags.

The requestheader settings and the client CA come from kube-system/extension-apiserver-authentication
(as upstream reads them) unless --requestheader-client-ca-file is given. Without --tls-cert-file the
serving certificate is a self-signed one made in --cert-dir (apiserver.crt/.key), valid for
metrics-server.kube-system.svc, the name the aggregation layer verifies it for."""

from __future__ import annotations

import argparse
import logging
import os
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from kubeclient.duration import format_go_duration
from kubeclient.eventloop import run_component, termination_event
from kubeclient.flags import StringSlice, go_duration
from kubeclient.tlsverify import go_compatible

if TYPE_CHECKING:
    from kubeclient.client import KubeClient
    from metricsserver.auth import RequestHeaderConfig

log = logging.getLogger("metricsserver")
CONFIGMAP = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
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


def serving_context(cert: Path, key: Path, cas: list[str]) -> ssl.SSLContext:
    ctx = go_compatible(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH))
    ctx.load_cert_chain(str(cert), str(key))
    for pem in cas:
        if pem.strip():
            ctx.load_verify_locations(cadata=pem)
    ctx.verify_mode = ssl.CERT_OPTIONAL  # a certificate is verified when sent; bearer tokens need none
    return ctx


async def _requestheader(client: KubeClient, args: argparse.Namespace) -> tuple[RequestHeaderConfig, str]:
    """The requestheader settings and the client CA: flags first, else the API server's ConfigMap."""
    from kubeclient.errors import ApiError
    from metricsserver.auth import RequestHeaderConfig

    data: dict[str, str] = {}
    if args.requestheader_client_ca_file is None or args.client_ca_file is None:
        try:
            data = (await client.get(CONFIGMAP)).get("data") or {}
        except ApiError as err:
            log.warning("event=no-authentication-configmap cause=%s", err.message)
    config = RequestHeaderConfig.from_configmap(data)
    if args.requestheader_client_ca_file is not None:
        names = tuple(n for n in args.requestheader_allowed_names if n)
        config = RequestHeaderConfig(
            args.requestheader_client_ca_file.read_text(), names or config.allowed_names
        )
    client_ca = args.client_ca_file.read_text() if args.client_ca_file else data.get("client-ca-file", "")
    return config, client_ca


async def _main(args: argparse.Namespace) -> int:
    from aiohttp import web
    from cryptography import x509

    from kubeclient.client import KubeClient
    from kubeclient.config import load_kubeconfig
    from kubeclient.serving import ensure_self_signed
    from metricsserver.auth import Authenticator, Authorizer
    from metricsserver.scraper import KubeletOptions, Scraper
    from metricsserver.server import MetricsServer

    config = load_kubeconfig(args.kubeconfig)
    client = KubeClient(config, component="metrics-server")
    requestheader, client_ca = await _requestheader(client, args)
    if args.tls_cert_file and args.tls_private_key_file:
        cert, key = args.tls_cert_file, args.tls_private_key_file
    else:
        ips = [args.bind_address] if args.bind_address not in ("0.0.0.0", "::") else []
        cert, key = ensure_self_signed(args.cert_dir, SERVICE_NAME, ips, stem="apiserver")
    front_proxy_ca = (
        x509.load_pem_x509_certificate(requestheader.client_ca.encode()) if requestheader.client_ca else None
    )
    authenticator = Authenticator(requestheader, client, front_proxy_ca)
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
        authenticator,
        Authorizer(client),
        args.metric_resolution,
    )
    await server.start()
    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(
        runner,
        args.bind_address,
        args.secure_port,
        ssl_context=serving_context(cert, key, [requestheader.client_ca, client_ca]),
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
