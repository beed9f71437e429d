"""The `pykubelet` command: one entry point, one subcommand per component.

Each subcommand lives in the package that owns it and is imported only when chosen, so that
`pykubelet version` stays instant and the agent never loads the control plane's code (or the reverse).
A subcommand module provides `add_arguments(parser)` and `run(args) -> int`; its parser is a
`kubeclient.flags.FlagParser` (upstream's Go flag syntax), and every command that does not take `-v` for
itself gets klog's `-v` and `--logging-format`, set up by `kubeclient.logsetup` before it runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence

from kubeclient import logsetup
from kubeclient.flags import FlagParser
from pykubelet import KUBERNETES_VERSION, __version__

# name -> (module, one-line help). Modules are imported lazily.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "version": ("pykubelet.cli", "print the pykubelet and Kubernetes versions"),
    "agent": ("agent.cli", "run the node agent (the kubelet)"),
    "server": ("controlplane.cli", "run the project's own Kubernetes API server"),
    "scheduler": ("controlplane.scheduler.cli", "run the scheduler against an API server"),
    "controller-manager": (
        "controlplane.controllers.cli",
        "run the controller manager against an API server",
    ),
    "proxy": ("serviceproxy.cli", "run the service proxy (kube-proxy's nftables mode) against an API server"),
    "netpolicy": (
        "netpolicy.cli",
        "run the network-policy agent (NetworkPolicies enforced with nftables for this host's pods)",
    ),
    "dns": ("clusterdns.cli", "run the cluster DNS server (cluster.local from the API, the rest forwarded)"),
    "metrics-server": (
        "metricsserver.cli",
        "run the metrics server (metrics.k8s.io from the kubelets' /metrics/resource) against an API server",
    ),
    "simulate": (
        "nodesim.cli",
        "simulate nodes and their pods against any API server (kwok's idea): Node objects, Leases, pod lifecycles",
    ),
    "ingress-controller": (
        "ingresscontroller.cli",
        "run the ingress controller (Ingresses of its IngressClass served by nginx) against an API server",
    ),
    "up": ("pykubelet.up", "install what is missing and start the single-machine cluster"),
    "down": ("pykubelet.down", "stop what `up` started and clean up"),
    "restart": (
        "pykubelet.restart",
        "restart one daemon of the stack `up` started (its supervisor starts it again)",
    ),
    "supervise": (
        "pykubelet.supervise",
        "keep the daemons `up` started running (up starts it; down stops it)",
    ),
    "token": ("pykubelet.token", "create, list and delete bootstrap tokens (kubeadm token's shapes)"),
    "join": (
        "pykubelet.join",
        "join this host to a cluster as a node (kubeadm join's discovery and TLS bootstrap)",
    ),
    "reset": ("pykubelet.reset", "undo `join` on this host, leaving nothing"),
    "trace": (
        "journey.trace_cli",
        "show one object's journey through the components, with writers and timings",
    ),
    "diagnose": ("journey.diagnose_cli", "name the first boundary where a workload stopped making progress"),
    "etcd-snapshot": (
        "pykubelet.etcdsnapshot",
        "save, list and restore snapshots of the cluster's store (etcd or SQLite)",
    ),
    "migrate-store": ("controlplane.migratestore", "copy a cluster's objects from SQLite to etcd"),
    "completion": ("pykubelet.completion", "print a shell completion script (bash or zsh)"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--short", action="store_true", help="print only the pykubelet version")


def run(args: argparse.Namespace) -> int:
    if args.short:
        print(__version__)
    else:
        print(f"pykubelet {__version__} (Kubernetes {KUBERNETES_VERSION} behaviour)")
    return 0


def _load(name: str):
    module_name, _ = SUBCOMMANDS[name]
    return importlib.import_module(module_name)


def command_parser(name: str) -> tuple[object, FlagParser]:
    """The subcommand's module and its parser, with the logging flags unless it takes -v for itself."""
    module = _load(name)
    parser = FlagParser(prog=f"pykubelet {name}", description=SUBCOMMANDS[name][1])
    module.add_arguments(parser)
    if name not in ("version", "completion") and "-v" not in parser._option_string_actions:
        logsetup.add_flags(parser)
    return module, parser


def main(argv: Sequence[str] | None = None) -> int:
    # No component runs gRPC in a forked child (every child execs at once), and gRPC's at-fork handlers,
    # which run on every fork (uvloop's spawn forks), can break the open TLS streams of the process's
    # etcd or CRI connections (grpc/grpc#28557): off, before gRPC is first imported.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="pykubelet", description="A Kubernetes node agent in Python.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    # Parse only the command name first so the chosen module alone gets imported.
    if not argv or argv[0] not in SUBCOMMANDS:
        parser.parse_args(argv or ["--help"])
        return 2
    name = argv[0]
    module, cmd_parser = command_parser(name)
    args = cmd_parser.parse_args(argv[1:])
    if hasattr(args, "logging_format"):
        logsetup.configure_from_args(args)
    _hear_interrupts()
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        return 130


def _hear_interrupts() -> None:
    """Ctrl-C (SIGINT) ends every command, also one started with SIGINT ignored (a shell starts background
    jobs so, and the ignore is inherited): Python then installs no KeyboardInterrupt handler and asyncio.run
    none either, so `trace --follow` could not be stopped. Go programs such as kubectl listen to SIGINT
    whatever they inherited (signal.Notify installs the handler); so do ours."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


if __name__ == "__main__":
    sys.exit(main())
