"""PodSandboxConfig from a pod: identity, hostname, logs, DNS, host ports, namespaces and cgroup parent.

The config is a pure function of the pod (plus the attempt number), so a worker can rebuild it for
CreateContainer after a restart of the agent without having stored anything.
"""

from __future__ import annotations

from typing import Any

from agent.config import AgentConfig
from agent.cri import pb
from agent.pods import labels as L
from agent.pods.dns import DNS, pod_dns
from agent.pods.qos import cgroup_parent

_PROTOCOLS = {"TCP": pb.TCP, "UDP": pb.UDP, "SCTP": pb.SCTP}


def pod_log_dir(cfg: AgentConfig, pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{cfg.pod_logs_dir.rstrip('/')}/{meta['namespace']}_{meta['name']}_{meta['uid']}"


def namespace_options(pod: dict[str, Any]) -> pb.NamespaceOption:
    spec = pod.get("spec") or {}
    return pb.NamespaceOption(
        network=pb.NODE if spec.get("hostNetwork") else pb.POD,
        pid=pb.NODE
        if spec.get("hostPID")
        else (pb.POD if spec.get("shareProcessNamespace") else pb.CONTAINER),
        ipc=pb.NODE if spec.get("hostIPC") else pb.POD,
    )


def pod_groups(pod: dict[str, Any]) -> list[int]:
    """The extra groups of every process of the pod: fsGroup first, then supplementalGroups, as
    upstream's determineEffectiveSecurityContext orders them, so files of a volume owned by fsGroup
    are the container's to use."""
    psc = (pod.get("spec") or {}).get("securityContext") or {}
    groups = [int(psc["fsGroup"])] if psc.get("fsGroup") is not None else []
    for group in psc.get("supplementalGroups") or []:
        if int(group) not in groups:
            groups.append(int(group))
    return groups


def port_mappings(pod: dict[str, Any]) -> list[pb.PortMapping]:
    out = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if not p.get("hostPort"):
                continue
            out.append(
                pb.PortMapping(
                    protocol=_PROTOCOLS.get(p.get("protocol") or "TCP", pb.TCP),
                    container_port=int(p["containerPort"]),
                    host_port=int(p["hostPort"]),
                    host_ip=p.get("hostIP") or "",
                )
            )
    return out


def hostname(pod: dict[str, Any], node_hostname: str) -> str:
    """The pod's hostname; empty for host-network pods, which share the node's UTS namespace (runc
    refuses to set a hostname there, and the node's own name is what such a pod sees anyway)."""
    spec = pod.get("spec") or {}
    if spec.get("hostNetwork"):
        return ""
    name = spec.get("hostname") or pod["metadata"]["name"]
    return name[:63].rstrip("-.")


FQDN_MAX_LEN = 64  # the kernel's nodename field


class HostnameError(ValueError):
    """The pod's FQDN does not fit the kernel's hostname (setHostnameAsFQDN)."""


def kernel_hostname(pod: dict[str, Any], cluster_domain: str) -> str:
    """The hostname the sandbox gets: the pod's, or with setHostnameAsFQDN and a subdomain its FQDN
    (upstream's GetNodenameForKernel, with its error when that is over 64 characters)."""
    name = hostname(pod, "")
    spec = pod.get("spec") or {}
    if name and spec.get("setHostnameAsFQDN") and spec.get("subdomain"):
        fqdn = f"{name}.{spec['subdomain']}.{pod['metadata']['namespace']}.svc.{cluster_domain}"
        if len(fqdn) > FQDN_MAX_LEN:
            raise HostnameError(
                f"failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long "
                f"({FQDN_MAX_LEN} characters is the max, {len(fqdn)} characters requested)"
            )
        return fqdn
    return name


def hosts_file(pod: dict[str, Any], pod_ip: str, cluster_domain: str) -> str:
    """The kubelet-managed /etc/hosts: localhost entries, the pod's own name (its FQDN when it has a
    subdomain) and spec.hostAliases, as upstream writes it."""
    spec = pod.get("spec") or {}
    lines = [
        "# Kubernetes-managed hosts file.",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "fe00::0\tip6-localnet",
        "fe00::0\tip6-mcastprefix",
        "fe00::1\tip6-allnodes",
        "fe00::2\tip6-allrouters",
    ]
    name = hostname(pod, "")
    if pod_ip and name:
        subdomain = spec.get("subdomain") or ""
        if subdomain and cluster_domain:
            fqdn = f"{name}.{subdomain}.{pod['metadata']['namespace']}.svc.{cluster_domain}"
            lines.append(f"{pod_ip}\t{fqdn}\t{name}")
        else:
            lines.append(f"{pod_ip}\t{name}")
    aliases = spec.get("hostAliases") or []
    if aliases:
        lines.append("")
        lines.append("# Entries added by HostAliases.")
        for alias in aliases:
            lines.append(f"{alias.get('ip', '')}\t" + "\t".join(alias.get("hostnames") or []))
    return "\n".join(lines) + "\n"


def sandbox_config(
    cfg: AgentConfig, pod: dict[str, Any], attempt: int, host_dns: DNS, node_hostname: str
) -> pb.PodSandboxConfig:
    meta = pod["metadata"]
    spec = pod.get("spec") or {}
    dns = pod_dns(pod, host_dns, cfg.cluster_dns, cfg.cluster_domain)
    privileged = any(
        ((c.get("securityContext") or {}).get("privileged") is True)
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
    )
    psc = spec.get("securityContext") or {}
    sec = pb.LinuxSandboxSecurityContext(namespace_options=namespace_options(pod), privileged=privileged)
    if psc.get("runAsUser") is not None:
        sec.run_as_user.value = int(psc["runAsUser"])
    if psc.get("runAsGroup") is not None:
        sec.run_as_group.value = int(psc["runAsGroup"])
    sec.supplemental_groups.extend(pod_groups(pod))
    sysctls = {s["name"]: s.get("value", "") for s in psc.get("sysctls") or []}
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(
            name=meta["name"], uid=meta["uid"], namespace=meta["namespace"], attempt=attempt
        ),
        hostname=kernel_hostname(pod, cfg.cluster_domain),
        log_directory=pod_log_dir(cfg, pod),
        dns_config=pb.DNSConfig(servers=dns.servers, searches=dns.searches, options=dns.options),
        port_mappings=port_mappings(pod),
        labels=L.pod_labels(pod),
        annotations=dict(meta.get("annotations") or {}),
        linux=pb.LinuxPodSandboxConfig(
            cgroup_parent=cgroup_parent(pod, cfg.cgroup_root, cfg.cgroup_driver)
            if cfg.cgroups_per_qos
            else "",
            security_context=sec,
            sysctls=sysctls,
        ),
    )
