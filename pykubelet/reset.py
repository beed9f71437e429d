"""`pykubelet reset [--root-dir DIR]`: undo `pykubelet join` on this host (kubeadm reset's role), also
when the join was interrupted half-way or is still running in the foreground.

In order: a `pykubelet join` still running for the root dir is stopped (it stops its containerd and
agent); the units join installed are stopped, disabled and removed; then the rig's sweep
(pykubelet.rig.sweep, the one `pykubelet down` uses) stops anything of the node still running (agent,
containerd, shims, containers), removes its sandboxes' netns, mounts, the pod network (bridge, veths,
the CNI plugin's nftables entries for the pod CIDR) and checks that nothing is left; only then the root
dir itself is removed. A root dir holding a control plane is refused: that is `pykubelet down`'s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil

from pykubelet.join import (
    AGENT_UNIT,
    CONTAINERD_UNIT,
    DEFAULT_ROOT,
    NETPOLICY_UNIT,
    SYSTEMD_DIR,
    systemd_running,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root-dir", type=Path, default=DEFAULT_ROOT, help="the root dir join wrote")
    parser.add_argument("--systemd-dir", type=Path, default=SYSTEMD_DIR, help=argparse.SUPPRESS)


def _stop_joins(root: Path) -> None:
    """`pykubelet join` processes for this root (a foreground join): SIGTERM, so each stops what it
    started, then SIGKILL after a grace period (the sweep below finds what a killed one left)."""
    from pykubelet.rig import host

    joins = []
    for owned in host.processes_of([str(root)]):
        argv = owned.cmdline
        if "join" in argv and any("pykubelet" in a for a in argv):
            try:
                proc = psutil.Process(owned.pid)
                proc.terminate()
                joins.append(proc)
            except psutil.Error:
                continue
    _, alive = psutil.wait_procs(joins, timeout=30)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=10)


def _remove_units(systemd_dir: Path) -> list[str]:
    present = [u for u in (NETPOLICY_UNIT, AGENT_UNIT, CONTAINERD_UNIT) if (systemd_dir / u).exists()]
    if not present:
        return []
    if systemd_running() and shutil.which("systemctl"):
        subprocess.run(["systemctl", "disable", "--now", *present], check=False, capture_output=True)
    for unit in present:
        (systemd_dir / unit).unlink(missing_ok=True)
    if systemd_running() and shutil.which("systemctl"):
        subprocess.run(["systemctl", "daemon-reload"], check=False)
    return present


def run(args: argparse.Namespace) -> int:
    from pykubelet.rig.sweep import sweep

    root = Path(os.path.realpath(args.root_dir))
    if (root / "apiserver").exists():
        print(f"pykubelet reset: {root} holds a control plane: use pykubelet down", file=sys.stderr)
        return 1
    _stop_joins(root)
    for unit in _remove_units(args.systemd_dir):
        print(f"[reset] removed {unit}", file=sys.stderr)
    problems = sweep(root)
    for problem in problems:
        print(f"pykubelet reset: {problem}", file=sys.stderr)
    if problems:
        print(f"pykubelet reset: {root} kept: what is listed above is still there", file=sys.stderr)
        return 1
    shutil.rmtree(root, ignore_errors=True)
    print(f"[reset] removed {root}", file=sys.stderr)
    return 0
