"""The options both subcommands share and the client they open: any kubeconfig (--kubeconfig, else
$KUBECONFIG's list merged as kubectl merges it, else ~/.kube/config), its context's namespace unless -n
says otherwise; exec credential plugins (EKS, GKE, AKS, OIDC) through the client library."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from journey.kinds import Kind, resolve
from kubeclient.client import KubeClient
from kubeclient.config import ClusterConfig, ConfigError, load_kubeconfig


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target", metavar="KIND/NAME", help="e.g. deployment/web, pod/web-abc, svc/web, job/x"
    )
    parser.add_argument(
        "-n", "--namespace", default=None, help="the namespace (default: the context's, else default)"
    )
    parser.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config"),
        help="the kubeconfig to use (default $KUBECONFIG, else ~/.kube/config)",
    )
    parser.add_argument("--context", default=None, help="the kubeconfig context (default: the current one)")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def open_client(args: argparse.Namespace) -> tuple[KubeClient, ClusterConfig]:
    config = load_kubeconfig(args.kubeconfig, args.context)
    return KubeClient(config, component="pykubelet-user", request_timeout=10.0, max_attempts=2), config


def target(args: argparse.Namespace) -> tuple[Kind, str, str]:
    kind, name = resolve(args.target)
    return kind, name, args.namespace or _context_namespace(args) or "default"


def _context_namespace(args: argparse.Namespace) -> str | None:
    try:
        return load_kubeconfig(args.kubeconfig, args.context).namespace
    except ConfigError:
        return None
