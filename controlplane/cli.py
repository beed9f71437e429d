"""`pykubelet server`: run the project's own Kubernetes API server, and the components it supervises.

This is the control plane's composition root: the API server, the scheduler and the controllers to come
know nothing of each other (an import-linter contract says so); here the server is started and each
component is run as a supervised child process that talks to it through the API, as upstream's
components talk to kube-apiserver.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from kubeclient.eventloop import loop_factory, termination_event

if TYPE_CHECKING:
    from controlplane.apiserver.audit import AuditOptions
    from controlplane.apiserver.server import ServerConfig
    from controlplane.storage.etcd import EtcdConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from controlplane.controllers.cli import add_node_ipam_arguments

    add_node_ipam_arguments(parser)  # handed to the controller manager, as kubeadm's podSubnet is
    parser.add_argument(
        "--data-dir", required=True, type=Path, help="state, PKI and admin.kubeconfig live here"
    )
    parser.add_argument("--port", type=int, default=6443, help="HTTPS port (0 picks a free one)")
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
        "--compact-interval", type=float, default=300.0, help="seconds between history compactions"
    )
    parser.add_argument("--event-ttl", type=float, default=3600.0, help="seconds an idle event is kept")
    parser.add_argument(
        "--anonymous-auth",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="requests without credentials are system:anonymous (default; --no-anonymous-auth: 401)",
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
        default=("Node", "RBAC"),
        type=_authorization_modes,
        help="ordered authorizers: Node, RBAC, AlwaysAllow (comma-separated; default Node,RBAC)",
    )
    parser.add_argument(
        "--scheduler",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the scheduler as a child process (--no-scheduler: another scheduler binds pods)",
    )
    parser.add_argument("--scheduler-config", type=Path, default=None, help="KubeSchedulerConfiguration file")
    parser.add_argument(
        "--controllers",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the controller manager as a child process (--no-controllers: leave the loops to another)",
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
        "--service-account-issuer",
        action="append",
        default=[],
        help="issuer of service-account tokens (repeat to accept more; the first signs)",
    )
    parser.add_argument(
        "--api-audiences", default="", help="comma-separated audiences of the API (default: the issuers)"
    )
    parser.add_argument(
        "--service-account-max-token-expiration",
        type=_duration,
        default=0,
        help="longest lifetime a TokenRequest gets, e.g. 24h (default: no limit)",
    )
    parser.add_argument(
        "--service-account-extend-token-expiration",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="issue the admission plugin's 3607 s pod tokens for a year, flagged stale after 3607 s",
    )
    parser.add_argument(
        "--service-account-jwks-uri", default="", help="jwks_uri of the OpenID discovery document"
    )
    parser.add_argument(
        "--disable-admission-plugins",
        default="",
        help="comma-separated admission plugins to turn off (e.g. ServiceAccount)",
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
        type=lambda v: v.lower() in ("true", "1", "yes"),
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
    parser.add_argument("--insecure-http", action="store_true", help="serve plain HTTP (benchmarks only)")
    parser.add_argument("-v", "--verbose", action="store_true")


def _authorization_modes(text: str) -> tuple[str, ...]:
    from controlplane.apiserver.authmodes import parse_modes

    try:
        return parse_modes(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


async def serve(config: ServerConfig, args: argparse.Namespace) -> None:
    """The server until SIGTERM/SIGINT, with its scheduler and controller manager children (unless
    --no-scheduler / --no-controllers)."""
    from controlplane.apiserver.server import CONTROLLER_MANAGER_KUBECONFIG, SCHEDULER_KUBECONFIG, ApiServer
    from controlplane.controllers.cli import node_ipam_argv
    from controlplane.supervisor import component_command, supervise

    server = ApiServer(config)
    await server.start()
    stop = termination_event()
    children = []
    data, pki = config.data_dir, config.data_dir / "pki"
    if not config.insecure_http:  # --insecure-http writes no kubeconfig for children
        # Each child on its own identity, from the kubeconfigs the server wrote (kubeadm's scheduler.conf and
        # controller-manager.conf); the controller manager runs each controller as its service account.
        if args.scheduler:
            command = component_command("scheduler", data / SCHEDULER_KUBECONFIG, args.scheduler_config) + [
                "--secure-port",
                str(args.scheduler_port),
                "--cert-dir",
                str(data / "scheduler"),
                "--client-ca-file",
                str(pki / "ca.crt"),
            ]
            children.append(asyncio.create_task(supervise(command, stop, data / "scheduler.log")))
        if args.controllers:
            command = component_command("controller-manager", data / CONTROLLER_MANAGER_KUBECONFIG) + [
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
            ]
            if args.default_local_storage_path is not None:
                command += ["--local-path-root", str(args.default_local_storage_path)]
            command += node_ipam_argv(args)
            children.append(asyncio.create_task(supervise(command, stop, data / "controller-manager.log")))
    try:
        await stop.wait()
    finally:
        # SIGTERM to each child (the scheduler releases its lease), SIGKILL after a grace period.
        await asyncio.gather(*children, return_exceptions=True)
        await server.stop()


def _duration(text: str) -> float:
    from kubeclient.duration import parse_duration

    try:
        return parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _admission_plugins(text: str) -> list[str]:
    from controlplane.apiserver.admission import known_plugins

    names = [n.strip() for n in text.split(",") if n.strip()]
    known = known_plugins()
    for name in names:
        if name not in known:
            raise SystemExit(f'admission plugin "{name}" is unknown (known: {", ".join(known)})')
    return names


def run(args: argparse.Namespace) -> int:
    from controlplane.apiserver.satokens import DEFAULT_ISSUER
    from controlplane.apiserver.server import ServerConfig

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    config = ServerConfig(
        data_dir=args.data_dir,
        port=args.port,
        bind=args.bind_address,
        advertise=args.advertise_address,
        token_file=args.token_auth_file,
        insecure_http=args.insecure_http,
        watch_window=args.watch_cache_size,
        compact_interval=args.compact_interval,
        event_ttl=args.event_ttl,
        extra_sans=args.tls_san,
        service_account_issuers=args.service_account_issuer or [DEFAULT_ISSUER],
        api_audiences=[a for a in args.api_audiences.split(",") if a],
        max_token_expiration=int(args.service_account_max_token_expiration),
        extend_token_expiration=args.service_account_extend_token_expiration,
        jwks_uri=args.service_account_jwks_uri,
        disable_admission_plugins=_admission_plugins(args.disable_admission_plugins),
        authorization_modes=args.authorization_mode,
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

    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(serve(config, args))
    except StoreUnavailableError as err:
        raise SystemExit(f"pykubelet server: {err}") from None
    return 0


def _audit_options(args: argparse.Namespace) -> AuditOptions:
    """The audit flags, the policy file checked now so a bad one stops the start with upstream's text."""
    from controlplane.apiserver.audit import AuditOptions, PolicyError, load_options

    options = AuditOptions(
        args.audit_policy_file,
        args.audit_log_path,
        args.audit_log_maxsize,
        args.audit_log_maxbackup,
        args.audit_log_maxage,
    )
    try:
        policy = load_options(options)
    except PolicyError as err:
        raise SystemExit(f"pykubelet server: {err}") from None
    if policy is not None and options.log_path != "-":
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
