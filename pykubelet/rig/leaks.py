"""What a session (a test run, an e2e stack, a benchmark, a `pykubelet up`) still owns on the host.

Clean-up is part of every feature here, so tests, e2e and benchmarks check the host after their
teardown instead of trusting it. The check is exact about ownership: a session names what is its own
(its state dirs, its bridges, its pod CIDRs) and only what those name is looked at, so the host's own
state (a /run/netns that became a mount point, the machine's services) and another session running
beside it are never reported, and nothing of the session's goes unseen because something else
changed at the same time. What a scope owns:

  processes  whose command line names a path under a root (registry, containerd, API server and its
             scheduler, agent, anything started with a state file), or whose working directory is
             under one; plus everything running under one of our shims (sandboxes, containers)
  shims      containerd shims whose -address is the socket of a containerd under a root
  netns      network namespaces bind-mounted under a root (our containerds keep their sandboxes'
             netns under their state dir: `netns_mounts_under_state_dir`)
  mounts     every other mount point under a root (rootfs overlays, shm, volume tmpfs)
  veths      veths whose master is one of our bridges (or of a borrowed one: a test on the session's
             shared pod network owns the veths it attached, not the bridge)
  bridges    our bridges, while they exist
  nft        our pod CIDRs in the pykubelet-cni table's sets, hostPort rules into them; the service
             proxy's tables the scope names (`nft_tables`, in the host's namespace)
  netns      also the named network namespaces the scope names (`named_netns`, /run/netns/<name>:
             the service proxy's tests program their rules in namespaces of their own)
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from pykubelet.rig import host

CATEGORIES = ("processes", "shims", "netns", "mounts", "veths", "bridges", "nft")


@dataclass(frozen=True)
class Owned:
    """One look at what a scope owns: category -> descriptions (sorted, comparable across looks)."""

    found: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return any(self.found.values())

    def as_dict(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self.found.items() if v}

    def added_since(self, before: Owned) -> dict[str, list[str]]:
        """What this look found that `before` did not; an empty dict means nothing was added."""
        diff = {k: sorted(set(v) - set(before.found.get(k, ()))) for k, v in self.found.items()}
        return {k: v for k, v in diff.items() if v}


@dataclass(frozen=True)
class Scope:
    """What a session owns, named by where it lives: state dirs (`roots`), bridges, pod CIDRs."""

    roots: tuple[str, ...]
    bridges: tuple[str, ...] = ()
    pod_cidrs: tuple[str, ...] = ()
    borrowed_bridges: tuple[str, ...] = ()
    named_netns: tuple[str, ...] = ()
    nft_tables: tuple[str, ...] = ()  # "ip kube-proxy"

    @classmethod
    def of(
        cls,
        *roots: os.PathLike[str] | str,
        bridges: Iterable[str] = (),
        pod_cidrs: Iterable[str] = (),
        borrowed_bridges: Iterable[str] = (),
        named_netns: Iterable[str] = (),
        nft_tables: Iterable[str] = (),
    ) -> Scope:
        return cls(
            host.resolved(roots),
            tuple(bridges),
            tuple(pod_cidrs),
            tuple(borrowed_bridges),
            tuple(named_netns),
            tuple(nft_tables),
        )

    def owned(self) -> Owned:
        procs = host.processes_of(self.roots)
        mounts = host.mounts_under(self.roots)
        links = host.links()
        bridges = set(self.bridges)
        masters = bridges | set(self.borrowed_bridges)
        found = {
            "processes": tuple(p.describe() for p in procs if not p.is_shim),
            "shims": tuple(p.describe() for p in procs if p.is_shim),
            "netns": tuple(
                sorted(
                    {m.point for m in mounts if m.is_netns}
                    | {f"/run/netns/{n}" for n in self.named_netns if os.path.exists(f"/run/netns/{n}")}
                )
            ),
            "mounts": tuple(sorted(f"{m.point} ({m.fstype})" for m in mounts if not m.is_netns)),
            "veths": tuple(
                sorted(
                    f"{link['ifname']} on {link['master']}"
                    for link in links
                    if host.link_kind(link) == "veth" and link.get("master") in masters
                )
            ),
            "bridges": tuple(sorted(link["ifname"] for link in links if link["ifname"] in bridges)),
            "nft": tuple(sorted(host.nft_entries_for(self.pod_cidrs) + _tables_present(self.nft_tables))),
        }
        return Owned(found)

    def leaked(self, before: Owned | None = None, settle: float = 5.0) -> dict[str, list[str]]:
        """What the scope still owns (or, given `before`, owns beyond it), after allowing `settle`
        seconds for what goes away by itself (a shim exits shortly after its last task is deleted)."""
        deadline = time.monotonic() + settle
        while True:
            now = self.owned()
            diff = now.added_since(before) if before is not None else now.as_dict()
            if not diff or time.monotonic() > deadline:
                return diff
            time.sleep(0.1)


def _tables_present(tables: tuple[str, ...]) -> list[str]:
    """Which of these nftables tables ("ip kube-proxy") exist in the host's namespace."""
    if not tables or os.geteuid() != 0:
        return []
    try:
        out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    present = {line.removeprefix("table ").strip() for line in out.splitlines()}
    return [f"table {t}" for t in tables if t in present]
