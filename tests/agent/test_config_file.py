"""The kubelet config file as kubeadm writes it: every field honoured or refused by name, --config-dir
drop-ins merged in upstream's order, --register-with-taints in upstream's syntax."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import add_arguments, build_config
from agent.config import ConfigFileError, load_config
from agent.configfields import FIELDS
from agent.taints import TaintError, parse_taints

# kubeadm 1.32's KubeletConfiguration (`kubeadm config print init-defaults --component-configs
# KubeletConfiguration`), as it lands in /var/lib/kubelet/config.yaml.
KUBEADM = """\
apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
"""

HEAD = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def config(*argv: str):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return build_config(parser.parse_args(list(argv)))


def test_kubeadm_config_is_accepted_with_upstream_meaning(tmp_path: Path):
    path = tmp_path / "config.yaml"
    path.write_text(KUBEADM)
    cfg = load_config(str(path), None)
    assert cfg.static_pod_path == "/etc/kubernetes/manifests"
    assert (cfg.healthz_port, cfg.healthz_bind_address) == (10248, "127.0.0.1")
    # "0s" is unset, so upstream's defaults hold
    assert (cfg.sync_frequency, cfg.file_check_frequency, cfg.runtime_request_timeout) == (60.0, 20.0, 120.0)
    assert (cfg.node_status_update_frequency, cfg.node_status_report_frequency) == (10.0, 300.0)
    assert cfg.webhook_authentication_cache_ttl == 120.0 and cfg.authorization_authorized_ttl == 300.0
    assert cfg.container_runtime_endpoint == "unix:///run/containerd/containerd.sock"
    assert (cfg.cgroup_driver, cfg.cluster_dns, cfg.rotate_certificates) == ("systemd", ["10.96.0.10"], True)
    assert cfg.client_ca_file == "/etc/kubernetes/pki/ca.crt"


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("staticPodPathh: /etc/kubernetes/manifests", "staticPodPathh"),  # a typo
        ("readOnlyPort: 10255", "readOnlyPort"),  # not implemented: only its default
        ("imageMinimumGCAge: 5m", "imageMinimumGCAge"),
        ("cpuManagerPolicy: static", "cpuManagerPolicy"),
        ("shutdownGracePeriod: 30s", "shutdownGracePeriod"),
        ("featureGates: {NodeSwap: true}", "featureGates"),
        ("cpuCFSQuota: false", "cpuCFSQuota"),  # a pointer: false is a value, not unset
        ("memorySwap: {swapBehavior: LimitedSwap}", "memorySwap"),
        ("logging: {format: xml}", "logging"),
        ("authentication: {x509: {clientCAFiel: /ca}}", "authentication"),
    ],
)
def test_field_refused_by_name(tmp_path: Path, line: str, field: str):
    path = tmp_path / "config.yaml"
    path.write_text(HEAD + line + "\n")
    with pytest.raises(ConfigFileError) as err:
        load_config(str(path), None)
    assert field in str(err.value)


@pytest.mark.parametrize(
    "line",
    [
        "readOnlyPort: 0",
        "imageMinimumGCAge: 2m0s",
        "cpuManagerPolicy: none",
        "cpuCFSQuota: true",
        "enforceNodeAllocatable: [pods]",
        "hairpinMode: hairpin-veth",  # no effect upstream with a CRI runtime
        "iptablesMasqueradeBit: 14",
    ],
)
def test_field_at_upstream_default_accepted(tmp_path: Path, line: str):
    path = tmp_path / "config.yaml"
    path.write_text(HEAD + line + "\n")
    load_config(str(path), None)


# upstream 1.32's KubeletConfiguration JSON field names (staging/src/k8s.io/kubelet/config/v1beta1/types.go)
UPSTREAM_FIELDS = """
enableServer staticPodPath podLogsDir syncFrequency fileCheckFrequency httpCheckFrequency
staticPodURL staticPodURLHeader address port readOnlyPort tlsCertFile tlsPrivateKeyFile
tlsCipherSuites tlsMinVersion rotateCertificates serverTLSBootstrap authentication authorization
registryPullQPS registryBurst eventRecordQPS eventBurst enableDebuggingHandlers
enableContentionProfiling healthzPort healthzBindAddress oomScoreAdj clusterDomain clusterDNS
streamingConnectionIdleTimeout nodeStatusUpdateFrequency nodeStatusReportFrequency
nodeLeaseDurationSeconds imageMinimumGCAge imageMaximumGCAge imageGCHighThresholdPercent
imageGCLowThresholdPercent volumeStatsAggPeriod kubeletCgroups systemCgroups cgroupRoot
cgroupsPerQOS cgroupDriver cpuManagerPolicy singleProcessOOMKill cpuManagerPolicyOptions
cpuManagerReconcilePeriod memoryManagerPolicy topologyManagerPolicy topologyManagerScope
topologyManagerPolicyOptions qosReserved runtimeRequestTimeout hairpinMode maxPods podCIDR
podPidsLimit resolvConf runOnce cpuCFSQuota cpuCFSQuotaPeriod nodeStatusMaxImages maxOpenFiles
contentType kubeAPIQPS kubeAPIBurst serializeImagePulls maxParallelImagePulls evictionHard
evictionSoft evictionSoftGracePeriod evictionPressureTransitionPeriod evictionMaxPodGracePeriod
evictionMinimumReclaim podsPerCore enableControllerAttachDetach protectKernelDefaults
makeIPTablesUtilChains iptablesMasqueradeBit iptablesDropBit featureGates failSwapOn memorySwap
containerLogMaxSize containerLogMaxFiles containerLogMaxWorkers containerLogMonitorInterval
configMapAndSecretChangeDetectionStrategy systemReserved kubeReserved reservedSystemCPUs
showHiddenMetricsForVersion systemReservedCgroup kubeReservedCgroup enforceNodeAllocatable
allowedUnsafeSysctls volumePluginDir providerID kernelMemcgNotification logging
enableSystemLogHandler enableSystemLogQuery shutdownGracePeriod shutdownGracePeriodCriticalPods
shutdownGracePeriodByPodPriority crashLoopBackOff reservedMemory enableProfilingHandler
enableDebugFlagsHandler seccompDefault memoryThrottlingFactor registerWithTaints registerNode
tracing localStorageCapacityIsolation containerRuntimeEndpoint imageServiceEndpoint failCgroupV1
userNamespaces
""".split()


def test_every_upstream_field_has_a_decision_and_a_row_in_the_readme():
    assert set(FIELDS) == set(UPSTREAM_FIELDS)
    readme = (Path(__file__).parents[2] / "agent" / "README.md").read_text()
    assert set(re.findall(r"^\| `(\w+)` \|", readme, re.MULTILINE)) == set(UPSTREAM_FIELDS)


def test_config_dir_dropins_merge_in_name_order(tmp_path: Path):
    main = tmp_path / "config.yaml"
    main.write_text(
        HEAD + "maxPods: 50\nclusterDNS: [10.0.0.1]\nauthentication: {x509: {clientCAFile: /a}}\n"
    )
    drop = tmp_path / "kubelet.conf.d"
    (drop / "20-sub").mkdir(parents=True)
    (drop / "10-pods.conf").write_text(HEAD + "maxPods: 60\nclusterDNS: [10.0.0.2, 10.0.0.3]\n")
    (drop / "20-sub" / "x.conf").write_text(HEAD + "maxPods: 70\n")  # walked before 30-
    (drop / "30-last.conf").write_text(HEAD + "maxPods: 80\nauthentication: {anonymous: {enabled: true}}\n")
    (drop / "99-ignored.yaml").write_text(HEAD + "maxPods: 99\n")  # not *.conf
    cfg = config("--config", str(main), "--config-dir", str(drop))
    assert cfg.max_pods == 80
    assert cfg.cluster_dns == ["10.0.0.2", "10.0.0.3"]  # lists replace
    assert (cfg.client_ca_file, cfg.anonymous_auth) == ("/a", True)  # objects merge field by field
    (drop / "40-order.conf").write_text(HEAD + "maxPods: 40\n")
    assert config("--config", str(main), "--config-dir", str(drop)).max_pods == 40
    # flags win over both
    assert config("--config", str(main), "--config-dir", str(drop), "--max-pods", "7").max_pods == 7
    with pytest.raises(ConfigFileError, match="not a directory"):
        config("--config", str(main), "--config-dir", str(tmp_path / "absent"))
    (drop / "50-typo.conf").write_text(HEAD + "maxPod: 1\n")
    with pytest.raises(ConfigFileError, match='unknown field "maxPod"'):
        config("--config", str(main), "--config-dir", str(drop))


def test_register_with_taints_flag_and_field(tmp_path: Path):
    assert parse_taints("dedicated=infra:NoSchedule,node-role.kubernetes.io/control-plane:NoExecute") == [
        {"key": "dedicated", "value": "infra", "effect": "NoSchedule"},
        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoExecute"},
    ]
    for bad in ("a=b=c:NoSchedule", "a:Sometimes", "-bad-:NoSchedule", "a=b"):
        with pytest.raises(TaintError):
            parse_taints(bad)
    path = tmp_path / "config.yaml"
    path.write_text(
        HEAD + "registerWithTaints:\n- {key: example.com/gpu, value: 'true', effect: NoSchedule}\n"
    )
    assert config("--config", str(path)).register_with_taints == [
        {"key": "example.com/gpu", "value": "true", "effect": "NoSchedule"}
    ]
    assert config("--config", str(path), "--register-with-taints", "x:NoExecute").register_with_taints == [
        {"key": "x", "effect": "NoExecute"}
    ]


def run_agent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pykubelet", "agent", *args], capture_output=True, text=True, timeout=60
    )


def test_unknown_field_and_bad_taint_exit_2(tmp_path: Path):
    path = tmp_path / "config.yaml"
    path.write_text(HEAD + "staticPodPth: /etc/kubernetes/manifests\n")
    out = run_agent("--config", str(path))
    assert out.returncode == 2 and 'unknown field "staticPodPth"' in out.stderr
    path.write_text(HEAD + "readOnlyPort: 10255\n")
    out = run_agent("--config", str(path))
    assert out.returncode == 2 and "readOnlyPort" in out.stderr
    out = run_agent("--register-with-taints", "a:Sometimes")
    assert out.returncode == 2 and "invalid taint effect: Sometimes" in out.stderr


def test_logging_format_json_is_honoured(tmp_path: Path):
    path = tmp_path / "config.yaml"
    path.write_text(HEAD + "logging: {format: json, verbosity: 4}\n")
    cfg = load_config(str(path), None)
    assert (cfg.logging_format, cfg.verbosity) == ("json", 4)
