"""The agent's settings: a subset of upstream's KubeletConfiguration (kubelet.config.k8s.io/v1beta1) plus
the flags that only exist as flags, folded into one dataclass.

Field names and defaults follow upstream, so a config file written for the upstream kubelet means the
same here: each field is honoured, or accepted only at upstream's default and refused by name otherwise
(agent/configfields.py), and an unknown field is refused, as upstream's strict decoding does. Drop-ins
of --config-dir (`*.conf`, KEP-3983) merge over the file; flags win over both, as upstream.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent.configfields import (
    BOOL,
    FIELDS,
    INT,
    STRUCTURED,
    DefaultOnly,
    Field,
    FieldError,
    Honoured,
    at_default,
    duration,
    is_zero,
)
from agent.taints import TaintError, taints_from_config

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
        return duration(value)
    except FieldError as err:
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
    enable_server: bool = True  # upstream's enableServer: false serves no kubelet API at all
    # Upstream's plain-HTTP /healthz on localhost (what kubeadm polls); 0 turns it off.
    healthz_port: int = 10248
    healthz_bind_address: str = "127.0.0.1"
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
    # Taints the Node is created with (registerWithTaints / --register-with-taints), as v1.Taint dicts.
    register_with_taints: list[dict[str, str]] = field(default_factory=list)
    provider_id: str = ""  # spec.providerID at registration
    # Static pods (agent/staticpods): a directory of manifests (or one file), re-read every
    # fileCheckFrequency besides the inotify watch.
    static_pod_path: str = ""
    file_check_frequency: float = 20.0
    runtime_request_timeout: float = 120.0  # CRI calls that create, start, stop or remove things
    fail_swap_on: bool = True  # refuse to start while swap is on (upstream's failSwapOn)
    verbosity: int = 0  # logging.verbosity; -v wins
    logging_format: str = ""  # logging.format; --logging-format wins
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


def read_document(path: str | Path) -> dict[str, Any]:
    """One KubeletConfiguration file as a mapping, its kind and apiVersion checked."""
    try:
        doc = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as err:
        raise ConfigFileError(f"cannot read {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ConfigFileError(f"{path}: not YAML: {err}") from None
    if not isinstance(doc, dict):
        raise ConfigFileError(f"{path}: not a KubeletConfiguration object")
    if doc.get("kind", KIND) != KIND or doc.get("apiVersion", API_VERSION) != API_VERSION:
        raise ConfigFileError(
            f"{path}: expected {API_VERSION} {KIND}, got {doc.get('apiVersion')} {doc.get('kind')}"
        )
    return doc


def merge_documents(base: dict[str, Any], dropin: dict[str, Any]) -> dict[str, Any]:
    """A drop-in over what came before, as upstream decodes it onto the struct already filled: objects
    merge field by field (maps key by key), lists and scalars replace."""
    out = dict(base)
    for key, value in dropin.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_documents(out[key], value)
        else:
            out[key] = value
    return out


def dropin_files(directory: str | Path) -> list[Path]:
    """The `*.conf` files of --config-dir in upstream's order (filepath.WalkDir: lexical, depth first)."""
    root = Path(directory)
    if not root.is_dir():
        raise ConfigFileError(f"--config-dir {directory}: not a directory")
    found: list[Path] = []

    def walk(folder: Path) -> None:
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            if entry.is_dir():
                walk(entry)
            elif entry.suffix == ".conf":
                found.append(entry)

    walk(root)
    return found


def load_config(path: str | None, config_dir: str | None, into: AgentConfig | None = None) -> AgentConfig:
    """--config, then each drop-in of --config-dir merged over it (KEP-3983), applied to the defaults."""
    doc: dict[str, Any] = read_document(path) if path else {}
    where = str(path or config_dir)
    for dropin in dropin_files(config_dir) if config_dir else []:
        doc = merge_documents(doc, read_document(dropin))
    return apply_document(doc, where, into)


def load_config_file(path: str | Path, into: AgentConfig | None = None) -> AgentConfig:
    return apply_document(read_document(path), str(path), into)


def apply_document(doc: dict[str, Any], path: str, into: AgentConfig | None = None) -> AgentConfig:
    """Every field honoured or refused by name (agent/configfields.py); unknown fields refused as
    upstream's strict decoder refuses them."""
    cfg = into or AgentConfig()
    for key, value in doc.items():
        if key in ("apiVersion", "kind"):
            continue
        spec = FIELDS.get(key)
        if spec is None:
            raise ConfigFileError(f'{path}: strict decoding error: unknown field "{key}"')
        try:
            _apply(cfg, key, spec, value)
        except (FieldError, TaintError, TypeError, ValueError) as err:
            raise ConfigFileError(f"{path}: {key}: {err}") from None
    if not is_zero(doc.get("nodeStatusUpdateFrequency")) and is_zero(doc.get("nodeStatusReportFrequency")):
        # upstream: an explicit update frequency is also the report frequency unless that is set
        cfg.node_status_report_frequency = cfg.node_status_update_frequency
    if cfg.cgroup_driver not in ("cgroupfs", "systemd"):
        raise ConfigFileError(f"{path}: cgroupDriver must be cgroupfs or systemd")
    if not 0 <= cfg.healthz_port <= 65535:
        raise ConfigFileError(f"{path}: healthzPort: must be between 0 and 65535, inclusive")
    return cfg


def _apply(cfg: AgentConfig, key: str, spec: Field, value: Any) -> None:
    if key in STRUCTURED:
        STRUCTURED_READERS[key](cfg, value)
    elif isinstance(spec, Honoured):
        if spec.pointer or not is_zero(value):
            setattr(cfg, spec.attr, spec.convert(value))
    elif isinstance(spec, DefaultOnly) and not at_default(spec, value):
        shown = "unset" if spec.default is None else json.dumps(spec.default)
        raise FieldError(f"not supported by pykubelet: only upstream's default ({shown}) is accepted")


def _only_keys(value: Any, allowed: set[str]) -> dict[str, Any]:
    value = value or {}
    if not isinstance(value, dict):
        raise FieldError(f"must be an object, got {value!r}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise FieldError(f'strict decoding error: unknown field "{unknown[0]}"')
    return value


def _authentication(cfg: AgentConfig, value: Any) -> None:
    value = _only_keys(value, {"x509", "webhook", "anonymous"})
    x509 = _only_keys(value.get("x509"), {"clientCAFile"})
    cfg.client_ca_file = x509.get("clientCAFile") or cfg.client_ca_file
    anonymous = _only_keys(value.get("anonymous"), {"enabled"})
    if anonymous.get("enabled") is not None:
        cfg.anonymous_auth = BOOL(anonymous["enabled"])
    webhook = _only_keys(value.get("webhook"), {"enabled", "cacheTTL"})
    if webhook.get("enabled") is not None:
        cfg.webhook_authentication = BOOL(webhook["enabled"])
    if not is_zero(webhook.get("cacheTTL")):
        cfg.webhook_authentication_cache_ttl = duration(webhook["cacheTTL"])


def _authorization(cfg: AgentConfig, value: Any) -> None:
    value = _only_keys(value, {"mode", "webhook"})
    mode = value.get("mode") or cfg.authorization_mode
    if mode not in ("AlwaysAllow", "Webhook"):
        raise FieldError(f"mode must be AlwaysAllow or Webhook, got {mode!r}")
    cfg.authorization_mode = mode
    webhook = _only_keys(value.get("webhook"), {"cacheAuthorizedTTL", "cacheUnauthorizedTTL"})
    if not is_zero(webhook.get("cacheAuthorizedTTL")):
        cfg.authorization_authorized_ttl = duration(webhook["cacheAuthorizedTTL"])
    if not is_zero(webhook.get("cacheUnauthorizedTTL")):
        cfg.authorization_unauthorized_ttl = duration(webhook["cacheUnauthorizedTTL"])


def _logging(cfg: AgentConfig, value: Any) -> None:
    """klog's text or component-base's JSON at any verbosity (kubeclient.logsetup); each line is written
    at once, whatever flushFrequency says."""
    value = _only_keys(value, {"format", "flushFrequency", "verbosity", "vmodule", "options"})
    if value.get("format") not in (None, "", "text", "json"):
        raise FieldError(f'format {value["format"]!r} is not supported (permitted: "json", "text")')
    if value.get("format"):
        cfg.logging_format = value["format"]
    if not is_zero(value.get("vmodule")):
        raise FieldError("vmodule not supported by pykubelet")
    options = _only_keys(value.get("options"), {"text", "json"})
    for name, sub in options.items():
        sub = _only_keys(sub, {"infoBufferSize", "splitStream"})
        if any(not is_zero(v) and str(v) != "0" for v in sub.values()):
            raise FieldError(f"options.{name} not supported by pykubelet (only its defaults)")
    if value.get("verbosity") is not None:
        cfg.verbosity = INT(value["verbosity"])


def _memory_swap(cfg: AgentConfig, value: Any) -> None:
    value = _only_keys(value, {"swapBehavior"})
    if value.get("swapBehavior") not in (None, "", "NoSwap"):
        raise FieldError(f"swapBehavior {value['swapBehavior']!r} not supported by pykubelet (NoSwap only)")


def _register_with_taints(cfg: AgentConfig, value: Any) -> None:
    cfg.register_with_taints = taints_from_config(value)


STRUCTURED_READERS = {
    "authentication": _authentication,
    "authorization": _authorization,
    "logging": _logging,
    "memorySwap": _memory_swap,
    "registerWithTaints": _register_with_taints,
}


def swap_on(swaps: str = "/proc/swaps") -> bool:
    """Whether the host has swap enabled (a line after /proc/swaps' header)."""
    try:
        return len(Path(swaps).read_text().strip().splitlines()) > 1
    except OSError:
        return False
