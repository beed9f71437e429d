"""A containerd of our own: its root, state, socket and config per run, and a teardown that leaves
nothing behind.

containerd 1.6 from Debian, CRI plugin on. This machine refuses to lower oom_score_adj below 0, which
makes runc fail for the sandbox (`can't get final child's PID from pipe: EOF`) unless the CRI plugin's
`restrict_oom_score_adj` is set; we detect the restriction rather than assume it.

Everything a containerd of ours makes lives under its own dir, so its teardown (and the leak checks,
pykubelet.rig.leaks) can tell it from the host's and other sessions': the sandboxes' network namespaces
(`netns_mounts_under_state_dir`, instead of the host-wide /var/run/netns) and runc's container state
(`Root`, instead of /run/containerd/runc). Only the shims' sockets go to containerd's fixed
/run/containerd/s; they are named from our socket and the task ids, and removed by name.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil

from pykubelet.rig import host
from pykubelet.rig.process import Daemon, run_blocking

CONTAINERD_BINARY = "/usr/bin/containerd"
# Where containerd 1.6 puts every shim's socket, whatever its own state dir: sha256(address/ns/id).
SHIM_SOCKET_DIR = Path("/run/containerd/s")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# containerd's CRI plugin puts containers whose sandbox names no cgroup parent under this one.
DEFAULT_CGROUP_PARENT = "k8s.io"
SHIM_NAMES = host.SHIM_NAMES

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
  # Sandboxes' network namespaces under {state}/io.containerd.grpc.v1.cri/netns, not the host-wide
  # /var/run/netns: everything this containerd makes is then found (and removed) under its own dirs.
  netns_mounts_under_state_dir = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        # runc's container state beside ours, not in the host-wide /run/containerd/runc.
        Root = "{state}/runc"

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
    container through CRI, stops containerd, kills shims it started, and unmounts what it mounted under
    its dir (rootfs overlays, shm, its sandboxes' network namespaces).
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
        """Stop and remove every container and sandbox this containerd knows (CNI DEL runs for each)."""
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
                    await cri.stop_pod_sandbox(sandbox.id)
                    await cri.remove_pod_sandbox(sandbox.id)
                except CRIError:
                    pass

    def shim_pids(self) -> list[int]:
        """Shims serving this containerd: their -address is our socket."""
        return [p.pid for p in host.processes_of([str(self.state_dir)]) if p.is_shim]

    def shim_sockets(self) -> list[Path]:
        """The sockets in SHIM_SOCKET_DIR of the tasks whose bundles are in our state (a shim killed
        with its containerd leaves its socket there)."""
        sockets = []
        for bundle in self.state.glob("io.containerd.runtime.v2.task/*/*"):
            namespace, task_id = bundle.parent.name, bundle.name
            digest = hashlib.sha256(f"{self.socket}/{namespace}/{task_id}".encode()).hexdigest()
            sockets.append(SHIM_SOCKET_DIR / digest)
        return [s for s in sockets if s.exists()]

    def leftovers(self) -> Leftovers:
        mounts = host.mounts_under([str(self.state_dir)])
        return Leftovers(
            shims=self.shim_pids(),
            mounts=[m.point for m in mounts if not m.is_netns],
            netns=[m.point for m in mounts if m.is_netns],
        )

    def stop(self, remove_state: bool = True) -> Leftovers:
        """Tear everything down; returns what could not be removed (empty when all went well).

        Works on a dead or killed containerd too: its shims are found by their -address, its mounts
        and its sandboxes' network namespaces under its state dir."""
        if self.daemon.running():
            try:
                run_blocking(self.remove_all)
            except Exception:  # a dead runtime: fall through to the forceful clean-up below
                pass
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
        for socket in self.shim_sockets():
            socket.unlink(missing_ok=True)
        # Rootfs overlays, shm, and the sandboxes' netns bind mounts: a netns with no process and no
        # mount left is freed by the kernel, and the pod's veth pair with it.
        host.unmount_all_under([str(self.state_dir)])
        remove_empty_cgroups(DEFAULT_CGROUP_PARENT)
        left = self.leftovers()
        if remove_state and not left.mounts and not left.netns:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        return left

    def __enter__(self) -> Containerd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
