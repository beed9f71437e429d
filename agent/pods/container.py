"""ContainerConfig from a container spec: command, args, env, working dir, resources, security context,
log path, and the labels/annotations that let the agent recognise the container later.
"""

from __future__ import annotations

import json
from typing import Any

from agent.cri import pb
from agent.pods import labels as L
from agent.pods.env import ConfigError, expand
from agent.pods.qos import cgroup2_unified, oom_score_adj
from agent.pods.sandbox import namespace_options, pod_groups
from kubeclient.quantity import QuantityError, milli_value, value

CPU_PERIOD = 100_000
MIN_SHARES = 2
MIN_QUOTA = 1000


def linux_resources(
    pod: dict[str, Any], container: dict[str, Any], node_memory: int, cgroup2: bool | None = None
) -> pb.LinuxContainerResources:
    """Shares from the cpu request (the limit when no request), CFS quota from the cpu limit, the memory
    limit, the OOM score of the pod's QoS class, and on cgroup v2 memory.oom.group=1, so an OOM kills
    the whole container as a unit (upstream 1.32's default, singleProcessOOMKill false)."""
    res = container.get("resources") or {}
    requests = res.get("requests") or {}
    limits = res.get("limits") or {}
    out = pb.LinuxContainerResources()
    try:
        cpu_request = milli_value(requests["cpu"]) if requests.get("cpu") else 0
        cpu_limit = milli_value(limits["cpu"]) if limits.get("cpu") else 0
        millis = cpu_limit if cpu_request == 0 and cpu_limit else cpu_request
        out.cpu_shares = max(MIN_SHARES, millis * 1024 // 1000) if millis else MIN_SHARES
        if cpu_limit:
            out.cpu_period = CPU_PERIOD
            out.cpu_quota = max(MIN_QUOTA, cpu_limit * CPU_PERIOD // 1000)
        if limits.get("memory"):
            out.memory_limit_in_bytes = value(limits["memory"])
        out.oom_score_adj = oom_score_adj(pod, container, node_memory)
    except QuantityError as err:
        raise ConfigError(str(err)) from None
    if cgroup2_unified() if cgroup2 is None else cgroup2:
        out.unified["memory.oom.group"] = "1"
    return out


# What a container must not read or write of /proc and /sys unless it asks for procMount Unmasked
# (upstream's securitycontext defaultMaskedPaths / defaultReadonlyPaths; a privileged container gets
# none from the runtime either way).
DEFAULT_MASKED_PATHS = (
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
)
DEFAULT_READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")


def security_context(pod: dict[str, Any], container: dict[str, Any]) -> pb.LinuxContainerSecurityContext:
    """The container's effective security context: its own fields over the pod's (runAsUser,
    runAsGroup), the pod's groups, capabilities, privileged, readOnlyRootFilesystem, no_new_privs for
    allowPrivilegeEscalation false, and the masked /proc paths unless procMount is Unmasked."""
    psc = (pod.get("spec") or {}).get("securityContext") or {}
    csc = container.get("securityContext") or {}
    privileged = bool(csc.get("privileged"))
    sec = pb.LinuxContainerSecurityContext(
        privileged=privileged,
        readonly_rootfs=bool(csc.get("readOnlyRootFilesystem")),
        namespace_options=namespace_options(pod),
        no_new_privs=csc.get("allowPrivilegeEscalation") is False,
    )
    user = csc.get("runAsUser", psc.get("runAsUser"))
    group = csc.get("runAsGroup", psc.get("runAsGroup"))
    if user is not None:
        sec.run_as_user.value = int(user)
    if group is not None:
        sec.run_as_group.value = int(group)
    sec.supplemental_groups.extend(pod_groups(pod))
    caps = csc.get("capabilities") or {}
    if caps.get("add") or caps.get("drop"):
        sec.capabilities.add_capabilities.extend(caps.get("add") or [])
        sec.capabilities.drop_capabilities.extend(caps.get("drop") or [])
    if csc.get("procMount") != "Unmasked":
        sec.masked_paths.extend(DEFAULT_MASKED_PATHS)
        sec.readonly_paths.extend(DEFAULT_READONLY_PATHS)
    return sec


ETC_HOSTS = "/etc/hosts"


def _mounts(
    container: dict[str, Any], termination_path: str, termination_file: str, hosts_file: str
) -> list[pb.Mount]:
    """The agent's own mounts. The managed /etc/hosts only when the container mounts nothing there
    itself, as upstream's makeMounts decides."""
    out = []
    own_hosts = any(m.get("mountPath") == ETC_HOSTS for m in container.get("volumeMounts") or [])
    if hosts_file and not own_hosts:
        out.append(pb.Mount(container_path=ETC_HOSTS, host_path=hosts_file))
    if termination_file:
        out.append(pb.Mount(container_path=termination_path, host_path=termination_file))
    return out


def container_config(
    pod: dict[str, Any],
    container: dict[str, Any],
    kind: str,
    restart_count: int,
    image_ref: str,
    env: list[tuple[str, str]],
    node_memory: int,
    termination_file: str = "",
    hosts_file: str = "",
    volume_mounts: list[pb.Mount] | None = None,
) -> pb.ContainerConfig:
    name = container["name"]
    values = dict(env)
    spec = pod.get("spec") or {}
    annotations = {
        L.CONTAINER_HASH: L.container_hash(container),
        L.RESTART_COUNT: str(restart_count),
        L.TERMINATION_MESSAGE_PATH: container.get("terminationMessagePath") or "/dev/termination-log",
        L.TERMINATION_MESSAGE_POLICY: container.get("terminationMessagePolicy") or "File",
        L.POD_TERMINATION_GRACE: str(spec.get("terminationGracePeriodSeconds", 30)),
    }
    if container.get("ports"):
        annotations[L.CONTAINER_PORTS] = json.dumps(container["ports"], separators=(",", ":"))
    labels = L.container_labels(pod, name)
    labels[L.CONTAINER_KIND] = kind
    return pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name, attempt=restart_count),
        image=pb.ImageSpec(image=image_ref, user_specified_image=container.get("image", "")),
        command=[expand(a, values) for a in container.get("command") or []],
        args=[expand(a, values) for a in container.get("args") or []],
        working_dir=container.get("workingDir") or "",
        envs=[pb.KeyValue(key=k, value=v) for k, v in env],
        labels=labels,
        annotations=annotations,
        log_path=f"{name}/{restart_count}.log",
        mounts=[
            *(volume_mounts or []),
            *_mounts(container, annotations[L.TERMINATION_MESSAGE_PATH], termination_file, hosts_file),
        ],
        stdin=bool(container.get("stdin")),
        stdin_once=bool(container.get("stdinOnce")),
        tty=bool(container.get("tty")),
        linux=pb.LinuxContainerConfig(
            resources=linux_resources(pod, container, node_memory),
            security_context=security_context(pod, container),
        ),
    )
