"""The leak scope reports what a session owns, and only that.

Each test makes two of a kind on the real host: one that is the session's (under its root, on its
bridge, in its pod CIDR) and one that is not (a sibling folder whose name shares the root's prefix,
another bridge, a netns made with `ip netns add`, another CIDR). The first must be reported, the second
never; and once the session's is removed the scope is clean. (A killed containerd's real shims, mounts,
netns and veths are the subject of test_containerd_teardown.py.)
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agent.cni import nat
from pykubelet.rig import host
from pykubelet.rig.leaks import Owned, Scope
from pykubelet.rig.netlease import lease_network

pytestmark = pytest.mark.integration


def sh(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True)


@pytest.fixture
def roots(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(ours, theirs): theirs is a sibling whose path starts with ours' (`/x/ours` vs `/x/ours-not`)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: mounts, network namespaces, links, nftables")
    ours, theirs = tmp_path / "ours", tmp_path / "ours-not"
    ours.mkdir()
    theirs.mkdir()
    yield ours, theirs
    host.unmount_all_under([str(ours), str(theirs)])  # what a failed test left mounted


def test_mounts_and_netns_under_the_root_are_reported_others_not(roots: tuple[Path, Path]) -> None:
    ours, theirs = roots
    scope = Scope.of(ours)
    for root in (ours, theirs):
        (root / "mnt").mkdir()
        sh("mount", "-t", "tmpfs", "tmpfs", str(root / "mnt"))
    # A netns someone else made in the host-wide /run/netns (the first `ip netns add` on a machine also
    # turns /run/netns itself into a mount point: that is the host's, not ours) ...
    other_ns = f"pkl-{uuid.uuid4().hex[:8]}"
    sh("ip", "netns", "add", other_ns)
    try:
        # ... and one of ours, kept alive by a bind mount under our root, as our containerds keep theirs.
        (ours / "mns").touch()
        sh("mount", "--bind", f"/run/netns/{other_ns}", str(ours / "mns"))
        found = scope.owned().as_dict()
        assert found == {"mounts": [f"{ours}/mnt (tmpfs)"], "netns": [f"{ours}/mns"]}, found
    finally:
        sh("ip", "netns", "del", other_ns)
    sh("umount", str(ours / "mns"))
    sh("umount", str(ours / "mnt"))
    assert scope.leaked(settle=0) == {}


def test_veths_on_our_bridge_and_the_bridge_are_reported_others_not(roots: tuple[Path, Path]) -> None:
    ours, _ = roots
    tag = uuid.uuid4().hex[:4]
    bridges = {"ours": f"pklb{tag}o", "theirs": f"pklb{tag}t"}
    veths = {k: (f"pklv{tag}{k[0]}", f"pklp{tag}{k[0]}") for k in bridges}
    scope = Scope.of(ours, bridges=[bridges["ours"]])
    try:
        for kind, bridge in bridges.items():
            sh("ip", "link", "add", bridge, "type", "bridge")
            host_end, peer = veths[kind]
            sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", peer)
            sh("ip", "link", "set", host_end, "master", bridge)
        found = scope.owned().as_dict()
        assert found == {
            "veths": [f"{veths['ours'][0]} on {bridges['ours']}"],
            "bridges": [bridges["ours"]],
        }, found
        # On a borrowed bridge (the session's shared network, seen from one test) the veth is the
        # test's, the bridge is not.
        borrowing = Scope.of(ours, borrowed_bridges=[bridges["ours"]])
        assert borrowing.owned().as_dict() == {"veths": [f"{veths['ours'][0]} on {bridges['ours']}"]}
    finally:
        for kind, bridge in bridges.items():
            subprocess.run(["ip", "link", "del", veths[kind][0]], capture_output=True, check=False)
            subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
    assert scope.leaked(settle=0) == {}


# Stands in for a containerd shim: its name and its -address are what count; its child is what a
# container's process is to a real shim.
SHIM_SCRIPT = "#!/bin/sh\nsleep 300 &\nwait\n"
SLEEPER = "import time; time.sleep(300)"


def children_of(pid: int, timeout: float = 10.0) -> list[psutil.Process]:
    """The children of pid, once it has started one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = psutil.Process(pid).children()
        if children:
            return children
        time.sleep(0.01)
    raise AssertionError(f"{pid} started no child within {timeout} s")


def test_processes_and_shims_of_the_root_are_reported_others_not(
    roots: tuple[Path, Path], tmp_path: Path
) -> None:
    ours, theirs = roots
    scope = Scope.of(ours)
    shim = tmp_path / "bin" / "containerd-shim-runc-v2"
    shim.parent.mkdir()
    shim.write_text(SHIM_SCRIPT)
    shim.chmod(0o755)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for side, root in (("ours", ours), ("theirs", theirs)):
        # one that names a file under the root, one that works inside it, a shim serving a containerd there
        procs[f"{side} names"] = subprocess.Popen([sys.executable, "-c", SLEEPER, str(root / "state.json")])
        procs[f"{side} cwd"] = subprocess.Popen([sys.executable, "-c", SLEEPER], cwd=root)
        procs[f"{side} shim"] = subprocess.Popen(
            [str(shim), "-namespace", "k8s.io", "-address", str(root / "containerd.sock")]
        )
    containers = {}
    try:
        for side in ("ours", "theirs"):
            containers[side] = children_of(procs[f"{side} shim"].pid)
        found = scope.owned().as_dict()
        assert set(found) == {"processes", "shims"}, found
        assert {int(s.split()[0]) for s in found["shims"]} == {procs["ours shim"].pid}
        assert {int(p.split()[0]) for p in found["processes"]} == {
            procs["ours names"].pid,
            procs["ours cwd"].pid,
            *(c.pid for c in containers["ours"]),
        }
    finally:
        for children in containers.values():
            for child in children:
                child.kill()
        for proc in procs.values():
            proc.kill()
            proc.wait()
    assert scope.leaked() == {}


def test_nft_entries_of_our_cidr_are_reported_others_not(roots: tuple[Path, Path]) -> None:
    ours, _ = roots
    with lease_network("l") as mine, lease_network("l") as theirs:
        scope = Scope.of(ours, pod_cidrs=[mine.pod_cidr])
        nets = [ipaddress.IPv4Network(n.pod_cidr) for n in (mine, theirs)]
        try:
            for net in nets:
                nat.ensure_network(net, masquerade=True)
            found = scope.owned().as_dict()
            assert found == {
                "nft": [
                    f"{nat.TABLE} masq_nets {mine.pod_cidr}",
                    f"{nat.TABLE} pod_nets {mine.pod_cidr}",
                ]
            }, found
        finally:
            for net in nets:
                nat.remove_network(net)
        assert scope.leaked(settle=0) == {}


def test_added_since_is_what_a_later_look_found_beyond_an_earlier() -> None:
    before = Owned({"mounts": ("/a (tmpfs)",), "shims": ("1 shim",)})
    after = Owned({"mounts": ("/a (tmpfs)", "/b (overlay)"), "shims": ("1 shim",), "netns": ()})
    assert after.added_since(before) == {"mounts": ["/b (overlay)"]}
    assert before.added_since(before) == {}
    assert not Owned({"netns": ()}) and Owned({"netns": ("/x",)})
