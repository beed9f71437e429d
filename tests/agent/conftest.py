"""What the agent's integration modules share: a containerd of the module's own (the agent removes every
pod sandbox it does not know, so it must not share a runtime with other suites' sandboxes)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from agent.pods.qos import remove_pod_cgroup
from pykubelet.rig.containerd import Containerd
from pykubelet.rig.images import RigImages
from pykubelet.rig.refcni import ReferenceBridgeNetwork
from pykubelet.rig.registry import Registry


@contextlib.contextmanager
def module_containerd(
    state: Path,
    registry: Registry,
    test_images: RigImages,
    ref_network: ReferenceBridgeNetwork,
    cgroup_root: str,
) -> Iterator[Containerd]:
    """Started here, stopped with every sandbox and the pods' cgroups under `cgroup_root` removed."""
    ctd = Containerd(
        state,
        cni_bin_dir=ref_network.bin_dir,
        cni_conf_dir=ref_network.conf_dir,
        sandbox_image=test_images.pause,
        registry=registry.address,
    )
    ctd.start()
    try:
        yield ctd
    finally:
        left = ctd.stop()
        remove_pod_cgroup(cgroup_root)
        assert left.empty(), f"containerd teardown left {left}"
