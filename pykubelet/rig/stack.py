"""The whole single-machine cluster: registry + images, the pod network, containerd, the API server (with
its scheduler), its store (SQLite in its data dir, or a local etcd the stack owns: `store="etcd"`), the
agent, the service proxy and the cluster DNS.

One class owns every part, so `pykubelet up`, the e2e suite and the benchmarks start and stop the
same thing. Each daemon is a child process in its own session: `up` leaves them running after it
returns. `<state>/stack.json` records the stack from before its first daemon starts, and each daemon
the moment it exists and again once it is ready (written to a temporary file and renamed, so a reader
never sees half a record); `down` (pykubelet.rig.sweep) reads it, and also finds what an interrupted
or crashed stack left without a record.
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from agent.cni.node import NodeNetwork
from pykubelet.progress import Progress
from pykubelet.rig.auditlog import audit_args
from pykubelet.rig.containerd import Containerd
from pykubelet.rig.encryption import encryption_args
from pykubelet.rig.etcd import Etcd, EtcdCluster, etcd_members
from pykubelet.rig.images import RigImages, publish_test_images
from pykubelet.rig.netlease import loopback_for, service_range_for
from pykubelet.rig.nodelabels import labels_of, node_labels_args, node_labels_flag
from pykubelet.rig.nodeplan import DEFAULT_BRIDGE, default_node_name
from pykubelet.rig.process import Daemon, free_port
from pykubelet.rig.record import RECORD_FILE, StackRecord
from pykubelet.rig.registry import Registry

DEFAULT_POD_CIDR = "10.244.0.0/24"
DEFAULT_SERVICE_CIDR = "10.96.0.0/16"  # the API server's own default (--service-cluster-ip-range)
DEFAULT_STATE_DIR = Path("/var/lib/pykubelet")  # `pykubelet up`'s and `down`'s
PROXY_TABLE = "kube-proxy"
NETPOL_TABLE = "pykubelet-netpol"  # the network-policy agent's (family inet)
DNS_USER = "system:serviceaccount:kube-system:coredns"
DNS_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:kube-system")


def dns_argv(kubeconfig: Path, address: str, port: int, side_ports: tuple[int, int, int]) -> list[str]:
    """`pykubelet dns` answering on address:port, with CoreDNS's /health, /ready and /metrics on the
    given loopback ports (never upstream's 8080, 8181, 9153: several stacks share a host)."""
    health, ready, metrics = side_ports
    return [
        sys.executable,
        "-m",
        "pykubelet",
        "dns",
        "--kubeconfig",
        str(kubeconfig),
        "--bind-address",
        address,
        "--port",
        str(port),
        "--health-bind-address",
        f"127.0.0.1:{health}",
        "--ready-bind-address",
        f"127.0.0.1:{ready}",
        "--metrics-bind-address",
        f"127.0.0.1:{metrics}",
    ]


def proxy_table(bridge: str) -> str:
    """The service proxy's nftables table: kube-proxy's own name for the default stack, one per pod
    network otherwise (a test stack on a leased bridge never touches another stack's table)."""
    return PROXY_TABLE if bridge == DEFAULT_BRIDGE else f"{PROXY_TABLE}-{bridge}"


def proxy_cleanup_argv(table: str) -> list[str]:
    return [sys.executable, "-m", "pykubelet", "proxy", "--cleanup", "--nft-table", table]


def netpolicy_table(bridge: str) -> str:
    """The network-policy agent's nftables table (family inet), one per pod network as the proxy's."""
    return NETPOL_TABLE if bridge == DEFAULT_BRIDGE else f"{NETPOL_TABLE}-{bridge}"


def netpolicy_cleanup_argv(table: str) -> list[str]:
    return [sys.executable, "-m", "pykubelet", "netpolicy", "--cleanup", "--nft-table", table]


@dataclass
class StackConfig:
    state_dir: Path
    node_name: str = field(default_factory=default_node_name)
    pod_cidr: str = DEFAULT_POD_CIDR
    bridge: str = DEFAULT_BRIDGE
    api_port: int | None = None  # None: a free port
    registry_port: int | None = None
    kubelet_port: int | None = None
    store: str = "sqlite"  # or "etcd": a local etcd under <state>/etcd, started before the API server
    # The agent joins by TLS bootstrap (a bootstrap token, a CSR the controllers approve and sign) and
    # rotates its client certificate, instead of starting from a kubeconfig the rig signed for it.
    tls_bootstrap: bool = False
    etcd_members: int = 1  # with store "etcd": a cluster of this many members (<state>/etcd/m<i>)
    apiservers: int = 1  # with store "etcd": replicas on one etcd (<state>/apiserver/replica-<i>)
    # The API server verifies the kubelets' serving certificates with the cluster CA
    # (--kubelet-certificate-authority): only kubelets serving a CSR-issued certificate (serverTLSBootstrap).
    verify_kubelets: bool = False
    # Several nodes on this machine (issue 17): nodes 2..N join by TLS bootstrap like `pykubelet join`,
    # each with its own containerd, root dir, bridge and kubelet port (pykubelet.rig.nodes).
    nodes: int = 1
    # The node IPAM's range (--allocate-node-cidrs --cluster-cidr): every node, the first included, then
    # gets its pod CIDR (a /node_cidr_mask_size block) from the controller manager; "" = off (the first
    # node's `pod_cidr` from its kubelet config, as before).
    cluster_cidr: str = ""
    node_cidr_mask_size: int = 24
    # The labels every node registers with (its agent's --node-labels) and the zones dealt out to the
    # nodes round-robin as topology.kubernetes.io/zone (pykubelet.rig.nodelabels; `up --zones`).
    node_labels: dict[str, str] = field(default_factory=dict)
    zones: tuple[str, ...] = ()
    # The Services' range (--service-cluster-ip-range; the proxy's --service-cidrs; cluster DNS at its
    # .10). "" = the one a leased network implies (pykubelet.rig.netlease.service_range_for: stacks on one
    # host never DNAT each other's cluster IPs), else DEFAULT_SERVICE_CIDR.
    service_cidr: str = ""
    # The ingress controller's HTTP and HTTPS ports on its address (pykubelet.rig.ingress): these when
    # free (`up` asks for 80 and 443), else free ports.
    ingress_ports: tuple[int, int] | None = None
    # Its address (nginx's, and the one Ingress and Gateway statuses publish): "" = the loopback address
    # a leased network implies (pykubelet.rig.netlease.loopback_for: stacks on one host then never meet on
    # a Gateway listener's port), else the node's; `up` passes the node's.
    ingress_address: str = ""
    # The bundled host-path CSI driver beside the first node with its sidecars, its CSIDriver and the
    # StorageClass csi-hostpath (pykubelet.rig.csi); `up` starts it.
    csi_driver: bool = False

    @property
    def services(self) -> str:
        return (
            self.service_cidr or service_range_for(self.cluster_cidr or self.pod_cidr) or DEFAULT_SERVICE_CIDR
        )

    def labels_of(self, index: int) -> dict[str, str]:
        """Node `index`'s labels (1: the first node)."""
        return labels_of(index, self.node_labels, self.zones)

    @property
    def dns_ip(self) -> str:
        """The cluster DNS Service's address: the range's tenth, as kubeadm's 10.96.0.10."""
        return str(ipaddress.ip_network(self.services).network_address + 10)


def api_call(api_client, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """One request of any kind through the official client's connection and credentials: (status, the
    decoded body); a failure other than 409 raises."""
    from kubernetes.client.exceptions import ApiException

    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    params = api_client.param_serialize(method, path, header_params=headers, body=body)
    response = api_client.call_api(*params)
    response.read()
    if response.status >= 400 and response.status != 409:
        raise ApiException(http_resp=response)
    return response.status, json.loads(response.data or b"{}")


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


def _wait_for(condition: Callable[[], bool], timeout: float, failure: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{failure} after {timeout:.0f} s")
        time.sleep(interval)


class Stack:
    def __init__(self, config: StackConfig, progress: Progress | None = None) -> None:
        self.config = config
        # Where the start's stages are reported (`pykubelet up`'s terminal); silent by default.
        self.progress = progress or Progress(None)
        d = config.state_dir = Path(config.state_dir).resolve()
        self.registry = Registry(d / "registry", port=config.registry_port)
        self.network = stack_network(d, config.pod_cidr or DEFAULT_POD_CIDR, config.bridge)
        # The agent hosts this network: it installs the plugin, serves its calls and writes the conflist
        # for the pod CIDR (containerd reports NetworkReady from then on). The stack only knows where the
        # files are, to remove them at teardown.
        self.images: RigImages | None = None
        if config.store not in ("sqlite", "etcd"):
            raise ValueError(f"store {config.store!r}: sqlite or etcd")
        if config.store != "etcd" and (config.etcd_members > 1 or config.apiservers > 1):
            raise ValueError("several etcd members or API servers need store etcd")
        if config.nodes < 1:
            raise ValueError("nodes: at least 1")
        if config.nodes > 1 and not config.cluster_cidr:
            raise ValueError("several nodes need a cluster CIDR (the node IPAM gives each its pod CIDR)")
        if config.nodes > 1:
            config.tls_bootstrap = True  # every node joins through the bootstrap path
        if config.cluster_cidr:
            config.pod_cidr = ""  # known once the node IPAM allocated it (learn_pod_cidr)
        self.extra_nodes: list = []  # pykubelet.rig.nodes.StackNode, nodes 2..N
        self.etcd: Etcd | EtcdCluster | None = None
        if config.store == "etcd":
            self.etcd = (
                EtcdCluster(d / "etcd", config.etcd_members) if config.etcd_members > 1 else Etcd(d / "etcd")
            )
        for member in etcd_members(self.etcd):
            member.daemon.on_spawn = self._spawned
        self.replicas = None  # pykubelet.rig.apiserver.ApiServerReplicas with several API servers
        self.containerd: Containerd | None = None
        self.apiserver = None  # pykubelet.rig.apiserver.ApiServer
        self.agent: Daemon | None = None
        self.proxy: Daemon | None = None
        self.netpolicy: Daemon | None = None
        self.dns: Daemon | None = None
        self.metrics_server: Daemon | None = None
        self.metrics_server_port = free_port()
        self.ingress: Daemon | None = None
        self.csi = None  # pykubelet.rig.csi.HostPathCSI when config.csi_driver
        self.ingress_address = ""
        self.ingress_ports = (0, 0)
        self.dns_port = free_port()
        self.dns_address = ""
        # CoreDNS's /health, /ready and /metrics (8080, 8181, 9153 upstream), per stack on this host.
        self.dns_health_port = free_port()
        self.dns_ready_port = free_port()
        self.dns_metrics_port = free_port()
        self.proxy_table = proxy_table(config.bridge)
        self.netpolicy_table = netpolicy_table(config.bridge)
        self.proxy_healthz_port = free_port()
        self.proxy_metrics_port = free_port()
        self.kubelet_port = config.kubelet_port or free_port()
        # Each node of the host its own /healthz port (upstream's 10248 is for one kubelet per host).
        self.healthz_port = free_port()
        self.agent_config_path = d / "agent" / "kubelet-config.yaml"
        self.pod_logs_dir = d / "pod-logs"
        self._ready: list[str] = []
        self._recording = False
        self.registry.daemon.on_spawn = self._spawned

    @property
    def node_name(self) -> str:
        return self.config.node_name

    @property
    def kubeconfig(self) -> Path:
        """The administrator's kubeconfig (system:masters)."""
        assert self.apiserver is not None, "the API server is not started"
        return Path(self.apiserver.kubeconfig)

    @property
    def agent_kubeconfig(self) -> Path:
        """The node's own credentials (system:node:<name> in system:nodes), as kubeadm's kubelet.conf."""
        return self.config.state_dir / "agent" / "kubelet.kubeconfig"

    def write_agent_kubeconfig(self) -> Path:
        return self.client_kubeconfig(
            f"system:node:{self.node_name}", ("system:nodes",), self.agent_kubeconfig
        )

    def client_kubeconfig(self, user: str, groups: tuple[str, ...], path: Path) -> Path:
        """A kubeconfig for one of the stack's clients, naming every API server when there are several."""
        assert self.apiserver is not None, "the API server is not started"
        written = self.apiserver.client_kubeconfig(user, groups, path)
        return self.replicas.failover_kubeconfig(written) if self.replicas is not None else written

    # -- start -----------------------------------------------------------------------------------

    def start(self, wait_ready: float = 120.0) -> Stack:
        """Start every part in order, each a stage of `self.progress`; whatever interrupts it, what was
        started is stopped again."""
        d = self.config.state_dir
        d.mkdir(parents=True, exist_ok=True)
        stage = self.progress.stage
        self._recording = True
        try:
            self.record().save()  # before anything runs: where the network and the files will be
            with stage("registry", self.registry.daemon.log_path):
                self.registry.start()
                self._started("registry")
            with stage("images"):
                self.images = publish_test_images(self.registry.address)
            self.containerd = Containerd(
                d / "containerd",
                cni_bin_dir=self.network.bin_dir,
                cni_conf_dir=self.network.conf_dir,
                sandbox_image=self.images.pause,
                registry=self.registry.address,
            )
            self.containerd.daemon.on_spawn = self._spawned
            with stage("containerd", self.containerd.daemon.log_path):
                self.containerd.start()
                self._started("containerd")
            if self.etcd is not None:
                members = etcd_members(self.etcd)
                title = "etcd" if len(members) == 1 else f"etcd ({len(members)} members)"
                with stage(title, members[0].daemon.log_path):
                    self.etcd.start()
                    self._started("etcd")
            servers = (
                "API server" if self.config.apiservers == 1 else f"API servers ({self.config.apiservers})"
            )
            with stage(servers, lambda: self.apiserver.log_path if self.apiserver else None):
                self._start_apiservers()
                self._started("apiserver")
            with stage("DNS", lambda: self.dns.log_path if self.dns else None):
                self.start_dns()
            with stage(f"node {self.node_name}", lambda: self.agent.log_path if self.agent else None):
                self.start_agent(wait_ready=wait_ready)
            # The API server's children, started with it: checked once the first node is up (they came
            # up meanwhile), before the further nodes, whose certificates the controllers issue.
            with stage("scheduler", lambda: self._apiserver_dir / "scheduler.log"):
                self._wait_lease_held("kube-scheduler")
            with stage("controllers", lambda: self._apiserver_dir / "controller-manager.log"):
                self._wait_lease_held("kube-controller-manager")
                self._wait_default_service_account()
            self.start_nodes(wait_ready=wait_ready)
            with stage("service proxy", lambda: self.proxy.log_path if self.proxy else None):
                self.start_proxy()
            with stage("network policies", lambda: self.netpolicy.log_path if self.netpolicy else None):
                self.start_netpolicy()
            with stage(
                "metrics server", lambda: self.metrics_server.log_path if self.metrics_server else None
            ):
                self.start_metrics_server()
            with stage("ingress controller", lambda: self.ingress.log_path if self.ingress else None):
                self.start_ingress()
            if self.config.csi_driver:
                with stage("CSI driver", lambda: d / "csi-hostpath" / "driver.log"):
                    self.start_csi()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def _apiserver_dir(self) -> Path:
        return self.config.state_dir / "apiserver"

    def _start_apiservers(self) -> None:
        """The server runs the scheduler and the controller manager as its children, so pods without a
        nodeName land on our node and every namespace gets its service account and CA bundle. On every
        address, as upstream's default: pods reach it through their gateway (this host), with the
        credentials the ServiceAccount admission plugin mounts for them."""
        from pykubelet.rig.apiserver import ApiServer

        if self.config.apiservers > 1:
            if self.config.pod_cidr:  # with the node IPAM: once each node has its CIDR (start_agent)
                self._bridge_for_replicas(self.config.bridge, self.config.pod_cidr)
            self._start_replicas()
            return
        self.apiserver = ApiServer(
            self._apiserver_dir,
            port=self.config.api_port or free_port(),
            scheduler=True,
            controllers=True,
            extra_args=[
                "--bind-address",
                "0.0.0.0",
                *self._apiserver_extra_args(),
                *audit_args(self._apiserver_dir),
            ],
            etcd=self.etcd,
        )
        self.apiserver.daemon.on_spawn = self._spawned
        self.apiserver.start()

    def _wait_lease_held(self, name: str, timeout: float = 60.0) -> None:
        """Until a component (the scheduler, the controller manager) holds its kube-system Lease: it runs
        and reached the API server on its own identity."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        leases = client.CoordinationV1Api(self.core_api().api_client)

        def held() -> bool:
            try:
                return bool(leases.read_namespaced_lease(name, "kube-system").spec.holder_identity)
            except ApiException as err:
                if err.status == 404:
                    return False
                raise

        _wait_for(held, timeout, f"no holder of the Lease kube-system/{name}")

    def _wait_default_service_account(self, timeout: float = 60.0) -> None:
        """Until the controllers gave the namespace `default` its ServiceAccount (pods need it)."""
        from kubernetes.client.exceptions import ApiException

        core = self.core_api()

        def made() -> bool:
            try:
                core.read_namespaced_service_account("default", "default")
            except ApiException as err:
                if err.status == 404:
                    return False
                raise
            return True

        _wait_for(made, timeout, "the controllers made no ServiceAccount default/default")

    def _apiserver_extra_args(self) -> list[str]:
        """What every API server of the stack runs with beyond its address: bootstrap-token
        authentication (joining nodes), the local-path provisioner's root, Secrets encrypted at rest."""
        verify = [
            "--kubelet-certificate-authority",
            str(self.config.state_dir / "apiserver" / "pki" / "ca.crt"),
        ]
        ipam = [
            "--allocate-node-cidrs",
            "--cluster-cidr",
            self.config.cluster_cidr,
            "--node-cidr-mask-size",
            str(self.config.node_cidr_mask_size),
        ]
        return [
            "--enable-bootstrap-token-auth",
            "--service-cluster-ip-range",
            self.config.services,
            "--default-local-storage-path",
            str(self.config.state_dir / "local-path"),
            *(verify if self.config.verify_kubelets else []),
            *(ipam if self.config.cluster_cidr else []),
            *encryption_args(self.config.state_dir),  # Secrets encrypted at rest (rig/encryption.py)
        ]

    def _bridge_for_replicas(self, bridge: str, pod_cidr: str) -> None:
        """Pods reach the replicas through the `kubernetes` Service: the proxy DNATs 10.96.0.1:443 to a
        replica's own loopback address (127.0.0.<i>, the one address per replica one machine offers at one
        port). Linux routes a packet that arrives on a pod bridge to 127/8 only with the bridge's
        route_localnet on (the portmap plugin's setting for hostPorts on 127.0.0.1), so the stack makes
        each node's bridge, as the CNI plugin would at the first pod, with it on; the plugin reuses it and
        the network's removal takes it away. With the node IPAM a node's CIDR (its gateway) is known only
        once the node registered, so then this runs as each node becomes Ready, before any pod of it
        runs (the first node's before the controllers' wait; the further nodes' as each joins)."""
        import ipaddress

        from agent.cni import datapath

        subnet = ipaddress.IPv4Network(pod_cidr, strict=False)
        gateway = ipaddress.IPv4Interface(f"{subnet.network_address + 1}/{subnet.prefixlen}")
        with datapath.host_netlink() as rtnl:
            datapath.ensure_bridge(rtnl, bridge, gateway, self.network.mtu or 1500, True)

    def _start_replicas(self) -> None:
        """Several API servers on the stack's etcd, each with its scheduler and controller manager (they
        leader-elect), each on its own loopback address and the same port (`ApiServerReplicas`). The
        first replica keeps <state>/apiserver, so the admin kubeconfig is where it always is; it and the
        node's, proxy's and DNS's kubeconfigs name every replica for kubeclient's failover."""
        from pykubelet.rig.apiserver import ApiServerReplicas

        assert self.etcd is not None
        d = self.config.state_dir / "apiserver"
        dirs = [d] + [d / f"replica-{i}" for i in range(1, self.config.apiservers)]
        self.replicas = ApiServerReplicas(
            d,
            self.config.apiservers,
            self.etcd,
            port=self.config.api_port or free_port(),
            data_dirs=dirs,
            scheduler=True,
            controllers=True,
            extra_args=self._apiserver_extra_args(),
            per_server_args=audit_args,
        )
        for server in self.replicas.servers:
            server.daemon.on_spawn = self._spawned
        self.apiserver = self.replicas.servers[0]
        self.replicas.start()
        self.replicas.failover_kubeconfig(self.apiserver.kubeconfig)

    def _spawned(self, _pid: int) -> None:
        if self._recording:
            self.record().save()

    def _started(self, name: str) -> None:
        if name not in self._ready:
            self._ready.append(name)
        self._spawned(0)

    def write_agent_config(self) -> Path:
        self.agent_config_path.parent.mkdir(parents=True, exist_ok=True)
        self.pod_logs_dir.mkdir(parents=True, exist_ok=True)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # With the node IPAM on the pod CIDR is the Node's spec.podCIDR, as upstream's kubelet reads it.
            **({"podCIDR": self.config.pod_cidr} if not self.config.cluster_cidr else {}),
            "podLogsDir": str(self.pod_logs_dir),
            "clusterDomain": "cluster.local",
            "resolvConf": "/etc/resolv.conf",
            # Pods resolve through the cluster DNS (the kube-dns Service, carried by the service proxy).
            "clusterDNS": [self.config.dns_ip],
            "port": self.kubelet_port,
            "healthzPort": self.healthz_port,
            # The kubelet API accepts client certificates from the cluster's CA (the API server's own).
            "authentication": {"x509": {"clientCAFile": str(self.apiserver.ca_cert)}},
        }
        self.agent_config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        return self.agent_config_path

    def create_bootstrap_token(self, ttl: int = 3600) -> str:
        """A fresh bootstrap token (kubeadm's default group and usages), valid for `ttl` seconds."""
        from kubernetes import client

        from kubeclient import bootstraptoken as bt

        assert self.apiserver is not None, "the API server is not started"
        token = bt.generate()
        with self.apiserver.api_client() as api:
            client.CoreV1Api(api).create_namespaced_secret(bt.NAMESPACE, bt.token_secret(token, ttl))
        return token

    def write_bootstrap_kubeconfig(self) -> Path:
        """A kubeconfig holding a fresh bootstrap token (kubeadm's default group, valid for an hour)."""
        import base64

        assert self.apiserver is not None, "the API server is not started"
        token = self.create_bootstrap_token()
        ca = base64.b64encode(self.apiserver.ca_cert.read_bytes()).decode()
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "c", "cluster": {"server": self.apiserver.url, "certificate-authority-data": ca}}
            ],
            "users": [{"name": "tls-bootstrap-token-user", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "tls-bootstrap-token-user"}}],
            "current-context": "c",
        }
        path = self.config.state_dir / "agent" / "bootstrap-kubelet.conf"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(doc, f)
        return path

    def _agent_credentials(self) -> list[str]:
        if not self.config.tls_bootstrap:
            return ["--kubeconfig", str(self.write_agent_kubeconfig())]
        return [
            "--kubeconfig",
            str(self.config.state_dir / "agent" / "kubeconfig"),
            "--bootstrap-kubeconfig",
            str(self.write_bootstrap_kubeconfig()),
            "--rotate-certificates",
        ]

    def agent_argv(self) -> list[str]:
        assert self.containerd is not None
        return [
            sys.executable,
            "-m",
            "pykubelet",
            "agent",
            *self._agent_credentials(),
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
            *node_labels_args(node_labels_flag(self.config.labels_of(1))),
        ]

    def start_agent(self, wait_ready: float = 120.0) -> Daemon:
        """Start (or restart) the agent and wait until its Node reports Ready."""
        if self.agent is not None and self.agent.running():
            raise RuntimeError("the agent is already running")
        self.agent = Daemon(
            "pykubelet agent",
            self.agent_argv(),
            self.config.state_dir / "agent" / "agent.log",
            on_spawn=self._spawned,
        )
        self.agent.start(self.node_ready, timeout=wait_ready, interval=0.5)
        if self.config.cluster_cidr:
            self.learn_pod_cidr()
            if self.config.apiservers > 1:
                self._bridge_for_replicas(self.config.bridge, self.config.pod_cidr)
        self._started("agent")
        return self.agent

    def learn_pod_cidr(self) -> str:
        """The first node's pod CIDR as the node IPAM allocated it: recorded for down and the teardown."""
        self.config.pod_cidr = self.network.pod_cidr = self.pod_cidr_of(self.node_name)
        self._spawned(0)
        return self.config.pod_cidr

    def pod_cidr_of(self, name: str) -> str:
        return self.core_api().read_node(name).spec.pod_cidr or ""

    def start_nodes(self, wait_ready: float = 120.0) -> None:
        """Nodes 2..N, one after another, each joined by TLS bootstrap and Ready before the next."""
        from pykubelet.rig.nodes import StackNode

        for index in range(len(self.extra_nodes) + 2, self.config.nodes + 1):
            node = StackNode(self, index)
            self.extra_nodes.append(node)
            with self.progress.stage(f"node {node.name}", node.log_path):
                node.start(wait_ready=wait_ready)
                if self.config.apiservers > 1:
                    self._bridge_for_replicas(node.plan.bridge, node.pod_cidr)
            self._started(f"node-{index}")

    @property
    def node_names(self) -> list[str]:
        return [self.node_name, *(n.name for n in self.extra_nodes)]

    @property
    def proxy_kubeconfig(self) -> Path:
        return self.config.state_dir / "proxy" / "proxy.kubeconfig"

    def proxy_argv(self) -> list[str]:
        """The service proxy on its own identity, system:kube-proxy (bound to system:node-proxier), as
        kubeadm runs kube-proxy."""
        assert self.apiserver is not None
        kubeconfig = self.client_kubeconfig("system:kube-proxy", (), self.proxy_kubeconfig)
        return [
            sys.executable,
            "-m",
            "pykubelet",
            "proxy",
            "--kubeconfig",
            str(kubeconfig),
            "--hostname-override",
            self.node_name,
            "--cluster-cidr",
            self.config.cluster_cidr or self.config.pod_cidr,
            "--nft-table",
            self.proxy_table,
            "--healthz-bind-address",
            f"127.0.0.1:{self.proxy_healthz_port}",
            "--metrics-bind-address",
            f"127.0.0.1:{self.proxy_metrics_port}",
            # the API server's service range (it serves no ServiceCIDR objects for the proxy to read)
            "--service-cidrs",
            self.config.services,
        ]

    def start_proxy(self, timeout: float = 60.0) -> Daemon:
        """Start (or restart) the service proxy and wait until it has written its table."""
        if self.proxy is not None and self.proxy.running():
            raise RuntimeError("the proxy is already running")
        self.proxy = Daemon(
            "pykubelet proxy",
            self.proxy_argv(),
            self.config.state_dir / "proxy" / "proxy.log",
            on_spawn=self._spawned,
        )
        self.proxy.start(self.proxy_synced, timeout=timeout, interval=0.2)
        self._started("proxy")
        return self.proxy

    def proxy_synced(self) -> bool:
        import subprocess

        listed = subprocess.run(
            ["nft", "list", "chain", "ip", self.proxy_table, "services"],
            capture_output=True,
            text=True,
            check=False,
        )
        return listed.returncode == 0

    def stop_proxy(self, cleanup: bool = True) -> None:
        """Stop the proxy (its rules stay, as kube-proxy's do); `cleanup` then removes its table."""
        import subprocess

        if self.proxy is not None:
            self.proxy.stop()
        if cleanup:
            subprocess.run(proxy_cleanup_argv(self.proxy_table), capture_output=True, check=False, timeout=60)

    def start_netpolicy(self, timeout: float = 60.0) -> Daemon:
        """The network-policy agent beside the service proxy, for every node of this host (they share
        its forward hook), on its own identity with the RBAC its addon manifest carries; waits until it
        has written its table."""
        from netpolicy import rbac

        assert self.apiserver is not None
        if self.netpolicy is not None and self.netpolicy.running():
            raise RuntimeError("the network-policy agent is already running")
        d = self.config.state_dir / "netpolicy"
        for obj in rbac.manifests():
            self.apply(obj)
        kubeconfig = self.client_kubeconfig(rbac.USER, (), d / "netpolicy.kubeconfig")
        nodes = [arg for name in self.node_names for arg in ("--node-name", name)]
        argv = [
            sys.executable,
            "-m",
            "pykubelet",
            "netpolicy",
            "--kubeconfig",
            str(kubeconfig),
            "--nft-table",
            self.netpolicy_table,
            *nodes,
        ]
        self.netpolicy = Daemon("pykubelet netpolicy", argv, d / "netpolicy.log", on_spawn=self._spawned)
        self.netpolicy.start(self.netpolicy_synced, timeout=timeout, interval=0.2)
        self._started("netpolicy")
        return self.netpolicy

    def netpolicy_synced(self) -> bool:
        import subprocess

        listed = subprocess.run(
            ["nft", "list", "chain", "inet", self.netpolicy_table, "forward"],
            capture_output=True,
            text=True,
            check=False,
        )
        return listed.returncode == 0

    def stop_netpolicy(self, cleanup: bool = True) -> None:
        """Stop the agent (its rules stay, so pods stay protected across a restart); `cleanup` then
        removes its table."""
        import subprocess

        if self.netpolicy is not None:
            self.netpolicy.stop()
        if cleanup:
            subprocess.run(
                netpolicy_cleanup_argv(self.netpolicy_table), capture_output=True, check=False, timeout=60
            )

    def start_dns(self, timeout: float = 60.0) -> Daemon:
        """The cluster DNS on the host (the node's address, a free port) on its own identity, and the
        kube-dns Service and EndpointSlice pointing at it, as a genuine cluster has them. It binds the
        node's address, not all of them: a UDP answer must leave from the address the question went to
        (pods ask through the bridge, whose own address would otherwise be the source)."""
        from kubeclient.hostaddr import default_route_ip

        assert self.apiserver is not None
        self.dns_address = default_route_ip()
        kubeconfig = self.client_kubeconfig(
            DNS_USER, DNS_GROUPS, self.config.state_dir / "dns" / "dns.kubeconfig"
        )
        argv = dns_argv(
            kubeconfig,
            self.dns_address,
            self.dns_port,
            (self.dns_health_port, self.dns_ready_port, self.dns_metrics_port),
        )
        self.dns = Daemon(
            "pykubelet dns", argv, self.config.state_dir / "dns" / "dns.log", on_spawn=self._spawned
        )
        self.dns.start(self._dns_answers, timeout=timeout, interval=0.2)
        self._publish_kube_dns()
        self._started("dns")
        return self.dns

    def _dns_answers(self) -> bool:
        from dnslib import DNSRecord

        try:
            reply = DNSRecord.parse(
                DNSRecord.question("kubernetes.default.svc.cluster.local").send(
                    self.dns_address, self.dns_port, timeout=1
                )
            )
        except OSError:
            return False
        return bool(reply.rr)

    def _publish_kube_dns(self) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        api = self.core_api()
        ports = [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": self.dns_port},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": self.dns_port},
        ]
        service = {
            "metadata": {
                "name": "kube-dns",
                "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"},
            },
            "spec": {"clusterIP": self.config.dns_ip, "ports": ports},
        }
        endpoints = {
            "metadata": {
                "name": "kube-dns-host",
                "labels": {"kubernetes.io/service-name": "kube-dns", "k8s-app": "kube-dns"},
            },
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": [self.dns_address], "conditions": {"ready": True}, "nodeName": self.node_name}
            ],
            "ports": [{"name": p["name"], "port": self.dns_port, "protocol": p["protocol"]} for p in ports],
        }
        discovery = client.DiscoveryV1Api(api.api_client)
        for create in (
            lambda: api.create_namespaced_service("kube-system", service),
            lambda: discovery.create_namespaced_endpoint_slice("kube-system", endpoints),
        ):
            try:
                create()
            except ApiException as err:
                if err.status != 409:
                    raise

    def start_metrics_server(self, timeout: float = 60.0) -> Daemon:
        """The metrics server on the host (the node's address, a free port) on its own identity
        (kube-system/metrics-server), with components.yaml's RBAC, and the Service, Endpoints and
        v1beta1.metrics.k8s.io APIService that put it behind the aggregation layer; waits until the
        APIService is Available."""
        from kubeclient.hostaddr import default_route_ip
        from metricsserver import manifest

        assert self.apiserver is not None
        d = self.config.state_dir / "metrics-server"
        address = default_route_ip()
        for obj in manifest.rbac():
            self.apply(obj)
        kubeconfig = self.apiserver.client_kubeconfig(manifest.USER, manifest.GROUPS, d / "kubeconfig")
        argv = [
            sys.executable,
            "-m",
            "pykubelet",
            "metrics-server",
            "--kubeconfig",
            str(kubeconfig),
            "--bind-address",
            address,
            "--secure-port",
            str(self.metrics_server_port),
            "--cert-dir",
            str(d / "pki"),
            "--kubelet-preferred-address-types",
            "InternalIP,ExternalIP,Hostname",
            "--kubelet-use-node-status-port",
            # The kubelet's serving certificate is self-signed, as in kind; metrics-server is run so there.
            "--kubelet-insecure-tls",
        ]
        self.metrics_server = Daemon(
            "pykubelet metrics-server", argv, d / "metrics-server.log", on_spawn=self._spawned
        )
        self.metrics_server.start(
            lambda: (d / "pki" / "apiserver.crt").exists(), timeout=timeout, interval=0.2
        )
        for obj in manifest.service(address, self.metrics_server_port):
            self.apply(obj)
        self.apply(manifest.apiservice((d / "pki" / "apiserver.crt").read_bytes()))
        self._wait_apiservice_available("v1beta1.metrics.k8s.io", timeout)
        self._started("metrics-server")
        return self.metrics_server

    def start_ingress(self, timeout: float = 60.0) -> Daemon:
        """The ingress controller (pykubelet.rig.ingress) on its address (see StackConfig.ingress_address),
        with the default IngressClass `nginx`; waits until its nginx runs."""
        from kubeclient.hostaddr import default_route_ip
        from pykubelet.rig import ingress

        assert self.apiserver is not None
        self.ingress_address = (
            self.config.ingress_address
            or loopback_for(self.config.cluster_cidr or self.config.pod_cidr)
            or default_route_ip()
        )
        self.ingress_ports = ingress.pick_ports(self.ingress_address, self.config.ingress_ports)
        self.ingress = ingress.start_controller(
            self.config.state_dir,
            self.apply,
            self.apiserver.client_kubeconfig,
            self.ingress_address,
            self.ingress_ports,
            on_spawn=self._spawned,
            timeout=timeout,
        )
        self._started("ingress")
        return self.ingress

    def _wait_apiservice_available(self, name: str, timeout: float) -> None:
        api = self.core_api().api_client
        deadline = time.monotonic() + timeout
        while True:
            _, obj = api_call(api, "GET", f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
            conditions = (obj.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"APIService {name} not Available after {timeout:.0f} s: {conditions}")
            time.sleep(0.2)

    def start_csi(self, timeout: float = 30.0):
        """The host-path CSI driver and its sidecars beside the first node (pykubelet.rig.csi; their
        manager on its own identity, each sidecar on its account), its CSIDriver and StorageClass (default
        only when no other class is)."""
        from pykubelet.rig.csi import MANAGER_USER, HostPathCSI

        d = self.config.state_dir
        self.csi = HostPathCSI(
            d / "csi-hostpath",
            self.node_name,
            d / "agent" / "plugins_registry",
            self.client_kubeconfig(MANAGER_USER, (), d / "csi-hostpath" / "sidecars.kubeconfig"),
            (self.apiserver.ca_cert, self.apiserver.ca_key),
            self._spawned,
        )
        api = self.core_api().api_client
        self.csi.start(
            self.apply,
            lambda: api_call(api, "GET", "/apis/storage.k8s.io/v1/storageclasses")[1].get("items") or [],
            timeout,
        )
        self._started("csi-driver")
        return self.csi

    def apply(self, obj: dict) -> dict:
        """Create the object, or replace it when it exists (as `kubectl apply` of a manifest would
        leave it), through the official client as the administrator."""
        api = self.core_api().api_client
        api_version, kind = obj["apiVersion"], obj["kind"]
        plural = {"Endpoints": "endpoints"}.get(kind) or kind.lower() + ("es" if kind.endswith("s") else "s")
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        namespace = obj["metadata"].get("namespace")
        collection = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"

        code, created = api_call(api, "POST", collection, obj)
        if code != 409:
            return created
        path = f"{collection}/{obj['metadata']['name']}"
        _, current = api_call(api, "GET", path)
        body = {
            **obj,
            "metadata": {**obj["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]},
        }
        if "status" in current:
            body.setdefault("status", current["status"])
        return api_call(api, "PUT", path, body)[1]

    def node_ready(self) -> bool:
        return self.ready(self.node_name)

    def ready(self, name: str) -> bool:
        node = self.core_api().read_node(name)
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
            *((f"etcd-{m.name}" if m.name != "default" else "etcd", m.pid) for m in etcd_members(self.etcd)),
            ("apiserver", self.apiserver.pid if self.apiserver else None),
            *(
                (f"apiserver-{i}", r.pid)
                for i, r in enumerate(self.replicas.servers[1:] if self.replicas else [], 1)
            ),
            ("agent", self.agent.pid if self.agent else None),
            ("proxy", self.proxy.pid if self.proxy else None),
            ("netpolicy", self.netpolicy.pid if self.netpolicy else None),
            ("dns", self.dns.pid if self.dns else None),
            ("metrics-server", self.metrics_server.pid if self.metrics_server else None),
            ("ingress", self.ingress.pid if self.ingress else None),
            ("csi-driver", self.csi.driver.pid if self.csi and self.csi.driver else None),
            ("csi-sidecars", self.csi.sidecars.pid if self.csi and self.csi.sidecars else None),
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
            ready=list(self._ready),
            proxy_table=self.proxy_table,
            netpolicy_table=self.netpolicy_table,
        )

    def supervised(self) -> list:
        """Every daemon of the started stack a supervisor keeps running (pykubelet.rig.supervisor): the
        registry, the etcd members, the API servers, the service proxy, the network-policy agent, the DNS,
        the metrics server, the ingress controller, each node's agent and containerd, each with the command line, log and record key it was started with."""
        from pykubelet.rig.supervisor import Supervised

        d = str(self.config.state_dir)
        servers = self.replicas.servers if self.replicas is not None else [self.apiserver]
        named: list[tuple[str, Daemon | None, str, bool]] = [
            ("registry", self.registry.daemon, d, True),
            ("containerd", self.containerd.daemon if self.containerd else None, d, False),
            *(
                (f"etcd-{m.name}" if m.name != "default" else "etcd", m.daemon, d, True)
                for m in etcd_members(self.etcd)
            ),
            *(
                (f"apiserver-{i}" if i else "apiserver", s.daemon, d, True)
                for i, s in enumerate(servers)
                if s
            ),
            ("agent", self.agent, d, True),
            ("proxy", self.proxy, d, True),
            ("netpolicy", self.netpolicy, d, True),
            ("dns", self.dns, d, True),
            ("metrics-server", self.metrics_server, d, True),
            # its nginx runs in its process group: stopped with it, started again by it
            ("ingress", self.ingress, d, True),
            ("csi-driver", self.csi.driver if self.csi else None, d, True),
            ("csi-sidecars", self.csi.sidecars if self.csi else None, d, True),
        ]
        for node in self.extra_nodes:
            named += [
                (f"{node.name}/containerd", node.containerd.daemon, str(node.root), False),
                (f"{node.name}/agent", node.agent, str(node.root), True),
            ]
        return [
            Supervised(
                name=name,
                argv=list(daemon.argv),
                log_path=str(daemon.log_path),
                record_dir=record_dir,
                record_key=name.rsplit("/", 1)[-1],
                pid=daemon.pid or 0,
                kill_group=group,
                env=daemon.env,
            )
            for name, daemon, record_dir, group in named
            if daemon is not None
        ]

    # -- stop ------------------------------------------------------------------------------------

    def _conflist_written(self) -> bool:
        """Whether the first node's agent started its network (with the IPAM: for a CIDR not yet
        learned); then the conflist names that CIDR and the teardown removes it."""
        try:
            doc = json.loads(self.network.conflist_path.read_text())
            self.network.pod_cidr = doc["plugins"][0]["ipam"]["ranges"][0][0]["subnet"]
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            return False
        return True

    def stop(self) -> list[str]:
        """Stop everything in reverse order; returns a description of anything left behind."""
        problems = []
        if self.csi is not None:
            self.csi.stop()
        if self.ingress is not None:
            self.ingress.stop()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        self.stop_netpolicy()
        self.stop_proxy()
        if self.dns is not None:
            self.dns.stop()
        for node in reversed(self.extra_nodes):
            problems += node.stop()
        if self.agent is not None:
            self.agent.stop()
        if self.replicas is not None:
            self.replicas.stop()
        elif self.apiserver is not None:
            self.apiserver.stop()
        if self.etcd is not None:
            self.etcd.stop()
        if self.containerd is not None:
            left = self.containerd.stop()
            if not left.empty():
                problems.append(f"containerd left {left}")
        if self.config.pod_cidr or self._conflist_written():
            self.network.remove()
        self.registry.stop()
        self._recording = False
        (self.config.state_dir / RECORD_FILE).unlink(missing_ok=True)
        return problems
