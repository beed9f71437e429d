"""`pykubelet up`: install what is missing, start the single-machine cluster, run the sample pod.

The daemons keep running after this command returns (each in its own session, recorded in
<state-dir>/stack.json as each starts); `pykubelet down` stops them and cleans up. SIGTERM or SIGHUP
(a closed terminal) while the stack is starting stops what was started; a SIGKILL leaves it to
`pykubelet down`, which finds it from the partial record and the state dir.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from importlib import resources
from pathlib import Path

import yaml

from agent.nodelabels import NodeLabelError
from kubeclient.flags import go_duration
from kubeclient.hostaddr import default_route_ip
from kubeclient.kubeletlabels import ZONE_LABEL
from pykubelet.progress import Progress
from pykubelet.rig.install import ensure_packages
from pykubelet.rig.nodelabels import checked_labels, parse_zones
from pykubelet.rig.stack import (
    DEFAULT_BRIDGE,
    DEFAULT_POD_CIDR,
    DEFAULT_STATE_DIR,
    Stack,
    StackConfig,
    api_call,
    default_node_name,
)
from pykubelet.rig.supervisor import SUPERVISOR_LOG, start_supervisor
from pykubelet.rig.sweep import looks_like_a_stack, supervisors_for, sweep

DEFAULT_CLUSTER_CIDR = "10.244.0.0/16"  # kubeadm's podSubnet in most guides (flannel's default)
INSTALL_LOG = "install.log"  # apt's output, when packages were missing
# The sample pod, a file of this package (installed with it).
EXAMPLE_POD = resources.files("pykubelet") / "sample-pod.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="where everything lives")
    parser.add_argument("--node-name", default=default_node_name(), help="the node's name")
    parser.add_argument(
        "--pod-cidr",
        default=None,
        help=f"the (one) node's pod network, without the node IPAM (default: {DEFAULT_POD_CIDR} from "
        f"the IPAM's --cluster-cidr)",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="run this many nodes on this machine, each with its own containerd, root dir, kubelet port, "
        "bridge and pod CIDR, nodes 2..N joined by TLS bootstrap as <node-name>-2 ... <node-name>-N",
    )
    parser.add_argument(
        "--cluster-cidr",
        default=None,
        help=f"the node IPAM's range: each node gets a /24 of it (default {DEFAULT_CLUSTER_CIDR}; "
        "off when only --pod-cidr is given)",
    )
    parser.add_argument(
        "--zones",
        default="",
        metavar="ZONE,ZONE,...",
        help="deal these zones out to the nodes round-robin as their topology.kubernetes.io/zone label "
        "(node 1 the first, node 2 the second, ...), set by each node's agent at registration",
    )
    parser.add_argument(
        "--node-labels",
        default="",
        metavar="KEY=VALUE,...",
        help="labels every node registers with (its agent's --node-labels; of the kubernetes.io and "
        "k8s.io domains only those a kubelet may set)",
    )
    parser.add_argument("--bridge", default=DEFAULT_BRIDGE, help="the pod network's bridge")
    parser.add_argument("--api-port", type=int, default=6443, help="the API server's HTTPS port")
    parser.add_argument(
        "--store",
        choices=("sqlite", "etcd"),
        default="sqlite",
        help="where the API server stores the cluster: SQLite in its data dir, or a local etcd "
        "(with its own data dir and certificates under <state-dir>/etcd) that up starts and "
        "down stops",
    )
    parser.add_argument(
        "--etcd-members",
        type=int,
        default=1,
        help="with --store etcd: run a cluster of this many etcd members on this machine (failure tests)",
    )
    parser.add_argument(
        "--apiservers",
        type=int,
        default=1,
        help="with --store etcd: this many API servers on the one etcd, each on its own loopback "
        "address (127.0.0.N) and --api-port; every client is given all of them",
    )
    parser.add_argument("--no-example", action="store_true", help="do not run the sample pod")
    parser.add_argument(
        "--timeout", type=go_duration, default="3m0s", help="how long to wait for the sample pod"
    )


# The signal that asked `up` to stop, if one did. The handler raises SystemExit where the main thread is,
# which unwinds Stack.start (it stops what it started); but a handler that runs inside a finalizer
# (the official client's ApiClient.__del__ joins its thread pool, which takes a while) has its exception
# printed and dropped by CPython, and `up` would carry on starting the stack and exit 0. So the signal is
# also remembered, and checked once the stack is up.
_TERMINATED: list[int] = []


def _exit_on(signum: int, _frame: object) -> None:
    _TERMINATED.append(signum)
    raise SystemExit(128 + signum)  # unwinds Stack.start, which stops what it started


def _stop_if_terminated() -> None:
    """Called as each stage begins: a signal whose exception was lost stops `up` there."""
    if _TERMINATED:
        raise SystemExit(128 + _TERMINATED[0])


def _start(stack: Stack) -> None:
    """Stack.start, which stops what it started whatever interrupts it. The signal's SystemExit can come
    out wrapped in a library's own error (pydantic-core turns one raised while it builds a validator
    into a SchemaError), so once a signal arrived any failure exits as the signal asks (128+N)."""
    try:
        stack.start()
    except BaseException:
        if _TERMINATED:
            raise SystemExit(128 + _TERMINATED[0]) from None
        raise


def run(args: argparse.Namespace) -> int:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on)
    if args.store != "etcd" and (args.etcd_members > 1 or args.apiservers > 1):
        raise SystemExit("pykubelet up: --etcd-members and --apiservers need --store etcd")
    if args.etcd_members < 1 or args.apiservers < 1:
        raise SystemExit("pykubelet up: --etcd-members and --apiservers are at least 1")
    if args.nodes < 1:
        raise SystemExit("pykubelet up: --nodes is at least 1")
    if args.nodes > 1 and args.pod_cidr is not None:
        raise SystemExit(
            "pykubelet up: --pod-cidr names one node's range; with --nodes each node's comes from --cluster-cidr"
        )
    try:
        zones = parse_zones(args.zones)
        node_labels = checked_labels(args.node_labels, zones)
    except NodeLabelError as err:
        raise SystemExit(f"pykubelet up: {err}") from None
    # The node IPAM unless one node's range is given by hand (as before it existed).
    cluster_cidr = args.cluster_cidr or ("" if args.pod_cidr is not None else DEFAULT_CLUSTER_CIDR)
    state_dir = args.state_dir.resolve()
    progress = Progress(sys.stderr, before_stage=_stop_if_terminated)
    print(f"pykubelet: starting the cluster in {state_dir}", file=sys.stderr)
    stack: Stack | None = None
    started = False  # Stack.start stops what it started when interrupted; after it, this command does
    try:
        with progress.stage("packages", state_dir / INSTALL_LOG):
            ensure_packages(log_path=state_dir / INSTALL_LOG)
        if looks_like_a_stack(state_dir):
            progress.note(f"stopping what an earlier stack left in {state_dir} first")
            for problem in sweep(state_dir):
                progress.note(problem)
        stack = Stack(
            StackConfig(
                state_dir=state_dir,
                node_name=args.node_name,
                pod_cidr=args.pod_cidr or DEFAULT_POD_CIDR,
                bridge=args.bridge,
                nodes=args.nodes,
                cluster_cidr=cluster_cidr,
                node_labels=node_labels,
                zones=zones,
                api_port=args.api_port,
                store=args.store,
                etcd_members=args.etcd_members,
                apiservers=args.apiservers,
                ingress_ports=(80, 443),
                ingress_address=default_route_ip(),  # users' clients and pods reach the node's address
                csi_driver=True,
            ),
            progress,
        )
        _start(stack)
        started = True
        with progress.stage("supervisor", state_dir / SUPERVISOR_LOG):
            start_supervisor(state_dir, stack.supervised())
        for index, name in enumerate(stack.node_names, start=1):
            zone = stack.config.labels_of(index).get(ZONE_LABEL)
            where = f", zone {zone}" if zone else ""
            progress.note(f"node {name} is Ready (pod CIDR {stack.pod_cidr_of(name)}{where})")
        http, https = stack.ingress_ports
        progress.note(
            f"ingress controller (IngressClass nginx, the default) on {stack.ingress_address}:{http} and :{https}"
        )
        progress.note(_csi_note(stack))
        if not args.no_example:
            with progress.stage(
                "sample pod", lambda: stack.agent.log_path if stack and stack.agent else None
            ):
                pod = run_example(stack, args.timeout)
            progress.note(f"pod {pod}")
        _stop_if_terminated()
    except (KeyboardInterrupt, SystemExit) as stop:
        # A signal (or Ctrl-C) anywhere, also between stages: said where, and the stack stopped.
        progress.interrupted(stop)
        if started and stack is not None:
            for supervisor in supervisors_for(state_dir):  # it would start again what stop() stops
                supervisor.kill()
            stack.stop()
        raise
    except Exception as err:
        if not progress.reported(err):
            raise
        if progress.failed == "sample pod" and stack is not None:
            progress.note(f"the cluster stays up to look into it: export KUBECONFIG={stack.kubeconfig}")
        return 1  # the stage said what failed, with its log
    print(f"export KUBECONFIG={stack.kubeconfig}")
    print("kubectl get nodes,pods -o wide     # pykubelet down   stops everything", file=sys.stderr)
    return 0


def _csi_note(stack: Stack) -> str:
    from pykubelet.rig.csi import CAPACITY, CLASS, DEFAULT_CLASS, DRIVER

    classes = stack.core_api().api_client
    _, found = api_call(classes, "GET", f"/apis/storage.k8s.io/v1/storageclasses/{CLASS}")
    default = ((found.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS) == "true"
    why = "the default: no other class is" if default else "local-path stays the default"
    return (
        f"CSI driver {DRIVER} with StorageClass {CLASS} (WaitForFirstConsumer, expandable, a {CAPACITY} pool "
        f"its CSIStorageCapacity objects offer the scheduler; {why})"
    )


def run_example(stack: Stack, timeout: float) -> str:
    """Create the sample pod (the scheduler binds it to our node) and wait until it is Running and its
    readiness probe has passed; says so (`namespace/name is Running and Ready at IP`)."""
    from kubernetes.client.exceptions import ApiException

    core = stack.core_api()
    manifest = yaml.safe_load(EXAMPLE_POD.read_text())
    name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    try:
        core.create_namespaced_pod(namespace, manifest)
    except ApiException as err:
        if err.status != 409:
            raise
    deadline = time.monotonic() + timeout
    phase = "?"
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, namespace)
        phase = pod.status.phase
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        if phase == "Running" and ready:
            return f"{namespace}/{name} is Running and Ready at {pod.status.pod_ip}"
        time.sleep(0.5)
    raise TimeoutError(f"pod {namespace}/{name} still {phase} after {timeout:.0f} s")
