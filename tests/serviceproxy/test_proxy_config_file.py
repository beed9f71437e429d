"""kube-proxy's --config: the KubeProxyConfiguration kubeadm writes is accepted (its zero values are
"upstream's default"), the fields the proxy honours become its settings under the flags given, and a
field it cannot honour is refused by name with exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pykubelet.cli import command_parser
from serviceproxy.cli import apply_config_file
from serviceproxy.config import ProxyConfigError, load

# kubeadm 1.32's kube-proxy ConfigMap (config.conf), as `kubeadm init` writes it.
KUBEADM = """
apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: null
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
healthzBindAddress: ""
hostnameOverride: ""
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 0s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: KubeProxyConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
metricsBindAddress: ""
mode: ""
nftables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
nodePortAddresses: null
oomScoreAdj: null
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.conf"
    path.write_text(text)
    return path


def test_kubeadms_file_is_accepted_with_its_settings(tmp_path: Path) -> None:
    settings = load(write(tmp_path, KUBEADM))
    assert settings == {
        "bind_address": "0.0.0.0",
        "kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf",
        "cluster_cidr": "10.244.0.0/16",
        "masquerade_all": False,
    }


def test_flags_given_win_over_the_file(tmp_path: Path) -> None:
    doc = yaml.safe_load(KUBEADM)
    doc["nftables"].update(syncPeriod="1m", minSyncPeriod="2s")
    doc["nodePortAddresses"] = ["10.0.0.0/8", "192.168.0.0/16"]
    doc["logging"]["verbosity"] = 3
    path = write(tmp_path, yaml.safe_dump(doc))
    _, parser = command_parser("proxy")
    args = parser.parse_args(["--config", str(path), "--cluster-cidr=10.245.0.0/16", "--min-sync-period=5s"])
    apply_config_file(args)
    assert args.cluster_cidr == "10.245.0.0/16"  # the flag
    assert args.min_sync_period == 5  # the flag
    assert args.sync_period == 60  # the file
    assert args.nodeport_addresses == "10.0.0.0/8,192.168.0.0/16"
    assert args.kubeconfig == Path("/var/lib/kube-proxy/kubeconfig.conf")
    assert args.v == 3


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"mode": "ipvs"}, "mode='ipvs'"),
        ({"conntrack": {"maxPerCore": 32768}}, "conntrack.maxPerCore"),
        ({"enableProfiling": True}, "enableProfiling"),
        ({"oomScoreAdj": -999}, "oomScoreAdj"),
        ({"featureGates": {"X": True}}, "featureGates.X"),
        ({"nftables": {"masqueradeBit": 15}}, "nftables.masqueradeBit=15"),
    ],
)
def test_a_field_it_cannot_honour_is_refused_by_name(tmp_path: Path, change: dict, named: str) -> None:
    doc = yaml.safe_load(KUBEADM)
    for key, value in change.items():
        doc[key] = (
            {**doc[key], **value} if isinstance(value, dict) and isinstance(doc.get(key), dict) else value
        )
    with pytest.raises(ProxyConfigError, match=named.replace(".", r"\.").replace("(", r"\(")):
        load(write(tmp_path, yaml.safe_dump(doc)))


def test_the_command_exits_2_naming_the_field(tmp_path: Path) -> None:
    path = write(tmp_path, KUBEADM.replace("enableProfiling: false", "enableProfiling: true"))
    proc = subprocess.run(
        [sys.executable, "-m", "pykubelet", "proxy", "--config", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "enableProfiling" in proc.stderr and "not supported" in proc.stderr


def test_wrong_kind_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ProxyConfigError, match="want kubeproxy.config.k8s.io/v1alpha1/KubeProxyConfiguration"
    ):
        load(write(tmp_path, "apiVersion: v1\nkind: ConfigMap\n"))
