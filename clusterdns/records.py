"""The cluster's DNS data, without I/O (the records CoreDNS's kubernetes plugin serves): built from
Services and EndpointSlices, answered per question.

- `<svc>.<ns>.svc.<zone>`: A the cluster IP; a headless Service its ready endpoints' IPs (all of them
  with publishNotReadyAddresses); an ExternalName Service a CNAME, followed to the target's records
  (in the zone here; outside it the answer names the target for the server to resolve upstream).
- `<host>.<svc>.<ns>.svc.<zone>`: a headless endpoint, by its hostname or else its dashed IP.
- SRV on `_<port>._<proto>.<svc>.<ns>.svc.<zone>` (per named port), on the bare service name (every
  port) and on an endpoint's name (its ports): to the Service, to each endpoint of a headless one, to
  the target of an ExternalName (port 0). Priority 0; weight 100 split evenly over the entries behind
  the name (floor, at least 1), counted before duplicates are dropped, as CoreDNS computes it. The
  targets' addresses go in the additional section.
- `a-b-c-d.<ns>.pod.<zone>`: A a.b.c.d (the plugin's `pods insecure`).
- PTR for cluster IPs and headless endpoints.
A name that exists with no record of the asked type is NODATA (NOERROR, SOA in authority); one that
does not exist is NXDOMAIN, as CoreDNS answers. Every answer has TTL 30 (kubeadm's Corefile).
"""

from __future__ import annotations

import ipaddress
import math
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
    extra: tuple[Record, ...] = ()  # the additional section: addresses of SRV targets in the zone
    # A CNAME target outside the zone whose records of the asked type belong after the CNAME (CoreDNS
    # resolves it through its upstream), and SRV targets outside the zone whose A and AAAA records belong
    # in the additional section: the server looks both up.
    external: str = ""
    external_extra: tuple[str, ...] = ()


def _norm(name: str) -> str:
    return name.rstrip(".").lower()


def _dashed(ip: str) -> str:
    return ip.replace(".", "-").replace(":", "-")


def _reverse(ip: str) -> str:
    return ipaddress.ip_address(ip).reverse_pointer


MAX_CNAME_CHAIN = 8  # CoreDNS stops following CNAMEs inside its zone after 8


@dataclass
class Zone:
    domain: str = "cluster.local"
    records: dict[str, list[Record]] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)  # every existing name, empty non-terminals too
    # SRV entries per name (port, target) until finish() weighs them: duplicates still count.
    _srv: dict[str, list[tuple[int, str]]] = field(default_factory=dict, repr=False)

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

    def add_srv(self, name: str, port: int, target: str) -> None:
        self._srv.setdefault(_norm(name), []).append((port, _norm(target)))

    def finish(self) -> None:
        """Turn the SRV entries into records: every entry weighs 100 split evenly over the name's
        entries (floor, at least 1; CoreDNS counts them before dropping duplicates), priority 0, and a
        (target, port) pair is answered once."""
        for name, entries in self._srv.items():
            weight = max(1, math.floor(100.0 / (100 * len(entries)) * 100))  # CoreDNS's float sum
            for port, target in dict.fromkeys(entries):
                self.add(name, "SRV", f"0 {weight} {port} {target}")
        self._srv.clear()

    def lookup(self, name: str, qtype: str, chain: int = 0) -> Answer:
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
            if cname and qtype != "CNAME":
                return self._follow(cname[0], qtype, chain)
            return Answer("NOERROR", tuple(cname))
        if qtype == "SRV":
            return self._srv_answer(tuple(matching))
        return Answer("NOERROR", tuple(matching))

    def _follow(self, cname: Record, qtype: str, chain: int) -> Answer:
        """A CNAME and what its target holds of the asked type, as CoreDNS's A and AAAA lookups chase an
        ExternalName: inside the zone here (dropped when the target has nothing, or the chain is longer
        than 8 or loops), outside it by the server through the upstream resolvers."""
        target = cname.value
        if target == cname.name or chain >= MAX_CNAME_CHAIN:
            return Answer("NOERROR")
        if not self.in_zone(target):
            return Answer("NOERROR", (cname,), external=target)
        rest = self.lookup(target, qtype, chain + 1)
        if not rest.records:
            return Answer("NOERROR")
        return Answer("NOERROR", (cname, *rest.records), external=rest.external)

    def _srv_answer(self, records: tuple[Record, ...]) -> Answer:
        extra: dict[Record, None] = {}
        outside: dict[str, None] = {}
        for record in records:
            target = record.value.split()[3]
            if not self.in_zone(target):
                outside[target] = None
                continue
            for address in self.records.get(target, []):
                if address.type in ("A", "AAAA"):
                    extra[address] = None
        return Answer("NOERROR", records, extra=tuple(extra), external_extra=tuple(outside))

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
    zone.finish()
    return zone


def _service(zone: Zone, service: Obj, by_service: dict[tuple[str, str], list[Obj]]) -> None:
    m, spec = service.get("metadata") or {}, service.get("spec") or {}
    ns, name = m.get("namespace", ""), m.get("name", "")
    fqdn = f"{name}.{ns}.svc.{zone.domain}"
    zone.add_name(fqdn)
    if spec.get("type") == "ExternalName":
        target = _norm(spec.get("externalName") or "")
        if target and not _is_ip(target):  # CoreDNS serves an ExternalName only when it is a name
            zone.add(fqdn, "CNAME", target)
            zone.add_srv(fqdn, 0, target)
        return
    if spec.get("clusterIP") and spec["clusterIP"] != "None":
        _cluster_ip_service(zone, fqdn, spec)
        return
    _headless_service(zone, fqdn, spec, by_service.get((ns, name), []))


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _srv_names(fqdn: str, port: Obj) -> list[str]:
    """The SRV names one port answers under: the bare name always, `_<port>._<proto>` when named."""
    names = [fqdn]
    if port.get("name"):
        names.append(f"_{port['name']}._{(port.get('protocol') or 'TCP').lower()}.{fqdn}")
    return names


def _cluster_ip_service(zone: Zone, fqdn: str, spec: Obj) -> None:
    ips = []
    for ip in spec.get("clusterIPs") or [spec["clusterIP"]]:
        try:
            zone.add(fqdn, _address_type(ip), ip)
            zone.add(_reverse(ip), "PTR", fqdn)
        except ValueError:
            continue
        ips.append(ip)
    for p in spec.get("ports") or []:
        if p.get("port"):
            for srv_name in _srv_names(fqdn, p):
                for _ip in ips:  # one entry per cluster IP, as CoreDNS counts them
                    zone.add_srv(srv_name, p["port"], fqdn)


def _headless_service(zone: Zone, fqdn: str, spec: Obj, slices: list[Obj]) -> None:
    publish = bool(spec.get("publishNotReadyAddresses"))
    for s in slices:
        slice_ports = [p for p in s.get("ports") or [] if p.get("port")]
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
                for p in slice_ports:
                    for srv_name in (*_srv_names(fqdn, p), host):
                        zone.add_srv(srv_name, p["port"], host)
