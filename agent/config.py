"""The agent's settings: a subset of upstream's KubeletConfiguration (kubelet.config.k8s.io/v1beta1) plus
the flags that only exist as flags, folded into one dataclass.

Field names and defaults follow upstream, so a config file written for the upstream kubelet means the
same here (fields we do not implement are ignored with a warning, never misread). Flags win over the
file, as upstream.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kubeclient.duration import parse_duration as _parse_duration

log = logging.getLogger("agent.config")

API_VERSION = "kubelet.config.k8s.io/v1beta1"
KIND = "KubeletConfiguration"

# Upstream's default hard eviction thresholds (pkg/kubelet/eviction/defaults_linux.go).
DEFAULT_EVICTION_HARD = {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
}


class ConfigFileError(Exception):
    pass


def parse_duration(value: str | int | float) -> float:
    """A Go duration ("10s", "5m0s", "1h30m", "250ms") in seconds."""
    try:
        return _parse_duration(value)
    except ValueError as err:
        raise ConfigFileError(str(err)) from None


@dataclass
class AgentConfig:
    node_name: str = ""
    kubeconfig: str | None = None
    # TLS bootstrap (agent/node/bootstrap.py): without a usable client certificate in `kubeconfig`
    # (default ROOT/kubeconfig), get one through a CSR with this kubeconfig's credential.
    bootstrap_kubeconfig: str | None = None
    cert_dir: str = ""  # where the client certificate lives (default ROOT/pki)
    rotate_certificates: bool = False  # renew the client certificate at 70-90 % of its life (certrotation.py)
    # The kubelet API's serving certificate through a kubelet-serving CSR (agent/node/servingcert.py).
    server_tls_bootstrap: bool = False
    container_runtime_endpoint: str = "unix:///run/containerd/containerd.sock"
    image_service_endpoint: str | None = None
    root_dir: str = "/var/lib/kubelet"
    pod_cidr: str = ""
    pod_logs_dir: str = "/var/log/pods"
    cluster_domain: str = ""
    cluster_dns: list[str] = field(default_factory=list)
    resolv_conf: str = "/etc/resolv.conf"
    port: int = 10250  # the kubelet API (HTTPS); 0 turns it off
    address: str = "0.0.0.0"
    tls_cert_file: str = ""
    tls_private_key_file: str = ""
    client_ca_file: str = ""
    anonymous_auth: bool = False
    # The kubelet API's delegation to the API server, with the config file's defaults: bearer tokens
    # through TokenReview (authentication.webhook), requests through SubjectAccessReview (Webhook mode).
    webhook_authentication: bool = True
    webhook_authentication_cache_ttl: float = 120.0
    authorization_mode: str = "Webhook"  # or AlwaysAllow
    authorization_authorized_ttl: float = 300.0
    authorization_unauthorized_ttl: float = 30.0
    node_ip: str = ""
    node_labels: dict[str, str] = field(default_factory=dict)
    kube_api_qps: float = 50.0
    kube_api_burst: int = 100
    event_record_qps: float = 50.0  # events have their own budget, as upstream's eventRecordQPS/eventBurst
    event_burst: int = 100
    node_status_update_frequency: float = 10.0
    node_status_report_frequency: float = 300.0
    node_lease_duration_seconds: int = 40
    sync_frequency: float = 60.0
    serialize_image_pulls: bool = True
    max_pods: int = 110
    allowed_unsafe_sysctls: list[str] = field(default_factory=list)
    system_reserved: dict[str, str] = field(default_factory=dict)
    kube_reserved: dict[str, str] = field(default_factory=dict)
    eviction_hard: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_EVICTION_HARD))
    cgroups_per_qos: bool = True
    cgroup_root: str = "/"
    cgroup_driver: str = "cgroupfs"
    # The cgroups the Summary lists as the kubelet's and the runtime's system containers (upstream's
    # kubeletCgroups / runtimeCgroups; empty: this process's own, and the CRI socket's serving process's).
    kubelet_cgroups: str = ""
    runtime_cgroups: str = ""
    # Pull backoff and crash-loop backoff (upstream: 10 s doubling to 300 s for both).
    backoff_initial: float = 10.0
    backoff_max: float = 300.0
    container_log_max_size: str = "10Mi"
    container_log_max_files: int = 5
    # How often the PLEG-like relist runs (upstream relists every second).
    relist_period: float = 1.0
    # pykubelet's own pod network (agent/cni). Upstream kubelets leave CNI to the runtime and a network
    # add-on; with cni_conf_dir set, this agent is that add-on for its node: it installs pykubelet-cni into
    # cni_bin_dir, serves its CNI calls from this process and writes the conflist for the pod CIDR.
    cni_conf_dir: str = ""
    cni_bin_dir: str = "/opt/cni/bin"
    cni_data_dir: str = "/var/lib/cni/networks"
    cni_bridge: str = "cni0"

    def __post_init__(self) -> None:
        if not self.node_name:
            self.node_name = socket.gethostname().lower()


# config-file key -> (dataclass field, converter)
_FILE_FIELDS: dict[str, tuple[str, Any]] = {
    "podCIDR": ("pod_cidr", str),
    "rotateCertificates": ("rotate_certificates", bool),
    "serverTLSBootstrap": ("server_tls_bootstrap", bool),
    "podLogsDir": ("pod_logs_dir", str),
    "clusterDomain": ("cluster_domain", str),
    "clusterDNS": ("cluster_dns", list),
    "resolvConf": ("resolv_conf", str),
    "port": ("port", int),
    "kubeAPIQPS": ("kube_api_qps", float),
    "kubeAPIBurst": ("kube_api_burst", int),
    "eventRecordQPS": ("event_record_qps", float),
    "eventBurst": ("event_burst", int),
    "nodeStatusUpdateFrequency": ("node_status_update_frequency", parse_duration),
    "nodeStatusReportFrequency": ("node_status_report_frequency", parse_duration),
    "nodeLeaseDurationSeconds": ("node_lease_duration_seconds", int),
    "syncFrequency": ("sync_frequency", parse_duration),
    "serializeImagePulls": ("serialize_image_pulls", bool),
    "maxPods": ("max_pods", int),
    "allowedUnsafeSysctls": ("allowed_unsafe_sysctls", list),
    "systemReserved": ("system_reserved", dict),
    "kubeReserved": ("kube_reserved", dict),
    "evictionHard": ("eviction_hard", dict),
    "cgroupsPerQOS": ("cgroups_per_qos", bool),
    "cgroupRoot": ("cgroup_root", str),
    "cgroupDriver": ("cgroup_driver", str),
    "kubeletCgroups": ("kubelet_cgroups", str),
    "runtimeCgroups": ("runtime_cgroups", str),
    "containerRuntimeEndpoint": ("container_runtime_endpoint", str),
    "address": ("address", str),
    "containerLogMaxSize": ("container_log_max_size", str),
    "containerLogMaxFiles": ("container_log_max_files", int),
    "tlsCertFile": ("tls_cert_file", str),
    "tlsPrivateKeyFile": ("tls_private_key_file", str),
    "imageServiceEndpoint": ("image_service_endpoint", str),
}
_IGNORED_QUIETLY = {"apiVersion", "kind", "staticPodPath"}


def load_config_file(path: str | Path, into: AgentConfig | None = None) -> AgentConfig:
    cfg = into or AgentConfig()
    try:
        doc = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as err:
        raise ConfigFileError(f"cannot read {path}: {err.strerror}") from None
    if not isinstance(doc, dict):
        raise ConfigFileError(f"{path}: not a KubeletConfiguration object")
    if doc.get("kind", KIND) != KIND or doc.get("apiVersion", API_VERSION) != API_VERSION:
        raise ConfigFileError(
            f"{path}: expected {API_VERSION} {KIND}, got {doc.get('apiVersion')} {doc.get('kind')}"
        )
    for key, value in doc.items():
        if key in _FILE_FIELDS:
            name, conv = _FILE_FIELDS[key]
            try:
                setattr(cfg, name, conv(value))
            except (TypeError, ValueError) as err:
                raise ConfigFileError(f"{path}: {key}: {err}") from None
        elif key == "authentication" and isinstance(value, dict):
            _authentication(cfg, value, path)
        elif key == "authorization" and isinstance(value, dict):
            _authorization(cfg, value, path)
        elif key not in _IGNORED_QUIETLY:
            log.warning("config field not supported, ignored field=%s", key)
    if cfg.cgroup_driver not in ("cgroupfs", "systemd"):
        raise ConfigFileError(f"{path}: cgroupDriver must be cgroupfs or systemd")
    return cfg


def _authentication(cfg: AgentConfig, value: dict[str, Any], path: str | Path) -> None:
    cfg.client_ca_file = ((value.get("x509") or {}).get("clientCAFile")) or cfg.client_ca_file
    cfg.anonymous_auth = bool((value.get("anonymous") or {}).get("enabled", cfg.anonymous_auth))
    webhook = value.get("webhook") or {}
    cfg.webhook_authentication = bool(webhook.get("enabled", cfg.webhook_authentication))
    if "cacheTTL" in webhook:
        cfg.webhook_authentication_cache_ttl = parse_duration(webhook["cacheTTL"])


def _authorization(cfg: AgentConfig, value: dict[str, Any], path: str | Path) -> None:
    mode = value.get("mode", cfg.authorization_mode)
    if mode not in ("AlwaysAllow", "Webhook"):
        raise ConfigFileError(f"{path}: authorization.mode must be AlwaysAllow or Webhook, got {mode!r}")
    cfg.authorization_mode = mode
    webhook = value.get("webhook") or {}
    if "cacheAuthorizedTTL" in webhook:
        cfg.authorization_authorized_ttl = parse_duration(webhook["cacheAuthorizedTTL"])
    if "cacheUnauthorizedTTL" in webhook:
        cfg.authorization_unauthorized_ttl = parse_duration(webhook["cacheUnauthorizedTTL"])


def parse_labels(text: str) -> dict[str, str]:
    """--node-labels k1=v1,k2=v2"""
    labels: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        labels[key] = value
    return labels
