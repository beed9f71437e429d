"""What a test leaves on the host: a snapshot before, a snapshot after, and the difference.

Clean-up is part of every feature here, so tests (and e2e and benchmarks) compare the host's veths,
network namespaces, shims and mounts before and after instead of trusting that teardown worked.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass

import psutil

NETNS_DIR = "/var/run/netns"


def veths() -> set[str]:
    out = subprocess.run(
        ["ip", "-j", "link", "show", "type", "veth"], capture_output=True, text=True, check=True
    )
    return {link["ifname"] for link in json.loads(out.stdout or "[]")}


def netns() -> set[str]:
    return set(os.listdir(NETNS_DIR)) if os.path.isdir(NETNS_DIR) else set()


def shims() -> set[int]:
    found = set()
    for proc in psutil.process_iter(["name"]):
        if (proc.info["name"] or "").startswith("containerd-shim"):
            found.add(proc.pid)
    return found


def mounts() -> set[str]:
    with open("/proc/self/mountinfo") as f:
        return {line.split()[4] for line in f}


@dataclass(frozen=True)
class HostSnapshot:
    veths: frozenset[str]
    netns: frozenset[str]
    shims: frozenset[int]
    mounts: frozenset[str]

    @classmethod
    def take(cls) -> HostSnapshot:
        return cls(frozenset(veths()), frozenset(netns()), frozenset(shims()), frozenset(mounts()))

    def added_since(self, before: HostSnapshot) -> dict[str, list]:
        """What exists now that did not before; an empty dict means nothing leaked."""
        diff = {
            "veths": sorted(self.veths - before.veths),
            "netns": sorted(self.netns - before.netns),
            "shims": sorted(self.shims - before.shims),
            "mounts": sorted(self.mounts - before.mounts),
        }
        return {k: v for k, v in diff.items() if v}


def leaked_since(before: HostSnapshot, settle: float = 5.0) -> dict[str, list]:
    """What was added since `before`, allowing `settle` seconds for things that go away asynchronously
    (a shim exits shortly after its last task is deleted)."""
    deadline = time.monotonic() + settle
    while True:
        diff = HostSnapshot.take().added_since(before)
        if not diff or time.monotonic() > deadline:
            return diff
        time.sleep(0.1)
