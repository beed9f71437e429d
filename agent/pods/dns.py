"""The pod's resolver configuration from dnsPolicy and dnsConfig, as upstream builds it.

ClusterFirst points at the cluster DNS with the namespace's search path (falling back to the host's
resolver when no clusterDNS is configured, as upstream does); Default copies the host's resolv.conf;
None uses only dnsConfig; dnsConfig is then merged on top.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_SEARCHES = 32


@dataclass
class DNS:
    servers: list[str] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)


def parse_resolv_conf(text: str) -> DNS:
    dns = DNS()
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if fields[0] == "nameserver" and len(fields) > 1:
            dns.servers.append(fields[1])
        elif fields[0] in ("search", "domain"):
            dns.searches = fields[1:]
        elif fields[0] == "options":
            dns.options.extend(fields[1:])
    return dns


def _unique(items: list[str]) -> list[str]:
    seen: set[str] = set()
    return [i for i in items if not (i in seen or seen.add(i))]


def _merge_options(base: list[str], extra: list[dict[str, Any]]) -> list[str]:
    opts: dict[str, str | None] = {}
    for o in base:
        name, _, value = o.partition(":")
        opts[name] = value or None
    for o in extra:
        opts[o["name"]] = o.get("value")
    return [k if v is None else f"{k}:{v}" for k, v in opts.items()]


def pod_dns(pod: dict[str, Any], host: DNS, cluster_dns: list[str], cluster_domain: str) -> DNS:
    spec = pod.get("spec") or {}
    policy = spec.get("dnsPolicy") or "ClusterFirst"
    host_network = bool(spec.get("hostNetwork"))
    if policy == "ClusterFirst" and host_network:
        policy = "Default"
    if policy in ("ClusterFirst", "ClusterFirstWithHostNet") and not cluster_dns:
        policy = "Default"  # upstream: no clusterDNS configured -> the host's resolver
    if policy == "None":
        dns = DNS()
    elif policy == "Default":
        dns = DNS(list(host.servers), list(host.searches), list(host.options))
    else:
        ns = pod["metadata"]["namespace"]
        searches = (
            [f"{ns}.svc.{cluster_domain}", f"svc.{cluster_domain}", cluster_domain] if cluster_domain else []
        )
        dns = DNS(list(cluster_dns), _unique(searches + host.searches), ["ndots:5"])
    cfg = spec.get("dnsConfig") or {}
    dns.servers = _unique(dns.servers + list(cfg.get("nameservers") or []))
    dns.searches = _unique(dns.searches + list(cfg.get("searches") or []))[:MAX_SEARCHES]
    dns.options = _merge_options(dns.options, list(cfg.get("options") or []))
    return dns
