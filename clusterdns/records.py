"""The cluster's DNS data, without I/O (the records CoreDNS's kubernetes plugin serves): built from
Services and EndpointSlices, answered per question.

- `<svc>.<ns>.svc.<zone>`: A the cluster IP; a headless Service its ready endpoints' IPs (all of them
  with publishNotReadyAddresses); an ExternalName Service a CNAME.
- `<host>.<svc>.<ns>.svc.<zone>`: a headless endpoint, by its hostname or else its dashed IP.
- `_<port>._<proto>.<svc>.<ns>.svc.<zone>`: SRV per named port (to the Service, or to each endpoint of
  a headless one).
- `a-b-c-d.<ns>.pod.<zone>`: A a.b.c.d (the plugin's `pods insecure`).
- PTR for cluster IPs and headless endpoints.
A name that exists with no record of the asked type is NODATA (NOERROR, SOA in authority); one that
does not exist is NXDOMAIN, as CoreDNS answers. Every answer has TTL 30 (kubeadm's Corefile).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
TTL = 30
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclass(frozen=True)
class Record:
    name: str  # lower case, no trailing dot
    type: str  # A, AAAA, CNAME, SRV, PTR
    value: str  # an address, a target name, or "priority weight port target" for SRV


@dataclass(frozen=True)
class Answer:
    rcode: str  # NOERROR, NXDOMAIN
    records: tuple[Record, ...] = ()
    authoritative: bool = True


def _norm(name: str) -> str:
    return name.rstrip(".").lower()


def _dashed(ip: str) -> str:
    return ip.replace(".", "-").replace(":", "-")


def _reverse(ip: str) -> str:
    return ipaddress.ip_address(ip).reverse_pointer


@dataclass
class Zone:
    domain: str = "cluster.local"
    records: dict[str, list[Record]] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)  # every existing name, empty non-terminals too

    def add(self, name: str, type_: str, value: str) -> None:
        name = _norm(name)
        self.records.setdefault(name, []).append(Record(name, type_, value))
        labels = name.split(".")
        for i in range(len(labels)):
            self.names.add(".".join(labels[i:]))

    def in_zone(self, name: str) -> bool:
        """Names this server answers for: the cluster domain, and reverse names of cluster addresses
        (other reverse lookups go upstream)."""
        name = _norm(name)
        return name == self.domain or name.endswith("." + self.domain) or name in self.records

    def add_name(self, name: str) -> None:
        labels = _norm(name).split(".")
        for i in range(len(labels)):
            self.names.add(".".join(labels[i:]))

    def lookup(self, name: str, qtype: str) -> Answer:
        name = _norm(name)
        pod = self._pod_record(name, qtype)
        if pod is not None:
            return pod
        found = self.records.get(name, [])
        if not found and name not in self.names:
            return Answer("NXDOMAIN")
        if qtype == "ANY":
            return Answer("NOERROR", tuple(found))
        matching = [r for r in found if r.type == qtype]
        if not matching:
            cname = [r for r in found if r.type == "CNAME"]
            return Answer("NOERROR", tuple(cname))
        return Answer("NOERROR", tuple(matching))

    def _pod_record(self, name: str, qtype: str) -> Answer | None:
        suffix = f".pod.{self.domain}"
        if not name.endswith(suffix):
            return None
        labels = name[: -len(suffix)].split(".")
        if len(labels) != 2:
            return None if len(labels) == 1 else Answer("NXDOMAIN")
        dashed, _namespace = labels
        try:
            ip = ipaddress.ip_address(
                dashed.replace("-", ".") if dashed.count("-") == 3 else dashed.replace("-", ":")
            )
        except ValueError:
            return Answer("NXDOMAIN")
        want = "A" if ip.version == 4 else "AAAA"
        if qtype not in (want, "ANY"):
            return Answer("NOERROR")
        return Answer("NOERROR", (Record(name, want, str(ip)),))


def _address_type(ip: str) -> str:
    return "AAAA" if ipaddress.ip_address(ip).version == 6 else "A"


def build(services: list[Obj], slices: list[Obj], domain: str = "cluster.local") -> Zone:
    zone = Zone(domain)
    zone.add_name(f"svc.{domain}")
    zone.add_name(f"pod.{domain}")
    by_service: dict[tuple[str, str], list[Obj]] = {}
    for s in slices:
        m = s.get("metadata") or {}
        name = (m.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if name and s.get("addressType") in ("IPv4", "IPv6"):
            by_service.setdefault((m.get("namespace", ""), name), []).append(s)
    for service in services:
        _service(zone, service, by_service)
    return zone


def _service(zone: Zone, service: Obj, by_service: dict[tuple[str, str], list[Obj]]) -> None:
    m, spec = service.get("metadata") or {}, service.get("spec") or {}
    ns, name = m.get("namespace", ""), m.get("name", "")
    fqdn = f"{name}.{ns}.svc.{zone.domain}"
    zone.add_name(fqdn)
    if spec.get("type") == "ExternalName":
        if spec.get("externalName"):
            zone.add(fqdn, "CNAME", _norm(spec["externalName"]))
        return
    ports = [p for p in spec.get("ports") or [] if p.get("name")]
    if spec.get("clusterIP") and spec["clusterIP"] != "None":
        for ip in spec.get("clusterIPs") or [spec["clusterIP"]]:
            try:
                zone.add(fqdn, _address_type(ip), ip)
                zone.add(_reverse(ip), "PTR", fqdn)
            except ValueError:
                continue
        for p in ports:
            zone.add(
                f"_{p['name']}._{(p.get('protocol') or 'TCP').lower()}.{fqdn}",
                "SRV",
                f"0 100 {p.get('port')} {fqdn}",
            )
        return
    publish = bool(spec.get("publishNotReadyAddresses"))
    for s in by_service.get((ns, name), []):
        slice_ports = {p.get("name") or "": p for p in s.get("ports") or []}
        for ep in s.get("endpoints") or []:
            ready = (ep.get("conditions") or {}).get("ready")
            if not (publish or ready is None or ready):
                continue
            for ip in ep.get("addresses") or []:
                try:
                    kind = _address_type(ip)
                except ValueError:
                    continue
                host = f"{ep.get('hostname') or _dashed(ip)}.{fqdn}"
                zone.add(fqdn, kind, ip)
                zone.add(host, kind, ip)
                zone.add(_reverse(ip), "PTR", host)
                for pname, p in slice_ports.items():
                    if pname and p.get("port"):
                        proto = (p.get("protocol") or "TCP").lower()
                        zone.add(f"_{pname}._{proto}.{fqdn}", "SRV", f"0 100 {p['port']} {host}")
