"""`pykubelet server`: run the project's own Kubernetes API server, and the components it supervises.

This is the control plane's composition root: the API server, the scheduler and the controllers to come
know nothing of each other (an import-linter contract says so); here the server is started and each
component is run as a supervised child process that talks to it through the API, as upstream's
components talk to kube-apiserver.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from kubeclient.eventloop import loop_factory, termination_event
from kubeclient.flags import StringSlice, go_duration

if TYPE_CHECKING:
    from controlplane.apiserver.audit import AuditOptions
    from controlplane.apiserver.authnconfig import AuthenticationConfig
    from controlplane.apiserver.encryptionconfig import EncryptionConfig
    from controlplane.apiserver.podsecurity import PodSecurityConfig
    from controlplane.apiserver.server import ServerConfig
    from controlplane.apiserver.serviceranges import ServiceRanges
    from controlplane.storage.etcd import EtcdConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from controlplane.controllers.cli import add_node_ipam_arguments

    add_node_ipam_arguments(parser)  # handed to the controller manager, as kubeadm's podSubnet is
    parser.add_argument(
        "--data-dir", required=True, type=Path, help="state, PKI and admin.kubeconfig live here"
    )
    parser.add_argument(
        "--secure-port",
        "--port",
        dest="port",
        type=int,
        default=6443,
        help="the port on which to serve HTTPS with authentication and authorization (0 picks a free one)",
    )
    parser.add_argument(
        "--tls-cert-file",
        type=Path,
        default=None,
        help="x509 serving certificate (PEM, intermediates after it); without it DIR/pki/apiserver.crt is made",
    )
    parser.add_argument(
        "--tls-private-key-file", type=Path, default=None, help="key of --tls-cert-file (PEM)"
    )
    parser.add_argument(
        "--tls-cipher-suites",
        action=StringSlice,
        default=[],
        help="TLS 1.2 cipher suites the server offers, by Go's names (TLS 1.3's are always on); "
        "default: ECDHE with AES-GCM or ChaCha20",
    )
    parser.add_argument(
        "--client-ca-file",
        type=Path,
        default=None,
        help="client certificates signed by a CA in this bundle authenticate (CN user, O groups), besides "
        "DIR/pki/ca.crt, which signs the server's own kubeconfigs",
    )
    parser.add_argument("--bind-address", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--advertise-address", default="", help="host written into admin.kubeconfig")
    parser.add_argument(
        "--token-auth-file", type=Path, default=None, help='static tokens: token,user,uid,"groups"'
    )
    parser.add_argument(
        "--tls-san", action="append", default=[], help="extra name or IP for the serving cert"
    )
    parser.add_argument(
        "--watch-cache-size", type=int, default=10_000, help="events kept per resource for watch resume"
    )
    parser.add_argument(
        "--watch-cache-sizes",
        action=StringSlice,
        type=_watch_cache_size,
        default=[],
        help="events kept for some resources: resource[.group]#size, e.g. pods#5000,deployments.apps#1000",
    )
    parser.add_argument(
        "--etcd-compaction-interval",
        type=go_duration,
        default="5m0s",
        help="the interval of compaction requests (also of the SQLite store's history)",
    )
    parser.add_argument(
        "--event-ttl", type=go_duration, default="1h0m0s", help="amount of time to retain events"
    )
    parser.add_argument(
        "--anonymous-auth",
        action="store_true",
        default=True,
        help="requests without credentials are system:anonymous (false: 401)",
    )
    parser.add_argument(
        "--service-node-port-range",
        type=_port_range,
        default="30000-32767",
        help="the port range NodePort services are given ports from (N-M, inclusive)",
    )
    parser.add_argument(
        "--enable-bootstrap-token-auth",
        action="store_true",
        help="bootstrap token Secrets (kube-system/bootstrap-token-<id>) authenticate; keep kube-public/cluster-info",
    )
    parser.add_argument(
        "--kubelet-certificate-authority",
        default="",
        help="path to a cert file for the certificate authority: the kubelets' serving certificates are verified with it",
    )
    parser.add_argument(
        "--authorization-mode",
        action=StringSlice,
        default=["Node", "RBAC"],
        help="ordered authorizers: Node, RBAC, AlwaysAllow",
    )
    parser.add_argument(
        "--scheduler",
        action="store_true",
        default=True,
        help="run the scheduler as a child process (false: another scheduler binds pods)",
    )
    parser.add_argument("--scheduler-config", type=Path, default=None, help="KubeSchedulerConfiguration file")
    parser.add_argument(
        "--controllers",
        action="store_true",
        default=True,
        help="run the controller manager as a child process (false: leave the loops to another)",
    )
    parser.add_argument(
        "--default-local-storage-path",
        type=Path,
        default=None,
        help="where the local-path provisioner puts volumes (k3s's flag; default "
        "/var/lib/pykubelet/local-path-provisioner)",
    )
    parser.add_argument(
        "--scheduler-port",
        type=int,
        default=10259,
        help="the scheduler's healthz/metrics HTTPS port (0: none)",
    )
    parser.add_argument(
        "--controller-manager-port",
        type=int,
        default=10257,
        help="the controller manager's healthz/metrics HTTPS port (0: none)",
    )
    parser.add_argument(
        "--controller-manager-kube-api-qps",
        type=float,
        default=None,
        help="the controller manager's --kube-api-qps (its client's requests per second; its default 20)",
    )
    parser.add_argument(
        "--controller-manager-kube-api-burst",
        type=int,
        default=None,
        help="the controller manager's --kube-api-burst (its default 30)",
    )
    parser.add_argument(
        "--service-account-issuer",
        action="append",
        default=[],
        help="issuer of service-account tokens (repeat to accept more; the first signs)",
    )
    parser.add_argument(
        "--api-audiences", action=StringSlice, default=[], help="audiences of the API (default: the issuers)"
    )
    parser.add_argument(
        "--service-account-max-token-expiration",
        type=go_duration,
        default=0,
        help="longest lifetime a TokenRequest gets, e.g. 24h (default: no limit)",
    )
    parser.add_argument(
        "--service-account-extend-token-expiration",
        action="store_true",
        default=True,
        help="issue the admission plugin's 3607 s pod tokens for a year, flagged stale after 3607 s",
    )
    parser.add_argument(
        "--service-account-jwks-uri", default="", help="jwks_uri of the OpenID discovery document"
    )
    parser.add_argument(
        "--enable-admission-plugins",
        action=StringSlice,
        default=[],
        help="admission plugins to turn on besides the default ones (all of pykubelet's are on by default, "
        "NodeRestriction included, as kubeadm sets it)",
    )
    parser.add_argument(
        "--disable-admission-plugins",
        action=StringSlice,
        default=[],
        help="admission plugins to turn off (e.g. ServiceAccount)",
    )
    parser.add_argument(
        "--authentication-token-webhook-config-file",
        type=Path,
        default=None,
        help="kubeconfig of a token webhook: TokenReviews for bearer tokens nothing else claims",
    )
    parser.add_argument(
        "--authentication-token-webhook-cache-ttl",
        type=go_duration,
        default="2m",
        help="how long the webhook's answers are kept",
    )
    parser.add_argument(
        "--authentication-token-webhook-version",
        choices=("v1", "v1beta1"),
        default="v1",
        help="TokenReview version",
    )
    parser.add_argument(
        "--authentication-config",
        type=Path,
        default=None,
        help="AuthenticationConfiguration file: JWT authenticators (external issuers, claim mappings, CEL rules)",
    )
    parser.add_argument(
        "--encryption-provider-config",
        type=Path,
        default=None,
        help="EncryptionConfiguration file: which resources are encrypted at rest, with which keys",
    )
    parser.add_argument(
        "--admission-control-config-file",
        type=Path,
        default=None,
        help="AdmissionConfiguration file: the PodSecurity plugin's defaults and exemptions",
    )
    parser.add_argument(
        "--etcd-servers",
        default="",
        help="etcd members to store in, e.g. https://127.0.0.1:2379[,...] (default: SQLite in DIR)",
    )
    parser.add_argument(
        "--etcd-cafile", type=Path, default=None, help="CA that signed etcd's serving certificate"
    )
    parser.add_argument(
        "--etcd-certfile", type=Path, default=None, help="client certificate presented to etcd"
    )
    parser.add_argument("--etcd-keyfile", type=Path, default=None, help="key of --etcd-certfile")
    parser.add_argument("--etcd-prefix", default="/registry", help="the prefix of every key in etcd")
    parser.add_argument(
        "--endpoint-reconciler-type",
        choices=("lease", "none"),
        default="lease",
        help="lease: the kubernetes Service's endpoints list every live API server (/masterleases/ on "
        "etcd; on SQLite the one server); none: leave them alone",
    )
    parser.add_argument(
        "--max-requests-inflight",
        type=int,
        default=400,
        help="with --max-mutating-requests-inflight, the seats API priority and fairness shares out",
    )
    parser.add_argument(
        "--max-mutating-requests-inflight", type=int, default=200, help="see --max-requests-inflight"
    )
    parser.add_argument(
        "--enable-priority-and-fairness",
        action="store_true",
        default=True,
        help="classify requests by FlowSchemas into priority levels with their seats and queues (default true)",
    )
    parser.add_argument(
        "--audit-policy-file",
        type=Path,
        default=None,
        help="audit.k8s.io/v1 Policy: what is audited, at which level",
    )
    parser.add_argument(
        "--audit-log-path", default="", help="audit events as JSON lines to this file ('-': stdout)"
    )
    parser.add_argument(
        "--audit-log-maxsize",
        type=int,
        default=0,
        help="MB an audit log reaches before it is rotated (0: 100)",
    )
    parser.add_argument("--audit-log-maxbackup", type=int, default=0, help="rotated audit logs kept (0: all)")
    parser.add_argument(
        "--audit-log-maxage", type=int, default=0, help="days a rotated audit log is kept (0: no limit)"
    )
    parser.add_argument(
        "--audit-log-mode",
        choices=("blocking", "blocking-strict", "batch"),
        default="blocking",
        help="blocking (no event lost: requests wait for a full buffer) or batch (a full buffer drops events)",
    )
    for backend in ("log", "webhook"):
        parser.add_argument(
            f"--audit-{backend}-truncate-enabled",
            action=argparse.BooleanOptionalAction,
            default=False,
            help=f"drop the request and response objects of {backend} events over the max event size",
        )
        parser.add_argument(
            f"--audit-{backend}-truncate-max-event-size",
            type=int,
            default=102400,
            help="bytes an event may have before it is truncated (then dropped)",
        )
    parser.add_argument(
        "--audit-webhook-config-file",
        type=Path,
        default=None,
        help="kubeconfig of an audit webhook: batches of events POSTed as an EventList",
    )
    parser.add_argument(
        "--audit-webhook-mode",
        choices=("blocking", "blocking-strict", "batch"),
        default="batch",
        help="batch (a full buffer drops events) or blocking (requests wait)",
    )
    parser.add_argument(
        "--audit-webhook-initial-backoff",
        type=go_duration,
        default="10s",
        help="wait before the first retry of a failed webhook request (doubling)",
    )
    parser.add_argument("--insecure-http", action="store_true", help="serve plain HTTP (benchmarks only)")
    add_kubeadm_arguments(parser)


# The header names this server's aggregator sends and publishes (upstream's, which kubeadm passes).
REQUESTHEADER_FIXED = {
    "requestheader_username_headers": ["X-Remote-User"],
    "requestheader_group_headers": ["X-Remote-Group"],
    "requestheader_extra_headers_prefix": ["X-Remote-Extra-"],
}
ADDRESS_TYPES = ("Hostname", "InternalDNS", "InternalIP", "ExternalDNS", "ExternalIP")


def add_kubeadm_arguments(parser: argparse.ArgumentParser) -> None:
    """The rest of the flags kubeadm's kube-apiserver manifest passes."""
    parser.add_argument(
        "--allow-privileged",
        action="store_true",
        default=True,
        help="privileged containers are allowed; pykubelet always allows them, so only true is accepted",
    )
    parser.add_argument(
        "--kubelet-client-certificate",
        type=Path,
        default=None,
        help="client certificate presented to node agents (default DIR/pki/apiserver-kubelet-client.crt)",
    )
    parser.add_argument(
        "--kubelet-client-key", type=Path, default=None, help="key of --kubelet-client-certificate"
    )
    parser.add_argument(
        "--kubelet-preferred-address-types",
        action=StringSlice,
        default=["InternalIP", "Hostname", "ExternalIP"],
        help="the node address types tried in order to reach a node agent",
    )
    parser.add_argument(
        "--proxy-client-cert-file",
        type=Path,
        default=None,
        help="client certificate the aggregator presents to extension API servers (default: DIR/pki's front-proxy-client)",
    )
    parser.add_argument(
        "--proxy-client-key-file", type=Path, default=None, help="key of --proxy-client-cert-file"
    )
    parser.add_argument(
        "--requestheader-client-ca-file",
        type=Path,
        default=None,
        help="CA of the front proxy's client certificate, published in kube-system/extension-apiserver-authentication "
        "(default: DIR/pki's front-proxy CA)",
    )
    parser.add_argument(
        "--requestheader-allowed-names",
        action=StringSlice,
        default=[],
        help="client certificate common names extension servers accept X-Remote-* headers from (published; "
        "default: front-proxy-client)",
    )
    for dest, fixed in REQUESTHEADER_FIXED.items():
        parser.add_argument(
            "--" + dest.replace("_", "-"),
            action=StringSlice,
            default=list(fixed),
            help=f"the header the aggregator sends; only {fixed[0]} is supported",
        )
    parser.add_argument(
        "--service-account-signing-key-file",
        type=Path,
        default=None,
        help="RSA private key that signs service-account tokens (default DIR/pki/sa.key, made on first start)",
    )
    parser.add_argument(
        "--service-account-key-file",
        type=Path,
        action="append",
        default=[],
        help="PEM file of keys that verify service-account tokens (repeatable; public keys, private keys or "
        "certificates): the signing key's own, and retired ones while their tokens live",
    )


def _authorization_modes(modes: list[str]) -> tuple[str, ...]:
    from controlplane.apiserver.authmodes import parse_modes

    try:
        return parse_modes(",".join(modes))
    except ValueError as err:
        _refuse(f"--authorization-mode: {err}")


def controller_manager_client_argv(args: argparse.Namespace) -> list[str]:
    """The controller manager's client limits, when given: upstream's scale tests run
    kube-controller-manager with a higher --kube-api-qps than its default 20, which holds pod creation
    through ReplicaSets to about 20 pods a second."""
    argv: list[str] = []
    if args.controller_manager_kube_api_qps is not None:
        argv += ["--kube-api-qps", str(args.controller_manager_kube_api_qps)]
    if args.controller_manager_kube_api_burst is not None:
        argv += ["--kube-api-burst", str(args.controller_manager_kube_api_burst)]
    return argv


async def serve(config: ServerConfig, args: argparse.Namespace) -> None:
    """The server until SIGTERM/SIGINT, with its scheduler and controller manager children (unless
    --scheduler=false / --controllers=false)."""
    from controlplane.apiserver.server import CONTROLLER_MANAGER_KUBECONFIG, SCHEDULER_KUBECONFIG, ApiServer
    from controlplane.controllers.cli import node_ipam_argv
    from controlplane.supervisor import component_command, supervise

    server = ApiServer(config)
    await server.start()
    stop = termination_event()
    children = []
    data, pki = config.data_dir, config.data_dir / "pki"
    log_flags = (getattr(args, "v", 0), getattr(args, "logging_format", "text"))
    if not config.insecure_http:  # --insecure-http writes no kubeconfig for children
        # Each child on its own identity, from the kubeconfigs the server wrote (kubeadm's scheduler.conf and
        # controller-manager.conf); the controller manager runs each controller as its service account.
        if args.scheduler:
            command = component_command(
                "scheduler", data / SCHEDULER_KUBECONFIG, args.scheduler_config, *log_flags
            ) + [
                "--secure-port",
                str(args.scheduler_port),
                "--cert-dir",
                str(data / "scheduler"),
                "--client-ca-file",
                str(pki / "ca.crt"),
            ]
            children.append(asyncio.create_task(supervise(command, stop, data / "scheduler.log")))
        if args.controllers:
            command = component_command(
                "controller-manager", data / CONTROLLER_MANAGER_KUBECONFIG, None, *log_flags
            ) + [
                "--secure-port",
                str(args.controller_manager_port),
                "--cert-dir",
                str(data / "controller-manager"),
                "--client-ca-file",
                str(pki / "ca.crt"),
                "--use-service-account-credentials",
                # kubeadm's set: the defaults and the two loops upstream leaves off (bootstrap tokens).
                "--controllers",
                "*,bootstrapsigner,tokencleaner",
                "--cluster-signing-cert-file",
                str(pki / "ca.crt"),
                "--cluster-signing-key-file",
                str(pki / "ca.key"),
                # the token controller signs hand-made kubernetes.io/service-account-token Secrets with it
                "--service-account-private-key-file",
                str(config.service_account_signing_key or pki / "sa.key"),
            ]
            if args.default_local_storage_path is not None:
                command += ["--local-path-root", str(args.default_local_storage_path)]
            command += node_ipam_argv(args) + controller_manager_client_argv(args)
            children.append(asyncio.create_task(supervise(command, stop, data / "controller-manager.log")))
    try:
        await stop.wait()
    finally:
        # SIGTERM to each child (the scheduler releases its lease), SIGKILL after a grace period.
        await asyncio.gather(*children, return_exceptions=True)
        await server.stop()


def _port_range(text: str) -> range:
    from controlplane.apiserver.serviceranges import parse_port_range

    try:
        return parse_port_range(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _watch_cache_size(text: str) -> tuple[str, int]:
    """One --watch-cache-sizes entry, resource[.group]#size (upstream's ParseWatchCacheSizes)."""
    resource, sep, size = text.partition("#")
    if not sep or not resource:
        raise argparse.ArgumentTypeError(f"invalid value of watch cache size: {text}")
    try:
        number = int(size)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid size of watch cache size: {text}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"watch cache size cannot be negative: {text}")
    if number == 0:
        raise argparse.ArgumentTypeError(
            f"{text}: turning a resource's watch cache off is not supported by pykubelet (every watch is "
            "served from the cache)"
        )
    return resource.lower(), number


def _admission_plugins(enabled: list[str], disabled: list[str]) -> list[str]:
    """The plugins turned off, after checking both lists name known plugins and do not overlap."""
    from controlplane.apiserver.kindparts import builtin_table

    known = builtin_table().known_plugins()
    for name in [*enabled, *disabled]:
        if name not in known:
            _refuse(f'admission plugin "{name}" is unknown (known: {", ".join(dict.fromkeys(known))})')
    both = sorted(set(enabled) & set(disabled))
    if both:
        _refuse(f"{','.join(both)} in enable-admission-plugins and disable-admission-plugins overlapped")
    return list(disabled)


def _refuse(message: str) -> NoReturn:
    """A start-up error in the flags' sense: the message and exit 2, as a bad flag value gets."""
    import sys

    print(f"pykubelet server: {message}", file=sys.stderr)
    raise SystemExit(2)


def _service_ranges(args: argparse.Namespace) -> ServiceRanges:
    from controlplane.apiserver.serviceranges import DEFAULT_CLUSTER_IP_RANGE, ServiceRanges, parse_cidr

    try:
        cidr = parse_cidr(args.service_cluster_ip_range or DEFAULT_CLUSTER_IP_RANGE)
    except ValueError as err:
        _refuse(f"--service-cluster-ip-range: {err}")
    return ServiceRanges(cidr, args.service_node_port_range)


def _pair(args: argparse.Namespace, cert: str, key: str) -> tuple[Path, Path] | None:
    """Two file flags that go together, both existing, or neither."""
    first, second = getattr(args, cert), getattr(args, key)
    if (first is None) != (second is None):
        _refuse(f"--{cert.replace('_', '-')} and --{key.replace('_', '-')} go together")
    for flag, path in ((cert, first), (key, second)):
        if path is not None and not path.is_file():
            _refuse(f"--{flag.replace('_', '-')} {path}: no such file")
    return (first, second) if first is not None and second is not None else None


def _kubeadm_settings(args: argparse.Namespace) -> dict[str, object]:
    """ServerConfig's fields from the flags of `add_kubeadm_arguments`, each checked."""
    if not args.allow_privileged:
        _refuse(
            "--allow-privileged=false is not supported by pykubelet (privileged containers are always allowed)"
        )
    for dest, fixed in REQUESTHEADER_FIXED.items():
        if getattr(args, dest) != fixed:
            _refuse(f"--{dest.replace('_', '-')}={','.join(getattr(args, dest))} is not supported by pykubelet "
                    f"(the aggregator sends {fixed[0]})")  # fmt: skip
    unknown = [t for t in args.kubelet_preferred_address_types if t not in ADDRESS_TYPES]
    if unknown or not args.kubelet_preferred_address_types:
        _refuse(
            f"--kubelet-preferred-address-types: {','.join(unknown) or '(empty)'}: want some of {', '.join(ADDRESS_TYPES)}"
        )
    for path in (args.requestheader_client_ca_file, args.service_account_signing_key_file):
        if path is not None and not path.is_file():
            _refuse(f"{path}: no such file")
    if args.service_account_key_file:
        _check_verification_keys(args.service_account_signing_key_file, args.service_account_key_file)
    return {
        "kubelet_client_cert": _pair(args, "kubelet_client_certificate", "kubelet_client_key"),
        "kubelet_address_types": tuple(args.kubelet_preferred_address_types),
        "proxy_client_cert": _pair(args, "proxy_client_cert_file", "proxy_client_key_file"),
        "requestheader_client_ca": args.requestheader_client_ca_file,
        "requestheader_allowed_names": tuple(args.requestheader_allowed_names),
        "service_account_signing_key": args.service_account_signing_key_file,
        "service_account_key_files": tuple(args.service_account_key_file),
    }


def _check_verification_keys(signing: Path | None, keys: list[Path]) -> None:
    """Each --service-account-key-file must hold RSA keys (public, private or in a certificate); with them
    a --service-account-signing-key-file is needed, since a key made in DIR/pki would be in none of them."""
    from controlplane.apiserver.sakeys import load_verification_keys

    if signing is None:
        _refuse("--service-account-key-file needs --service-account-signing-key-file (its private half)")
    for path in keys:
        try:
            load_verification_keys(path)
        except (OSError, ValueError) as err:
            _refuse(f"--service-account-key-file {path}: {err}")


def _tls_files(args: argparse.Namespace) -> None:
    if (args.tls_cert_file is None) != (args.tls_private_key_file is None):
        _refuse("--tls-cert-file and --tls-private-key-file go together")
    for flag in ("tls_cert_file", "tls_private_key_file", "client_ca_file"):
        path = getattr(args, flag)
        if path is not None and not path.is_file():
            _refuse(f"--{flag.replace('_', '-')} {path}: no such file")


def run(args: argparse.Namespace) -> int:
    from controlplane.apiserver.satokens import DEFAULT_ISSUER
    from controlplane.apiserver.server import ServerConfig
    from kubeclient.tlsciphers import openssl_ciphers

    _tls_files(args)
    try:
        ciphers = openssl_ciphers(args.tls_cipher_suites)
    except ValueError as err:
        _refuse(f"--tls-cipher-suites: {err}")
    config = ServerConfig(
        data_dir=args.data_dir,
        port=args.port,
        bind=args.bind_address,
        advertise=args.advertise_address,
        token_file=args.token_auth_file,
        insecure_http=args.insecure_http,
        watch_window=args.watch_cache_size,
        watch_windows=dict(args.watch_cache_sizes),
        compact_interval=args.etcd_compaction_interval,
        event_ttl=args.event_ttl,
        tls_cert_file=args.tls_cert_file,
        tls_private_key_file=args.tls_private_key_file,
        client_ca_file=args.client_ca_file,
        tls_ciphers=ciphers,
        service_ranges=_service_ranges(args),
        **_kubeadm_settings(args),  # type: ignore[arg-type]
        extra_sans=args.tls_san,
        service_account_issuers=args.service_account_issuer or [DEFAULT_ISSUER],
        api_audiences=[a for a in args.api_audiences if a],
        max_token_expiration=int(args.service_account_max_token_expiration),
        extend_token_expiration=args.service_account_extend_token_expiration,
        jwks_uri=args.service_account_jwks_uri,
        disable_admission_plugins=_admission_plugins(
            args.enable_admission_plugins, args.disable_admission_plugins
        ),
        pod_security=_pod_security(args.admission_control_config_file),
        encryption=_encryption(args.encryption_provider_config),
        authentication=_authentication(args.authentication_config),
        authentication_file=args.authentication_config,
        token_webhook=_token_webhook(args.authentication_token_webhook_config_file),
        token_webhook_cache_ttl=float(args.authentication_token_webhook_cache_ttl),
        token_webhook_version=args.authentication_token_webhook_version,
        authorization_modes=_authorization_modes(args.authorization_mode),
        anonymous_auth=args.anonymous_auth,
        enable_bootstrap_token_auth=args.enable_bootstrap_token_auth,
        kubelet_certificate_authority=args.kubelet_certificate_authority,
        etcd=_etcd_config(args),
        endpoint_reconciler=args.endpoint_reconciler_type,
        max_requests_inflight=args.max_requests_inflight,
        max_mutating_requests_inflight=args.max_mutating_requests_inflight,
        enable_priority_and_fairness=args.enable_priority_and_fairness,
        audit=_audit_options(args),
    )
    from controlplane.storage import StoreUnavailableError
    from controlplane.storage.encryption import EncryptionError

    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(serve(config, args))
    except StoreUnavailableError as err:
        raise SystemExit(f"pykubelet server: {err}") from None
    except EncryptionError as err:  # stored data no configured key opens
        raise SystemExit(f"pykubelet server: --encryption-provider-config: {err}") from None
    return 0


def _pod_security(path: Path | None) -> PodSecurityConfig:
    """The AdmissionConfiguration's PodSecurity settings, checked now: a bad field stops the start."""
    from controlplane.apiserver.podsecurity import ConfigError, PodSecurityConfig, load

    if path is None:
        return PodSecurityConfig()
    try:
        return load(path)
    except ConfigError as err:
        raise SystemExit(f"pykubelet server: --admission-control-config-file: {err}") from None


def _token_webhook(path: Path | None) -> Path | None:
    """The webhook's kubeconfig, read now: one that cannot be used stops the start."""
    from kubeclient.config import ConfigError, load_kubeconfig

    if path is not None:
        try:
            load_kubeconfig(path)
        except (ConfigError, OSError, ValueError) as err:
            _refuse(f"--authentication-token-webhook-config-file {path}: {err}")
    return path


def _authentication(path: Path | None) -> AuthenticationConfig | None:
    """The AuthenticationConfiguration, checked now (every CEL expression compiled): a bad field stops the start."""
    from controlplane.apiserver.authnconfig import AuthenticationConfigError, load

    if path is None:
        return None
    try:
        return load(path)
    except AuthenticationConfigError as err:
        raise SystemExit(f"pykubelet server: --authentication-config: {err}") from None


def _encryption(path: Path | None) -> EncryptionConfig | None:
    """The EncryptionConfiguration, checked now: a bad field stops the start."""
    from controlplane.apiserver.encryptionconfig import EncryptionConfigError, load

    if path is None:
        return None
    try:
        return load(path)
    except EncryptionConfigError as err:
        raise SystemExit(f"pykubelet server: --encryption-provider-config: {err}") from None


def _audit_options(args: argparse.Namespace) -> AuditOptions:
    """The audit flags, the policy file checked now so a bad one stops the start with upstream's text."""
    from controlplane.apiserver.audit import AuditOptions, PolicyError, load_options

    options = AuditOptions(
        args.audit_policy_file,
        args.audit_log_path,
        args.audit_log_maxsize,
        args.audit_log_maxbackup,
        args.audit_log_maxage,
        args.audit_log_mode,
        args.audit_webhook_config_file,
        args.audit_webhook_mode,
        float(args.audit_webhook_initial_backoff),
        args.audit_log_truncate_max_event_size if args.audit_log_truncate_enabled else 0,
        args.audit_webhook_truncate_max_event_size if args.audit_webhook_truncate_enabled else 0,
    )
    if options.webhook_config is not None:
        from kubeclient.config import ConfigError, load_kubeconfig

        try:
            load_kubeconfig(options.webhook_config)
        except (ConfigError, OSError, ValueError) as err:
            raise SystemExit(
                f"pykubelet server: --audit-webhook-config-file {options.webhook_config}: {err}"
            ) from None
    try:
        policy = load_options(options)
    except PolicyError as err:
        raise SystemExit(f"pykubelet server: {err}") from None
    if policy is not None and options.log_path and options.log_path != "-":
        from controlplane.apiserver.audit.logfile import LogFile, Rotation

        log = LogFile(options.log_path, Rotation())
        try:  # upstream's ensureLogFile: the directory and the file can be made before anything serves
            log.open()
        except OSError as err:
            raise SystemExit(
                f"pykubelet server: --audit-log-path {options.log_path}: {err.strerror or err}"
            ) from None
        log.close()
    return options


def _etcd_config(args: argparse.Namespace) -> EtcdConfig | None:
    """The etcd store's settings, or None for SQLite; files that are named must exist."""
    from controlplane.storage.etcd import EtcdConfig, parse_servers

    if not args.etcd_servers:
        return None
    try:
        servers = parse_servers(args.etcd_servers)
    except ValueError as err:
        raise SystemExit(f"pykubelet server: {err}") from None
    for flag in ("etcd_cafile", "etcd_certfile", "etcd_keyfile"):
        path = getattr(args, flag)
        if path is not None and not path.is_file():
            raise SystemExit(f"pykubelet server: --{flag.replace('_', '-')} {path}: no such file")
    if (args.etcd_certfile is None) != (args.etcd_keyfile is None):
        raise SystemExit("pykubelet server: --etcd-certfile and --etcd-keyfile go together")
    return EtcdConfig(servers, args.etcd_cafile, args.etcd_certfile, args.etcd_keyfile, args.etcd_prefix)
