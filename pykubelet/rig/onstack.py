"""One whole single-machine stack for one job (a benchmark run), started and stopped by the same owner.

The stack lives in a temporary folder (under $TMPDIR, so a test that runs a benchmark keeps it inside
its own), on a bridge and pod CIDR leased for it, and is checked after its teardown like any test
session's: anything it left is an error, not a footnote.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from pykubelet.rig.leaks import Scope
from pykubelet.rig.netlease import lease_cluster_network, lease_network
from pykubelet.rig.nodes import node_bridge
from pykubelet.rig.stack import Stack, StackConfig

T = TypeVar("T")


class StackLeftovers(RuntimeError):
    pass


def run_on_stack(
    run: Callable[[Stack], Awaitable[T]],
    tag: str = "b",
    node_name: str = "bench-node",
    nodes: int = 1,
    csi_driver: bool = False,
) -> T:
    """Start a stack, `asyncio.run(run(stack))`, stop the stack and check that it left nothing.
    `nodes` > 1: that many nodes on this machine, their pod CIDRs from a leased cluster CIDR.
    `csi_driver`: with the bundled host-path CSI driver and its StorageClass (pykubelet.rig.csi).

    Raises StackLeftovers when the teardown left anything (after a successful run; a failing run's
    own error is not hidden behind it)."""
    with (
        lease_cluster_network(tag) if nodes > 1 else lease_network(tag) as net,
        tempfile.TemporaryDirectory(prefix="pykb-", ignore_cleanup_errors=True) as tmp,
    ):
        stack = Stack(
            StackConfig(
                state_dir=Path(tmp),
                node_name=node_name,
                bridge=net.bridge,
                pod_cidr=net.pod_cidr,
                nodes=nodes,
                cluster_cidr=net.pod_cidr if nodes > 1 else "",
                csi_driver=csi_driver,
            )
        )
        bridges = [net.bridge, *(node_bridge(net.bridge, i) for i in range(2, nodes + 1))]
        scope = Scope.of(tmp, bridges=bridges, pod_cidrs=[net.pod_cidr])
        stack.start()
        succeeded = False
        try:
            result = asyncio.run(run(stack))
            succeeded = True
            return result
        finally:
            problems = stack.stop()
            leaked = scope.leaked()
            if succeeded and (problems or leaked):
                raise StackLeftovers(f"the stack's teardown left {problems or ''} {leaked or ''}".strip())
