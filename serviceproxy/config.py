"""kube-proxy's --config: a KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) file, as kubeadm
writes it into the kube-proxy ConfigMap.

The fields the proxy honours become its settings (flags given on the command line win, as pflag's
Changed flags do upstream); every other field must hold its zero value (kubeadm writes most of them
as `0s`, `null`, `""` or `false`, which mean "upstream's default"), and one set to anything else is
refused by name at start: a setting accepted and ignored would be a lie.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kubeclient.duration import parse_go_duration

API_VERSION = "kubeproxy.config.k8s.io/v1alpha1"
KIND = "KubeProxyConfiguration"
MASQUERADE_BIT = 14  # the 0x4000 mark the rules use (rules.py)

# field path -> the proxy's setting (the CLI's dest), and how the value is read.
_STR, _LIST, _DURATION, _BOOL, _FLOAT, _INT = "str", "list", "duration", "bool", "float", "int"
FIELDS: dict[str, tuple[str, str]] = {
    "bindAddress": ("bind_address", _STR),
    "healthzBindAddress": ("healthz_bind_address", _STR),
    "metricsBindAddress": ("metrics_bind_address", _STR),
    "clusterCIDR": ("cluster_cidr", _STR),
    "hostnameOverride": ("hostname_override", _STR),
    "nodePortAddresses": ("nodeport_addresses", _LIST),
    "syncPeriod": ("sync_period", _DURATION),
    "minSyncPeriod": ("min_sync_period", _DURATION),
    "nftables.syncPeriod": ("sync_period", _DURATION),
    "nftables.minSyncPeriod": ("min_sync_period", _DURATION),
    "nftables.masqueradeAll": ("masquerade_all", _BOOL),
    "clientConnection.kubeconfig": ("kubeconfig", _STR),
    "clientConnection.qps": ("kube_api_qps", _FLOAT),
    "clientConnection.burst": ("kube_api_burst", _INT),
    "logging.verbosity": ("v", _INT),
    "logging.format": ("logging_format", _STR),
}
# Fields checked rather than mapped: a value the proxy already behaves as is accepted.
_ACCEPTED = {
    "mode": ("", "nftables"),
    "detectLocalMode": ("", "ClusterCIDR"),
    "nftables.masqueradeBit": (None, MASQUERADE_BIT),
    "logging.flushFrequency": (0, "0s", "5s", 5_000_000_000),
    "clientConnection.contentType": ("", "application/json", "application/vnd.kubernetes.protobuf"),
    "clientConnection.acceptContentTypes": ("", "application/json"),
}


class ProxyConfigError(ValueError):
    pass


def _is_zero(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_is_zero(v) for v in value.values())
    return value in (None, False, 0, "", "0s", "0") or value == []


def _leaves(doc: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in doc.items():
        path = f"{prefix}{key}"
        if path in FIELDS or path in _ACCEPTED or not isinstance(value, dict) or not value:
            out.append((path, value))
        else:
            out += _leaves(value, f"{path}.")
    return out


def _convert(path: str, value: Any, kind: str) -> Any:
    try:
        if kind == _DURATION:
            return parse_go_duration(str(value))
        if kind == _LIST:
            return ",".join(str(v) for v in value or [])
        if kind == _BOOL:
            if not isinstance(value, bool):
                raise ValueError(f"not a boolean: {value!r}")
            return value
        if kind == _FLOAT:
            return float(value)
        if kind == _INT:
            return int(value)
        return str(value)
    except (TypeError, ValueError) as err:
        raise ProxyConfigError(f"{path}: {err}") from None


def load(path: Path) -> dict[str, Any]:
    """The settings the file sets (by CLI dest; zero values left out so defaults and flags apply)."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ProxyConfigError(f"{path}: {err}") from None
    if not isinstance(doc, dict):
        raise ProxyConfigError(f"{path}: not a {KIND} object")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise ProxyConfigError(
            f"{path}: apiVersion/kind {doc.get('apiVersion')}/{doc.get('kind')}: want {API_VERSION}/{KIND}"
        )
    settings: dict[str, Any] = {}
    refused: list[str] = []
    for field_path, value in _leaves({k: v for k, v in doc.items() if k not in ("apiVersion", "kind")}):
        if field_path in FIELDS:
            if not _is_zero(value) or FIELDS[field_path][1] == _BOOL and value is not None:
                dest, kind = FIELDS[field_path]
                settings[dest] = _convert(field_path, value, kind)
        elif field_path in _ACCEPTED:
            if value not in _ACCEPTED[field_path]:
                refused.append(f"{field_path}={value!r}")
        elif not _is_zero(value):
            refused.append(field_path)
    if refused:
        raise ProxyConfigError(
            f"{path}: {', '.join(refused)}: not supported by pykubelet's proxy (nftables mode; the fields it "
            f"honours: {', '.join(FIELDS)})"
        )
    return settings
