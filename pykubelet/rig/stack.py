"""The whole single-machine cluster: registry + images, the pod network, containerd, the API server (with
its scheduler) and the agent.

One class owns every part, so `pykubelet up`, the e2e suite and the benchmarks start and stop the
same thing. Each daemon is a child process in its own session: `up` leaves them running after it
returns and records them in `<state>/stack.json`, from which `down` (or a later `up`) finds them again.
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from agent.cni.node import NodeNetwork
from pykubelet.rig.containerd import Containerd
from pykubelet.rig.images import RigImages, publish_test_images
from pykubelet.rig.process import Daemon, free_port
from pykubelet.rig.registry import Registry

DEFAULT_POD_CIDR = "10.244.0.0/24"
DEFAULT_BRIDGE = "pykbr0"


def default_node_name() -> str:
    return socket.gethostname().split(".")[0].lower()


@dataclass
class StackConfig:
    state_dir: Path
    node_name: str = field(default_factory=default_node_name)
    pod_cidr: str = DEFAULT_POD_CIDR
    bridge: str = DEFAULT_BRIDGE
    api_port: int | None = None  # None: a free port
    registry_port: int | None = None
    kubelet_port: int | None = None


def stack_network(state_dir: Path, pod_cidr: str, bridge: str) -> NodeNetwork:
    """The stack's pod network: our CNI plugin, its files under <state>/cni."""
    cni = state_dir / "cni"
    return NodeNetwork(
        conf_dir=cni / "net.d",
        bin_dir=cni / "bin",
        data_dir=cni / "ipam",
        pod_cidr=pod_cidr,
        bridge=bridge,
        socket_path=str(state_dir / "agent" / "cni.sock"),  # where the agent serves it
    )


@dataclass
class StackRecord:
    """What `down` needs to find a stack that `up` left running."""

    state_dir: str
    node_name: str
    kubeconfig: str
    pids: dict[str, int]
    registry: str
    containerd_endpoint: str
    bridge: str
    pod_cidr: str

    @classmethod
    def load(cls, state_dir: Path) -> StackRecord | None:
        path = state_dir / "stack.json"
        if not path.exists():
            return None
        return cls(**json.loads(path.read_text()))

    def save(self) -> None:
        path = Path(self.state_dir) / "stack.json"
        path.write_text(json.dumps(asdict(self), indent=2))


class Stack:
    def __init__(self, config: StackConfig) -> None:
        self.config = config
        d = config.state_dir = Path(config.state_dir).resolve()
        self.registry = Registry(d / "registry", port=config.registry_port)
        self.network = stack_network(d, config.pod_cidr, config.bridge)
        # The agent hosts this network: it installs the plugin, serves its calls and writes the conflist
        # for the pod CIDR (containerd reports NetworkReady from then on). The stack only knows where the
        # files are, to remove them at teardown.
        self.images: RigImages | None = None
        self.containerd: Containerd | None = None
        self.apiserver = None  # pykubelet.rig.apiserver.ApiServer
        self.agent: Daemon | None = None
        self.kubelet_port = config.kubelet_port or free_port()
        self.agent_config_path = d / "agent" / "kubelet-config.yaml"
        self.pod_logs_dir = d / "pod-logs"

    @property
    def node_name(self) -> str:
        return self.config.node_name

    @property
    def kubeconfig(self) -> Path:
        assert self.apiserver is not None, "the API server is not started"
        return Path(self.apiserver.kubeconfig)

    # -- start -----------------------------------------------------------------------------------

    def start(self, wait_ready: float = 120.0) -> Stack:
        from pykubelet.rig.apiserver import ApiServer

        d = self.config.state_dir
        d.mkdir(parents=True, exist_ok=True)
        try:
            self.registry.start()
            self.images = publish_test_images(self.registry.address)
            self.containerd = Containerd(
                d / "containerd",
                cni_bin_dir=self.network.bin_dir,
                cni_conf_dir=self.network.conf_dir,
                sandbox_image=self.images.pause,
                registry=self.registry.address,
            )
            self.containerd.start()
            # The server runs the scheduler and the controller manager as its children, so pods without a
            # nodeName land on our node and every namespace gets its service account and CA bundle.
            self.apiserver = ApiServer(
                d / "apiserver", port=self.config.api_port or free_port(), scheduler=True, controllers=True
            )
            self.apiserver.start()
            self.start_agent(wait_ready=wait_ready)
        except BaseException:
            self.stop()
            raise
        self.record().save()
        return self

    def write_agent_config(self) -> Path:
        self.agent_config_path.parent.mkdir(parents=True, exist_ok=True)
        self.pod_logs_dir.mkdir(parents=True, exist_ok=True)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "podCIDR": self.config.pod_cidr,
            "podLogsDir": str(self.pod_logs_dir),
            "clusterDomain": "cluster.local",
            "resolvConf": "/etc/resolv.conf",
            "port": self.kubelet_port,
            # The kubelet API accepts client certificates from the cluster's CA (the API server's own).
            "authentication": {"x509": {"clientCAFile": str(self.apiserver.ca_cert)}},
        }
        self.agent_config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        return self.agent_config_path

    def agent_argv(self) -> list[str]:
        assert self.containerd is not None
        return [
            "python3",
            "-m",
            "pykubelet",
            "agent",
            "--kubeconfig",
            str(self.kubeconfig),
            "--node-name",
            self.node_name,
            "--container-runtime-endpoint",
            self.containerd.endpoint,
            "--config",
            str(self.write_agent_config()),
            "--root-dir",
            str(self.config.state_dir / "agent"),
            "--cni-conf-dir",
            str(self.network.conf_dir),
            "--cni-bin-dir",
            str(self.network.bin_dir),
            "--cni-data-dir",
            str(self.network.data_dir),
            "--cni-bridge",
            self.config.bridge,
        ]

    def start_agent(self, wait_ready: float = 120.0) -> Daemon:
        """Start (or restart) the agent and wait until its Node reports Ready."""
        if self.agent is not None and self.agent.running():
            raise RuntimeError("the agent is already running")
        self.agent = Daemon(
            "pykubelet agent", self.agent_argv(), self.config.state_dir / "agent" / "agent.log"
        )
        self.agent.start(self.node_ready, timeout=wait_ready, interval=0.5)
        return self.agent

    def node_ready(self) -> bool:
        node = self.core_api().read_node(self.node_name)
        return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))

    def core_api(self):
        """An official-client CoreV1Api on the admin kubeconfig (sync; for rig code and tests)."""
        from kubernetes import client, config

        api_client = config.new_client_from_config(config_file=str(self.kubeconfig))
        return client.CoreV1Api(api_client)

    def record(self) -> StackRecord:
        pids = {}
        for name, pid in (
            ("registry", self.registry.daemon.pid),
            ("containerd", self.containerd.daemon.pid if self.containerd else None),
            ("apiserver", self.apiserver.pid if self.apiserver else None),
            ("agent", self.agent.pid if self.agent else None),
        ):
            if pid is not None:
                pids[name] = pid
        return StackRecord(
            state_dir=str(self.config.state_dir),
            node_name=self.node_name,
            kubeconfig=str(self.kubeconfig) if self.apiserver else "",
            pids=pids,
            registry=self.registry.address,
            containerd_endpoint=self.containerd.endpoint if self.containerd else "",
            bridge=self.config.bridge,
            pod_cidr=self.config.pod_cidr,
        )

    # -- stop ------------------------------------------------------------------------------------

    def stop(self) -> list[str]:
        """Stop everything in reverse order; returns a description of anything left behind."""
        problems = []
        if self.agent is not None:
            self.agent.stop()
        if self.apiserver is not None:
            self.apiserver.stop()
        if self.containerd is not None:
            left = self.containerd.stop()
            if not left.empty():
                problems.append(f"containerd left {left}")
        self.network.remove()
        self.registry.stop()
        (self.config.state_dir / "stack.json").unlink(missing_ok=True)
        return problems


def stop_recorded(state_dir: Path) -> list[str]:
    """Stop a stack that an earlier process started, from its stack.json; used by `pykubelet down`."""
    record = StackRecord.load(state_dir)
    if record is None:
        return []
    state = Path(record.state_dir)
    problems: list[str] = []

    def adopted(name: str, log: Path) -> Daemon | None:
        pid = record.pids.get(name)
        return Daemon.adopt(name, pid, log) if pid is not None else None

    # The agent first (so it does not fight the teardown), then the API server, then the runtime.
    for name in ("agent", "apiserver"):
        daemon = adopted(name, state / name / f"{name}.log")
        if daemon is not None:
            daemon.stop()
    network_files = stack_network(state, record.pod_cidr, record.bridge)
    ctd = Containerd(
        state / "containerd",
        cni_bin_dir=network_files.bin_dir,
        cni_conf_dir=network_files.conf_dir,
        sandbox_image="",
    )
    ctd.daemon = adopted("containerd", ctd.daemon.log_path) or ctd.daemon
    left = ctd.stop()
    if not left.empty():
        problems.append(f"containerd left {left}")
    registry = adopted("registry", state / "registry" / "registry.log")
    if registry is not None:
        registry.stop()
    network_files.remove()
    (state / "stack.json").unlink(missing_ok=True)
    return problems
