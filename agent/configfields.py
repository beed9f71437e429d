"""Every field of upstream's KubeletConfiguration (kubelet.config.k8s.io/v1beta1, Kubernetes 1.32) and what
the agent does with it: honoured (read into AgentConfig), accepted only at upstream's default (the agent
behaves as upstream does with that value, and refuses any other by name), or of no effect upstream either
(deprecated fields upstream accepts and ignores). A field not in this table is unknown, as upstream's
strict decoder says. agent/README.md carries the same table for readers.

Upstream defaults an unset field, and a Go zero value ("", 0, "0s", {}, []) of a non-pointer field is
unset: kubeadm writes `syncFrequency: 0s` and means the default. Pointer fields (`healthzPort`,
`cgroupsPerQOS`, ...) keep their zero as a value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubeclient.duration import parse_duration


class FieldError(ValueError):
    pass


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise FieldError(f"must be true or false, got {value!r}")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(f"must be an integer, got {value!r}")
    return value


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FieldError(f"must be a number, got {value!r}")
    return float(value)


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise FieldError(f"must be a string, got {value!r}")
    return value


def _list(value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise FieldError(f"must be a list, got {value!r}")
    return value


def _dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FieldError(f"must be a map, got {value!r}")
    return value


def duration(value: Any) -> float:
    """A Go duration ("10s", "5m0s", "1h30m") in seconds."""
    try:
        return parse_duration(value)
    except (TypeError, ValueError) as err:
        raise FieldError(str(err)) from None


BOOL, INT, FLOAT, STR, LIST, DICT = _bool, _int, _float, _str, _list, _dict


@dataclass(frozen=True)
class Honoured:
    """Read into AgentConfig.<attr>; a zero value of a non-pointer field leaves the default."""

    attr: str
    convert: Callable[[Any], Any]
    pointer: bool = False


@dataclass(frozen=True)
class DefaultOnly:
    """Not implemented: accepted when it says what upstream's default says, refused otherwise."""

    default: Any
    pointer: bool = False
    is_duration: bool = False
    also: tuple[Any, ...] = ()  # other spellings of the same behaviour


@dataclass(frozen=True)
class NoEffect:
    """Deprecated upstream: accepted and ignored there too."""


Field = Honoured | DefaultOnly | NoEffect


def is_zero(value: Any) -> bool:
    """Go's zero value as YAML spells it (null, "", 0, false, "0s", {}, [])."""
    if value is None or value is False or value == "" or value == {} or value == []:
        return True
    if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
        return True
    if isinstance(value, str):
        try:
            return parse_duration(value) == 0
        except ValueError:
            return False
    return False


def at_default(field: DefaultOnly, value: Any) -> bool:
    if not field.pointer and is_zero(value):
        return True
    for candidate in (field.default, *field.also):
        if field.is_duration and isinstance(value, str | int | float) and not isinstance(value, bool):
            try:
                if parse_duration(value) == parse_duration(candidate):
                    return True
            except ValueError:
                return False
        elif value == candidate:
            return True
    return False


def _d(default: str) -> DefaultOnly:
    return DefaultOnly(default, is_duration=True)


def _p(default: Any) -> DefaultOnly:
    return DefaultOnly(default, pointer=True)


# Read elsewhere (agent/config.py): the nested structs, and fields with a parser of their own.
STRUCTURED = ("authentication", "authorization", "registerWithTaints", "logging", "memorySwap")

FIELDS: dict[str, Field] = {
    "enableServer": Honoured("enable_server", BOOL, pointer=True),
    "staticPodPath": Honoured("static_pod_path", STR),
    "podLogsDir": Honoured("pod_logs_dir", STR),
    "syncFrequency": Honoured("sync_frequency", duration),
    "fileCheckFrequency": Honoured("file_check_frequency", duration),
    "httpCheckFrequency": _d("20s"),  # no staticPodURL source: nothing to check
    "staticPodURL": DefaultOnly(""),
    "staticPodURLHeader": DefaultOnly(None),
    "address": Honoured("address", STR),
    "port": Honoured("port", INT),
    "readOnlyPort": DefaultOnly(0),
    "tlsCertFile": Honoured("tls_cert_file", STR),
    "tlsPrivateKeyFile": Honoured("tls_private_key_file", STR),
    "tlsCipherSuites": DefaultOnly(None),
    "tlsMinVersion": DefaultOnly(""),
    "rotateCertificates": Honoured("rotate_certificates", BOOL),
    "serverTLSBootstrap": Honoured("server_tls_bootstrap", BOOL),
    "authentication": NoEffect(),  # STRUCTURED
    "authorization": NoEffect(),  # STRUCTURED
    "registryPullQPS": _p(5),
    "registryBurst": DefaultOnly(10),
    "eventRecordQPS": Honoured("event_record_qps", FLOAT, pointer=True),
    "eventBurst": Honoured("event_burst", INT),
    "enableDebuggingHandlers": _p(True),
    "enableContentionProfiling": DefaultOnly(False),
    "healthzPort": Honoured("healthz_port", INT, pointer=True),
    "healthzBindAddress": Honoured("healthz_bind_address", STR),
    "oomScoreAdj": _p(-999),
    "clusterDomain": Honoured("cluster_domain", STR),
    "clusterDNS": Honoured("cluster_dns", LIST),
    "streamingConnectionIdleTimeout": NoEffect(),  # "Deprecated: no longer has any effect"
    "nodeStatusUpdateFrequency": Honoured("node_status_update_frequency", duration),
    "nodeStatusReportFrequency": Honoured("node_status_report_frequency", duration),
    "nodeLeaseDurationSeconds": Honoured("node_lease_duration_seconds", INT),
    "imageMinimumGCAge": _d("2m"),
    "imageMaximumGCAge": _d("0s"),
    "imageGCHighThresholdPercent": _p(85),
    "imageGCLowThresholdPercent": _p(80),
    "volumeStatsAggPeriod": _d("1m"),
    "kubeletCgroups": Honoured("kubelet_cgroups", STR),
    "systemCgroups": DefaultOnly(""),
    "cgroupRoot": Honoured("cgroup_root", STR),
    "cgroupsPerQOS": Honoured("cgroups_per_qos", BOOL, pointer=True),
    "cgroupDriver": Honoured("cgroup_driver", STR),
    "cpuManagerPolicy": DefaultOnly("none", also=("None",)),
    "singleProcessOOMKill": _p(None),
    "cpuManagerPolicyOptions": DefaultOnly(None),
    "cpuManagerReconcilePeriod": _d("10s"),
    "memoryManagerPolicy": DefaultOnly("None"),
    "topologyManagerPolicy": DefaultOnly("none"),
    "topologyManagerScope": DefaultOnly("container"),
    "topologyManagerPolicyOptions": DefaultOnly(None),
    "qosReserved": DefaultOnly(None),
    "runtimeRequestTimeout": Honoured("runtime_request_timeout", duration),
    # Only the removed dockershim read it; with a CRI runtime upstream ignores it.
    "hairpinMode": NoEffect(),
    "maxPods": Honoured("max_pods", INT),
    "podCIDR": Honoured("pod_cidr", STR),
    "podPidsLimit": _p(-1),
    "resolvConf": Honoured("resolv_conf", STR, pointer=True),
    "runOnce": DefaultOnly(False),
    "cpuCFSQuota": _p(True),
    "cpuCFSQuotaPeriod": DefaultOnly("100ms", pointer=True, is_duration=True),
    "nodeStatusMaxImages": _p(50),
    "maxOpenFiles": DefaultOnly(1000000),
    # The agent's client speaks JSON; the content type changes nothing a user or the API server sees.
    "contentType": DefaultOnly("application/vnd.kubernetes.protobuf", also=("application/json",)),
    "kubeAPIQPS": Honoured("kube_api_qps", FLOAT, pointer=True),
    "kubeAPIBurst": Honoured("kube_api_burst", INT),
    "serializeImagePulls": Honoured("serialize_image_pulls", BOOL, pointer=True),
    "maxParallelImagePulls": _p(None),
    "evictionHard": Honoured("eviction_hard", DICT),
    "evictionSoft": DefaultOnly(None),
    "evictionSoftGracePeriod": DefaultOnly(None),
    "evictionPressureTransitionPeriod": _d("5m"),
    "evictionMaxPodGracePeriod": DefaultOnly(0),
    "evictionMinimumReclaim": DefaultOnly(None),
    "podsPerCore": DefaultOnly(0),
    "enableControllerAttachDetach": _p(True),
    "protectKernelDefaults": DefaultOnly(False),
    "makeIPTablesUtilChains": _p(True),
    "iptablesMasqueradeBit": NoEffect(),  # "Deprecated: no longer has any effect"
    "iptablesDropBit": NoEffect(),  # "Deprecated: no longer has any effect"
    "featureGates": DefaultOnly(None),
    "failSwapOn": Honoured("fail_swap_on", BOOL, pointer=True),
    "memorySwap": NoEffect(),  # STRUCTURED
    "containerLogMaxSize": Honoured("container_log_max_size", STR),
    "containerLogMaxFiles": Honoured("container_log_max_files", INT, pointer=True),
    "containerLogMaxWorkers": _p(1),
    "containerLogMonitorInterval": DefaultOnly("10s", pointer=True, is_duration=True),
    "configMapAndSecretChangeDetectionStrategy": DefaultOnly("Watch"),
    "systemReserved": Honoured("system_reserved", DICT),
    "kubeReserved": Honoured("kube_reserved", DICT),
    "reservedSystemCPUs": DefaultOnly(""),
    "showHiddenMetricsForVersion": DefaultOnly(""),
    "systemReservedCgroup": DefaultOnly(""),
    "kubeReservedCgroup": DefaultOnly(""),
    "enforceNodeAllocatable": DefaultOnly(["pods"]),
    "allowedUnsafeSysctls": Honoured("allowed_unsafe_sysctls", LIST),
    "volumePluginDir": DefaultOnly("/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"),
    "providerID": Honoured("provider_id", STR),
    "kernelMemcgNotification": DefaultOnly(False),
    "logging": NoEffect(),  # STRUCTURED
    "enableSystemLogHandler": _p(True),
    "enableSystemLogQuery": _p(False),
    "shutdownGracePeriod": _d("0s"),
    "shutdownGracePeriodCriticalPods": _d("0s"),
    "shutdownGracePeriodByPodPriority": DefaultOnly(None),
    "crashLoopBackOff": DefaultOnly({}),
    "reservedMemory": DefaultOnly(None),
    "enableProfilingHandler": _p(True),
    "enableDebugFlagsHandler": _p(True),
    "seccompDefault": _p(False),
    "memoryThrottlingFactor": _p(0.9),
    "registerWithTaints": NoEffect(),  # STRUCTURED
    "registerNode": _p(True),
    "tracing": _p(None),
    "localStorageCapacityIsolation": _p(True),
    "containerRuntimeEndpoint": Honoured("container_runtime_endpoint", STR),
    "imageServiceEndpoint": Honoured("image_service_endpoint", STR),
    "failCgroupV1": _p(False),
    "userNamespaces": _p(None),
}
