"""The ingress controller as the stack runs it: ingress-nginx's namespace, ServiceAccount and RBAC, the
`nginx` IngressClass marked default, a client certificate for the controller's account (as the
ServiceAccount's token would be in a pod), and `pykubelet ingress-controller` in the host's network
namespace (so nginx reaches the pods' addresses) on the node's address, its nginx in
`<state>/ingress/nginx` (found there and stopped by `pykubelet down`).

Ports: 80 and 443 where both are free on that address (`pykubelet up` asks for them), else free ports
picked as every rig daemon's are; the stack records them (`ingress_ports`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from controlplane.apiserver.serviceranges import DEFAULT_NODE_PORT_RANGE
from pykubelet.rig.process import Daemon, bindable, free_port

STATE = "ingress"
GATEWAY_CLASS = "pykubelet"  # controllerName pykubelet.io/gateway-controller
NODE_PORTS = (
    DEFAULT_NODE_PORT_RANGE  # the API server's --service-node-port-range: the stack keeps its default
)


def pick_ports(address: str, wanted: tuple[int, int] | None) -> tuple[int, int]:
    """`wanted` when both are free on `address`, else two free ports."""
    if wanted is not None and all(bindable(address, p) for p in wanted):
        return wanted
    http = free_port(address)
    https = free_port(address)
    while https == http:
        https = free_port(address)
    return http, https


def controller_argv(kubeconfig: Path, state: Path, address: str, ports: tuple[int, int]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pykubelet",
        "ingress-controller",
        "--kubeconfig",
        str(kubeconfig),
        "--state-dir",
        str(state / "nginx"),
        "--bind-address",
        address,
        "--http-port",
        str(ports[0]),
        "--https-port",
        str(ports[1]),
        # Its GatewayClass, made once a user installs the Gateway API CRDs.
        "--gateway-class",
        GATEWAY_CLASS,
        # The Services' node ports: the service proxy DNATs them on every local address, so a Gateway
        # listener there would lose its connections to a NodePort Service (PortUnavailable instead).
        "--reserved-ports",
        NODE_PORTS,
    ]


def start_controller(
    state_dir: Path,
    apply: Callable[[dict], dict],
    client_kubeconfig: Callable[[str, tuple[str, ...], Path], Path],
    address: str,
    ports: tuple[int, int],
    on_spawn: Callable[[int], None] | None = None,
    timeout: float = 60.0,
) -> Daemon:
    """Install the controller's objects, start it and wait until its nginx runs."""
    from ingresscontroller import manifest

    state = state_dir / STATE
    (state / "nginx").mkdir(parents=True, exist_ok=True)
    for obj in [*manifest.rbac(), manifest.ingress_class(default=True)]:
        apply(obj)
    kubeconfig = client_kubeconfig(manifest.USER, manifest.GROUPS, state / "kubeconfig")
    daemon = Daemon(
        "pykubelet ingress-controller",
        controller_argv(kubeconfig, state, address, ports),
        state / "ingress-controller.log",
        on_spawn=on_spawn,
    )
    pid_file = state / "nginx" / "nginx.pid"
    daemon.start(pid_file.exists, timeout=timeout, interval=0.2)
    return daemon
