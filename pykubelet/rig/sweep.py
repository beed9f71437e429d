"""Stop and remove everything of one state dir, whatever shape it was left in: `pykubelet down`.

A stack that `up` finished is recorded in stack.json; one whose `up` was killed half-way, or whose
daemons crashed, is recorded only in part, or not at all, or with pids that died long ago (and may
since belong to someone else). So `down` trusts the host over the record, whose pids it never signals
blindly: it finds the processes whose command line names the stack's parts
(registry, containerd, etcd, API server and scheduler, agent, and an `up` still running), the shims of
the stack's containerd (by their -address) and what runs under them, the mounts and sandbox network
namespaces under the state dir, and the pod network from the record or, without one, from the
conflist on disk or the running agent's bridge.

The state dir itself may be gone while its stack runs on (a test's tmp_path that pytest pruned
renames the folder away and deletes what it can): the processes still name it, so they are found and
stopped all the same, the pod network comes from the agent's `--cni-bridge` and the bridge's address,
the service proxy's table from its `--nft-table`, and the mounts of the moved folder from where the
kernel says its processes' logs and the shims' bundles are now.

It stops them in dependency order (the front end first, then the agent so it does not fight the
teardown, then the API server, scheduler and registry, then the runtime with its sandboxes), removes
the bridge and NAT entries, and finally checks with the leak scope that nothing is left.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil

from agent.cni.node import NodeNetwork
from pykubelet.rig import host
from pykubelet.rig.containerd import DEFAULT_CGROUP_PARENT, Containerd, remove_empty_cgroups
from pykubelet.rig.leaks import Scope
from pykubelet.rig.process import Daemon
from pykubelet.rig.record import NODES_DIR, RECORD_FILE, StackRecord
from pykubelet.rig.stack import (
    DEFAULT_BRIDGE,
    DEFAULT_POD_CIDR,
    DEFAULT_STATE_DIR,
    netpolicy_cleanup_argv,
    netpolicy_table,
    proxy_cleanup_argv,
    proxy_table,
    stack_network,
)
from pykubelet.rig.supervisor import SUPERVISED_FILE

# The stack's parts under its state dir. Processes and mounts are looked for under these only, so a
# state dir given by mistake (`--state-dir /var/lib`) cannot make down touch anything but a stack's.
STACK_PARTS = (
    "registry",
    "containerd",
    "etcd",
    "apiserver",
    "agent",
    "proxy",
    "netpolicy",
    "dns",
    "metrics-server",
    "ingress",
    "cni",
    "pod-logs",
)


@dataclass(frozen=True)
class StackNetwork:
    bridge: str
    pod_cidr: str


def parts(state_dir: Path) -> list[Path]:
    return [state_dir / p for p in STACK_PARTS]


def stack_processes(state_dir: Path) -> list[host.OwnedProcess]:
    """The processes whose command line names one of the stack's parts (whether or not the folder
    still exists), the shims of its containerds and what runs under them."""
    return host.processes_of(host.resolved(parts(state_dir)))


def looks_like_a_stack(state_dir: Path) -> bool:
    return (
        (state_dir / RECORD_FILE).exists()
        or any(p.exists() for p in parts(state_dir))
        or any(node_dirs(state_dir))
        or any(stack_processes(state_dir))
    )


def node_dirs(state_dir: Path) -> list[Path]:
    """The further nodes' dirs of a multi-node stack (`<state>/nodes/<name>`): those on disk and those
    whose processes still run after the folder went away."""
    root = state_dir / NODES_DIR
    dirs = {p for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()
    prefix = f"{os.path.realpath(root)}/"
    for proc in host.processes_of([str(root)]):
        for arg in proc.cmdline:
            for value in (arg, arg.split("=", 1)[-1]):
                if value.startswith(prefix) and value[len(prefix) :].split("/")[0]:
                    dirs.add(Path(prefix) / value[len(prefix) :].split("/")[0])
    return sorted(dirs)


def _flag(cmdline: tuple[str, ...], flag: str) -> str | None:
    for i, arg in enumerate(cmdline[:-1]):
        if arg == flag:
            return cmdline[i + 1]
    return None


def _agent_network(found: list[host.OwnedProcess]) -> StackNetwork | None:
    """The running agent's bridge (`--cni-bridge`) and, from the bridge's own address (the gateway of
    the pod CIDR), its network; None when no agent runs or its bridge was never made."""
    for proc in found:
        bridge = _flag(proc.cmdline, "--cni-bridge") if _role(proc.cmdline) == "agent" else None
        if not bridge:
            continue
        out = subprocess.run(
            ["ip", "-j", "-4", "addr", "show", "dev", bridge], capture_output=True, text=True, check=False
        )
        try:
            addrs = [a for link in json.loads(out.stdout or "[]") for a in link.get("addr_info", [])]
        except ValueError:
            addrs = []
        for addr in addrs:
            network = ipaddress.IPv4Network(f"{addr['local']}/{addr['prefixlen']}", strict=False)
            return StackNetwork(bridge, str(network))
    return None


def find_network(
    state_dir: Path, record: StackRecord | None, found: list[host.OwnedProcess] | None = None
) -> StackNetwork | None:
    """The record's network, or the one the agent wrote in its conflist, or the running agent's bridge
    (`found`: the stack's processes); None when none exists (then no pod was ever attached, so there
    is no bridge to remove)."""
    if record is not None and record.pod_cidr:
        return StackNetwork(record.bridge, record.pod_cidr)
    # A node whose CIDR came from the node IPAM may have been recorded before it knew it: the conflist
    # the agent wrote for it says (no conflist: no pod was attached, so no bridge either).
    for conflist in sorted((state_dir / "cni" / "net.d").glob("*.conflist")):
        try:
            plugin = json.loads(conflist.read_text())["plugins"][0]
            return StackNetwork(plugin["bridge"], plugin["ipam"]["ranges"][0][0]["subnet"])
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            continue
    return _agent_network(found or [])


def _proxy_tables(
    state_dir: Path, record: StackRecord | None, network: StackNetwork | None, found: list[host.OwnedProcess]
) -> set[str]:
    """The service proxy's nftables tables: what a running proxy names itself (`--nft-table`), what the
    record says, and, when the proxy's folder exists, the one named after the pod network's bridge."""
    tables = {t for p in found if "proxy" in p.cmdline and (t := _flag(p.cmdline, "--nft-table"))}
    if record is not None and record.proxy_table and (state_dir / "proxy").exists():
        tables.add(record.proxy_table)
    if (state_dir / "proxy").exists():
        tables.add(proxy_table(network.bridge if network else DEFAULT_BRIDGE))
    return tables


def _netpolicy_tables(
    state_dir: Path, record: StackRecord | None, network: StackNetwork | None, found: list[host.OwnedProcess]
) -> set[str]:
    """The network-policy agent's tables (family inet), found as the proxy's are."""
    tables = {t for p in found if "netpolicy" in p.cmdline and (t := _flag(p.cmdline, "--nft-table"))}
    if (state_dir / "netpolicy").exists():
        if record is not None and record.netpolicy_table:
            tables.add(record.netpolicy_table)
        tables.add(netpolicy_table(network.bridge if network else DEFAULT_BRIDGE))
    return tables


def scope_of(
    state_dir: Path,
    network: StackNetwork | None,
    tables: set[str],
    moved: list[Path],
    policy_tables: set[str] | None = None,
) -> Scope:
    """What the stack owns: its parts, where its state dir was moved to, its network, its service
    proxy's and network-policy agent's tables."""
    return Scope.of(
        *parts(state_dir),
        *moved,
        bridges=[network.bridge] if network else [],
        pod_cidrs=[network.pod_cidr] if network else [],
        nft_tables=[f"ip {t}" for t in sorted(tables)] + [f"inet {t}" for t in sorted(policy_tables or ())],
    )


def _now_at(proc: host.OwnedProcess) -> Path | None:
    """Where the state dir of one of its processes is now, as the kernel reports the process's files
    (it follows renames): a shim works in its task's bundle, `<state>/containerd/state/
    io.containerd.runtime.v2.task/<namespace>/<id>`; every other daemon writes its log (its stdout)
    in its part's folder, `<state>/<part>/<name>.log`."""
    try:
        if proc.is_shim:
            bundle = Path(psutil.Process(proc.pid).cwd())
            if len(bundle.parents) > 4 and bundle.parents[1].name == "io.containerd.runtime.v2.task":
                return bundle.parents[4]
            return None
        log = Path(os.readlink(f"/proc/{proc.pid}/fd/1").removesuffix(" (deleted)"))
    except (psutil.Error, OSError):
        return None
    return log.parents[1] if log.is_absolute() and log.parent.name in STACK_PARTS else None


def moved_state_dirs(state_dir: Path, found: list[host.OwnedProcess]) -> list[Path]:
    """Where the state dir went when it was moved away (an ancestor renamed: what pytest does to an old
    tmp_path) while its stack ran: the mounts there (rootfs overlays, shm, sandboxes' netns, tmpfs
    volumes) are the stack's. A folder counts only when it still bears the state dir's own name."""
    moved = set()
    for proc in found:
        now = _now_at(proc)
        if now is not None and now.name == state_dir.name and not host.is_under(str(now), (str(state_dir),)):
            moved.add(now)
    return sorted(moved)


def _is_up_for(proc: psutil.Process, state_dir: Path, command: str = "up") -> bool:
    """A `pykubelet up` (still starting things), or with command "supervise" the stack's supervisor (which
    would start again what down stops), for this state dir."""
    try:
        argv, cwd = proc.cmdline(), proc.cwd()
    except psutil.Error:
        return False
    if command not in argv or not any(a.endswith("pykubelet") or a == "pykubelet" for a in argv):
        return False
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--state-dir"]
    values += [a.split("=", 1)[1] for a in argv if a.startswith("--state-dir=")]
    # Without the flag, `up` runs on its default state dir.
    return any(
        os.path.realpath(os.path.join(cwd, v)) == str(state_dir) for v in values or [DEFAULT_STATE_DIR]
    )


def _terminate(pids: list[int], grace: float) -> None:
    """SIGTERM, up to `grace` seconds, SIGKILL: each process (not its group: a recorded pid may lead
    no group, and what it started is found on its own)."""
    procs = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            proc.send_signal(signal.SIGTERM)
            procs.append(proc)
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=10)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _role(argv: tuple[str, ...]) -> str:
    if "agent" in argv and any("pykubelet" in a for a in argv):
        return "agent"
    if "server" in argv and any("pykubelet" in a for a in argv):
        return "apiserver"
    if argv and os.path.basename(argv[0]) == "containerd":
        return "containerd"
    return "other"


def _containerd_dirs(state_dir: Path, found: list[host.OwnedProcess]) -> list[Path]:
    dirs = {state_dir / "containerd"}
    for proc in found:
        if _role(proc.cmdline) == "containerd" and "--config" in proc.cmdline:
            i = proc.cmdline.index("--config")
            if i + 1 < len(proc.cmdline):
                dirs.add(Path(proc.cmdline[i + 1]).parent)
    return sorted(dirs)


def ups_for(state_dir: Path) -> list[psutil.Process]:
    """`pykubelet up` processes for this state dir, never this process or its ancestors (an `up` that
    sweeps what an earlier stack left must not stop itself)."""
    lineage = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    return [p for p in psutil.process_iter() if p.pid not in lineage and _is_up_for(p, state_dir)]


def supervisors_for(state_dir: Path) -> list[psutil.Process]:
    """The stack's supervisor (`pykubelet supervise`), if it runs."""
    return [p for p in psutil.process_iter() if _is_up_for(p, state_dir, "supervise")]


def _stop_ups(state_dir: Path) -> None:
    """An `up` still running would go on starting things, and the supervisor would start again what is
    stopped: they go first, without ceremony (the daemons run in sessions of their own and are stopped
    after them)."""
    ups = ups_for(state_dir) + supervisors_for(state_dir)
    for proc in ups:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(ups, timeout=10)


def _stop_daemons(found: list[host.OwnedProcess]) -> None:
    """The agent first (so it neither restarts pods nor fights the teardown), politely, as its owner
    would; then, together, the API server with its scheduler, the registry and whatever else runs for
    the stack, except the runtime and what runs under it (_stop_runtimes)."""
    _terminate([p.pid for p in found if _role(p.cmdline) == "agent"], grace=10)
    runtime = {p.pid for p in found if p.is_shim or _role(p.cmdline) == "containerd"}
    runtime |= {c.pid for p in found if p.is_shim for c in _descendants(p.pid)}
    _terminate([p.pid for p in found if _role(p.cmdline) != "agent" and p.pid not in runtime], grace=10)


def _stop_runtimes(state_dir: Path, found: list[host.OwnedProcess], cni: NodeNetwork) -> list[str]:
    """Each containerd of the stack: through CRI while it answers (CNI DEL runs for every sandbox), then
    its shims, their containers, its mounts and sandboxes' netns, whether or not it answered."""
    problems = []
    for directory in _containerd_dirs(state_dir, found):
        ctd = Containerd(directory, cni_bin_dir=cni.bin_dir, cni_conf_dir=cni.conf_dir, sandbox_image="")
        alive = [p for p in host.processes_of([str(directory)]) if _role(p.cmdline) == "containerd"]
        if alive:
            ctd.daemon = Daemon.adopt("containerd", alive[0].pid, ctd.daemon.log_path)
        left = ctd.stop()
        if not left.empty():
            problems.append(f"containerd in {directory} left {left}")
    return problems


def sweep(state_dir: Path, settle: float = 5.0) -> list[str]:
    """Stop and remove everything of the stack in `state_dir`; returns what could not be removed."""
    state_dir = Path(os.path.realpath(state_dir))
    _stop_ups(state_dir)
    if not looks_like_a_stack(state_dir):
        return []
    # A multi-node stack's further nodes first (their agents would otherwise fight the teardown), each
    # with its own record, containerd and network, as `pykubelet reset` sweeps a joined node.
    problems = [p for node in node_dirs(state_dir) for p in sweep(node, settle=settle)]
    found = stack_processes(state_dir)
    record = StackRecord.load(state_dir)
    network = find_network(state_dir, record, found)
    # A service proxy still running names its table itself (the record may not know it: an `up` stopped
    # while the proxy was starting); its rules outlive it, so they are removed once it is gone.
    proxy_tables = _proxy_tables(state_dir, record, network, found)
    policy_tables = _netpolicy_tables(state_dir, record, network, found)
    moved = moved_state_dirs(state_dir, found)
    scope = scope_of(state_dir, network, proxy_tables, moved, policy_tables)
    # Without a known network its files are still where the stack keeps them; only remove() needs it.
    cni = stack_network(
        state_dir,
        network.pod_cidr if network else DEFAULT_POD_CIDR,
        network.bridge if network else DEFAULT_BRIDGE,
    )
    _stop_daemons(found)
    problems += _stop_runtimes(state_dir, found, cni)
    # Anything that started meanwhile or outlived its parent (nothing, normally).
    _terminate([p.pid for p in host.processes_of(scope.roots)], grace=10)
    # The pod network (bridge, NAT entries, conflist, IPAM state), the remaining mounts (volumes),
    # empty pod cgroups, and the record.
    if network is not None:
        cni.remove()
    # The service proxy's tables (their rules outlive the process, as kube-proxy's do).
    for table in sorted(proxy_tables):
        subprocess.run(proxy_cleanup_argv(table), capture_output=True, check=False, timeout=60)
    for table in sorted(policy_tables):  # the network-policy agent's, likewise
        subprocess.run(netpolicy_cleanup_argv(table), capture_output=True, check=False, timeout=60)
    host.unmount_all_under(scope.roots)  # the moved containerd dirs' mounts too
    remove_empty_cgroups(DEFAULT_CGROUP_PARENT)
    (state_dir / RECORD_FILE).unlink(missing_ok=True)
    (state_dir / SUPERVISED_FILE).unlink(missing_ok=True)

    leaked = scope.leaked(settle=settle)
    return problems + [f"left {kind}: {', '.join(items)}" for kind, items in leaked.items()]
