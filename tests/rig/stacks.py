"""A whole one-node stack for a test module: on a leased bridge and pod /24, stopped at the end with
nothing left on the host (its own state dir, bridge, pod CIDR and nft table checked by a leak scope)."""

from __future__ import annotations

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
