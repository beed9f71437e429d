"""A containerd of our own: its root, state, socket and config per run, and a teardown that leaves
nothing behind.

containerd 1.6 from Debian, CRI plugin on. This machine refuses to lower oom_score_adj below 0, which
makes runc fail for the sandbox (`can't get final child's PID from pipe: EOF`) unless the CRI plugin's
`restrict_oom_score_adj` is set; we detect the restriction rather than assume it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil

from pykubelet.rig.process import Daemon, run_blocking

CONTAINERD_BINARY = "/usr/bin/containerd"
NETNS_DIR = Path("/var/run/netns")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# containerd's CRI plugin puts containers whose sandbox names no cgroup parent under this one.
DEFAULT_CGROUP_PARENT = "k8s.io"
SHIM_NAMES = ("containerd-shim-runc-v2", "containerd-shim")

CONFIG = """version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[debug]
  level = "{log_level}"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = {restrict_oom}
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  max_container_log_line_size = 16384

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin_dir}"
    conf_dir = "{cni_conf_dir}"
    max_conf_num = 1

{registry_mirrors}
"""

MIRROR = """  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."{host}"]
    endpoint = ["http://{registry}"]
"""


def oom_score_adj_restricted() -> bool:
    """True when a child process may not lower its oom_score_adj (this VM's case)."""
    result = subprocess.run(
        ["/bin/sh", "-c", "echo -1 > /proc/self/oom_score_adj"],
        capture_output=True,
        check=False,
    )
    return result.returncode != 0


@dataclass
class Leftovers:
    """What a containerd left behind on the host; all empty after a clean teardown."""

    shims: list[int]
    mounts: list[str]
    netns: list[str]

    def empty(self) -> bool:
        return not (self.shims or self.mounts or self.netns)


def _mounts_under(prefix: str) -> list[str]:
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mount_point = line.split()[4].replace("\\040", " ")
            if mount_point == prefix or mount_point.startswith(prefix.rstrip("/") + "/"):
                found.append(mount_point)
    return found


def network_namespace(spec: dict) -> str | None:
    """The network namespace path of an OCI runtime spec (a sandbox's or a task bundle's)."""
    for ns in (spec.get("linux") or {}).get("namespaces") or []:
        if ns.get("type") == "network" and ns.get("path"):
            return ns["path"]
    return None


def sandbox_runtime_spec(status) -> dict:
    """containerd's OCI spec of a sandbox, from a verbose PodSandboxStatus answer ({} if absent)."""
    try:
        return json.loads(status.info.get("info", "") or "{}").get("runtimeSpec") or {}
    except ValueError:
        return {}


def cgroup_dirs(name: str) -> list[Path]:
    """The folders of cgroup `name` in every hierarchy (v1: one per controller; v2: one)."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        candidates = [CGROUP_ROOT / name]
    else:
        candidates = [d / name for d in CGROUP_ROOT.iterdir() if d.is_dir() and not d.is_symlink()]
    return [c for c in candidates if c.is_dir()]


def remove_empty_cgroups(name: str) -> list[Path]:
    """rmdir cgroup `name` and its descendants wherever they hold no process; returns those that remain.

    rmdir of a cgroup fails while it has processes or children, so this can never disturb a cgroup
    another runtime still uses."""
    remaining = []
    for top in cgroup_dirs(name):
        for dirpath, _dirnames, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
            try:
                os.rmdir(dirpath)
            except OSError:
                remaining.append(Path(dirpath))
    return remaining


class Containerd:
    """`with Containerd(dir, cni_bin_dir=..., cni_conf_dir=..., registry=..., sandbox_image=...) as c:`

    `c.endpoint` is the CRI endpoint (`unix:///.../containerd.sock`). stop() removes every sandbox and
    container through CRI, stops containerd, kills shims it started, unmounts what it mounted under its
    root and state, and deletes the network namespaces its sandboxes used.
    """

    def __init__(
        self,
        state_dir: Path | str,
        *,
        cni_bin_dir: Path | str,
        cni_conf_dir: Path | str,
        sandbox_image: str,
        registry: str | None = None,
        mirror_docker_io: bool = True,
        log_level: str = "info",
    ) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.root = self.state_dir / "root"
        self.state = self.state_dir / "state"
        self.socket = self.state_dir / "containerd.sock"
        self.config_path = self.state_dir / "config.toml"
        self.endpoint = f"unix://{self.socket}"
        self.cni_bin_dir = Path(cni_bin_dir)
        self.cni_conf_dir = Path(cni_conf_dir)
        self.sandbox_image = sandbox_image
        self.registry = registry
        self.mirror_docker_io = mirror_docker_io
        self.log_level = log_level
        self.daemon = Daemon(
            "containerd",
            [CONTAINERD_BINARY, "--config", str(self.config_path)],
            self.state_dir / "containerd.log",
        )
        # Network namespaces live in a host-wide folder shared with anything else on the machine (other
        # containerds, tests making their own); only the ones our sandboxes reported are ours to delete.
        self._netns_seen: set[str] = set()

    def render_config(self) -> str:
        mirrors = ""
        if self.registry:
            hosts = [self.registry] + (["docker.io"] if self.mirror_docker_io else [])
            mirrors = "".join(MIRROR.format(host=h, registry=self.registry) for h in hosts)
        return CONFIG.format(
            root=self.root,
            state=self.state,
            socket=self.socket,
            log_level=self.log_level,
            sandbox_image=self.sandbox_image,
            restrict_oom="true" if oom_score_adj_restricted() else "false",
            cni_bin_dir=self.cni_bin_dir,
            cni_conf_dir=self.cni_conf_dir,
            registry_mirrors=mirrors,
        )

    def start(self, timeout: float = 60.0) -> Containerd:
        for d in (self.root, self.state, self.cni_conf_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.render_config())
        self.daemon.start(lambda: run_blocking(self._runtime_ready), timeout=timeout, interval=0.2)
        return self

    async def _runtime_ready(self) -> bool:
        from agent.cri import CRIClient, runtime_condition

        if not self.socket.exists():
            return False
        async with await CRIClient.connect(self.endpoint) as cri:
            cond = runtime_condition(await cri.status(), "RuntimeReady")
            return bool(cond and cond.status)

    def stop_daemon(self) -> None:
        """Stop the containerd process only, as an operator restarting it on a node would: the shims
        and the containers they run keep going, and start() brings containerd back to them."""
        self.daemon.stop()

    # -- teardown ------------------------------------------------------------------------------

    async def remove_all(self) -> None:
        """Stop and remove every container and sandbox this containerd knows, recording their netns."""
        from agent.cri import CRIClient, CRIError

        async with await CRIClient.connect(self.endpoint) as cri:
            for container in await cri.list_containers():
                try:
                    await cri.stop_container(container.id, 0)
                    await cri.remove_container(container.id)
                except CRIError:
                    pass
            for sandbox in await cri.list_pod_sandbox():
                try:
                    status = await cri.pod_sandbox_status(sandbox.id, verbose=True)
                    self._note_netns(sandbox_runtime_spec(status))
                    await cri.stop_pod_sandbox(sandbox.id)
                    await cri.remove_pod_sandbox(sandbox.id)
                except CRIError:
                    pass

    def _note_netns(self, spec: dict) -> None:
        path = network_namespace(spec)
        if path and path.startswith(str(NETNS_DIR)):
            self._netns_seen.add(os.path.basename(path))

    def _note_bundle_netns(self) -> None:
        """Record the netns of every task bundle on disk: this works even when containerd is dead,
        since the bundles (with their OCI config.json) stay while their shims run."""
        for config in self.state.glob("io.containerd.runtime.v2.task/*/*/config.json"):
            try:
                spec = json.loads(config.read_text())
            except (OSError, ValueError):
                continue
            self._note_netns(spec)

    def shim_pids(self) -> list[int]:
        """Shims serving this containerd: their command line names our socket."""
        pids = []
        sock = str(self.socket)
        for proc in psutil.process_iter(["name", "cmdline"]):
            try:
                if proc.info["name"] in SHIM_NAMES and sock in " ".join(proc.info["cmdline"] or []):
                    pids.append(proc.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return pids

    def leftovers(self) -> Leftovers:
        netns = []
        if NETNS_DIR.exists():
            netns = sorted(self._netns_seen & set(os.listdir(NETNS_DIR)))
        return Leftovers(shims=self.shim_pids(), mounts=_mounts_under(str(self.state_dir)), netns=netns)

    def stop(self, remove_state: bool = True) -> Leftovers:
        """Tear everything down; returns what could not be removed (empty when all went well)."""
        if self.daemon.running():
            try:
                run_blocking(self.remove_all)
            except Exception:  # a dead runtime: fall through to the forceful clean-up below
                pass
        self._note_bundle_netns()
        self.daemon.stop()
        shims = []
        for pid in self.shim_pids():
            try:
                shim = psutil.Process(pid)
                # The shim's children (the containers' processes) die with their PID namespaces once
                # the shim's init processes go; kill them all so nothing waits on a dead runtime.
                family = [shim, *shim.children(recursive=True)]
                for proc in family:
                    proc.kill()
                shims.extend(family)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(shims, timeout=5)
        for mount_point in sorted(_mounts_under(str(self.state_dir)), key=len, reverse=True):
            subprocess.run(["umount", "-l", mount_point], capture_output=True, check=False)
        remove_empty_cgroups(DEFAULT_CGROUP_PARENT)
        for name in self._netns_seen:
            path = NETNS_DIR / name
            if path.exists():
                subprocess.run(["umount", str(path)], capture_output=True, check=False)
                path.unlink(missing_ok=True)
        left = self.leftovers()
        if remove_state and not left.mounts:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        return left

    def __enter__(self) -> Containerd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
