"""A whole one-node stack for a test module: on a leased bridge and pod /24, stopped at the end with
nothing left on the host (its own state dir, bridge, pod CIDR and nft table checked by a leak scope);
a fresh namespace in it for a test."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pykubelet.rig.leaks import Scope
from pykubelet.rig.netlease import lease_network


@contextmanager
def leased_stack(state_dir: Path, tag: str, node_name: str, **options: Any) -> Iterator[Any]:
    """Stack(StackConfig(state_dir, node_name, leased network, **options)), started; yields the Stack."""
    from pykubelet.rig.stack import Stack, StackConfig, proxy_table

    with lease_network(tag) as net:
        config = StackConfig(
            state_dir=state_dir, node_name=node_name, bridge=net.bridge, pod_cidr=net.pod_cidr, **options
        )
        scope = Scope.of(
            config.state_dir,
            bridges=[net.bridge],
            pod_cidrs=[net.pod_cidr],
            nft_tables=[f"ip {proxy_table(net.bridge)}"],
        )
        stack = Stack(config)
        stack.start()
        try:
            yield stack
        finally:
            problems = stack.stop()
            assert not problems, problems
            assert not scope.leaked()


def exists(read: Any) -> bool:
    """Whether `read()` finds its object (the official client's 404 is False; other errors raise)."""
    from kubernetes.client.exceptions import ApiException

    try:
        read()
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


@contextmanager
def fresh_namespace(kube: Any, prefix: str) -> Iterator[str]:
    """A namespace `<prefix>-<random>` with its default ServiceAccount made (pods may be created), deleted
    at the end."""
    import uuid

    from e2e.waiting import wait_for

    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    kube.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: exists(lambda: kube.read_namespaced_service_account("default", name)), timeout=30)
    try:
        yield name
    finally:
        kube.delete_namespace(name)


def run_pykubelet(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    """`pykubelet ARGS` with this interpreter, its output captured (a test reads its exit and stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "pykubelet", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def up_cluster(
    state: Path, lease: Any, node_name: str, nodes: int, *options: str, timeout: float = 400
) -> tuple[subprocess.CompletedProcess[str], Scope, list[str]]:
    """`pykubelet up --nodes N` on a leased cluster network (the node IPAM's range) with `options`: its
    result, the leak scope to check after down, and the nodes' bridges."""
    from pykubelet.rig.nodes import node_bridge
    from pykubelet.rig.process import free_port
    from pykubelet.rig.stack import proxy_table

    bridges = [lease.bridge, *(node_bridge(lease.bridge, i) for i in range(2, nodes + 1))]
    scope = Scope.of(
        state, bridges=bridges, pod_cidrs=[lease.pod_cidr], nft_tables=[f"ip {proxy_table(lease.bridge)}"]
    )
    up = run_pykubelet(
        "up", "--state-dir", str(state), "--api-port", str(free_port()), "--node-name", node_name,
        "--nodes", str(nodes), "--cluster-cidr", lease.pod_cidr, "--bridge", lease.bridge, "--no-example",
        *options, timeout=timeout,
    )  # fmt: skip
    return up, scope, bridges
