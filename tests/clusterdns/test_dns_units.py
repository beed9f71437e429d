"""Cluster DNS without a server: the zone built from Services and slices, and the resolver's answers
to well-formed, malformed and unsupported questions (dnslib builds and reads every packet)."""

from __future__ import annotations

import asyncio
import struct

from dnslib import QTYPE, RCODE, DNSRecord

from clusterdns.records import build
from clusterdns.server import Resolver

SERVICES = [
    {
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "clusterIP": "10.96.3.4",
            "clusterIPs": ["10.96.3.4"],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
        },
    },
    {
        "metadata": {"name": "db", "namespace": "shop"},
        "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]},
    },
    {
        "metadata": {"name": "ext", "namespace": "shop"},
        "spec": {"type": "ExternalName", "externalName": "example.org"},
    },
]
SLICES = [
    {
        "metadata": {"name": "db-1", "namespace": "shop", "labels": {"kubernetes.io/service-name": "db"}},
        "addressType": "IPv4",
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": ["10.244.0.5"], "hostname": "db-0", "conditions": {"ready": True}},
            {"addresses": ["10.244.0.6"], "conditions": {"ready": True}},
            {"addresses": ["10.244.0.7"], "conditions": {"ready": False}},
        ],
    }
]


def ask(name: str, qtype: str = "A", resolver: Resolver | None = None) -> DNSRecord:
    resolver = resolver or Resolver(lambda: build(SERVICES, SLICES), [])
    reply = asyncio.run(resolver.handle(DNSRecord.question(name, qtype).pack()))
    assert reply is not None
    return DNSRecord.parse(reply)


def answers(reply: DNSRecord) -> list[tuple[str, str, str, int]]:
    return [(str(rr.rname), QTYPE[rr.rtype], str(rr.rdata), rr.ttl) for rr in reply.rr]


def test_service_names_answer_their_cluster_ip_with_ttl_30() -> None:
    reply = ask("web.shop.svc.cluster.local")
    assert reply.header.rcode == RCODE.NOERROR and reply.header.aa
    assert answers(reply) == [("web.shop.svc.cluster.local.", "A", "10.96.3.4", 30)]
    assert answers(ask("WEB.shop.svc.cluster.local."))[0][2] == "10.96.3.4"


def test_headless_services_answer_ready_pod_ips_and_per_pod_names() -> None:
    assert sorted(a[2] for a in answers(ask("db.shop.svc.cluster.local"))) == ["10.244.0.5", "10.244.0.6"]
    assert answers(ask("db-0.db.shop.svc.cluster.local"))[0][2] == "10.244.0.5"
    assert answers(ask("10-244-0-6.db.shop.svc.cluster.local"))[0][2] == "10.244.0.6"


def test_srv_for_named_ports() -> None:
    assert answers(ask("_http._tcp.web.shop.svc.cluster.local", "SRV")) == [
        ("_http._tcp.web.shop.svc.cluster.local.", "SRV", "0 100 80 web.shop.svc.cluster.local.", 30)
    ]
    targets = sorted(a[2] for a in answers(ask("_pg._tcp.db.shop.svc.cluster.local", "SRV")))
    assert targets == [  # CoreDNS splits the weight 100 over the entries: two endpoints, 50 each
        "0 50 5432 10-244-0-6.db.shop.svc.cluster.local.",
        "0 50 5432 db-0.db.shop.svc.cluster.local.",
    ]


MULTI = [
    {
        "metadata": {"name": "api", "namespace": "shop"},
        "spec": {
            "clusterIP": "10.96.3.9",
            "clusterIPs": ["10.96.3.9", "fd00::9"],
            "ports": [
                {"name": "http", "port": 80, "protocol": "TCP"},
                {"name": "dns", "port": 53, "protocol": "UDP"},
                {"port": 9000, "protocol": "TCP"},
            ],
        },
    },
    {
        "metadata": {"name": "alias", "namespace": "shop"},
        "spec": {"type": "ExternalName", "externalName": "api.shop.svc.cluster.local"},
    },
]


def test_srv_on_the_bare_service_name_answers_every_port_weighed_as_coredns() -> None:
    resolver = Resolver(lambda: build(SERVICES + MULTI, SLICES), [])
    # Three ports on two cluster IPs: six entries, weight floor(100/6) = 16, one record per port, and
    # the target's addresses in the additional section.
    reply = ask("api.shop.svc.cluster.local", "SRV", resolver)
    assert sorted(a[2] for a in answers(reply)) == [
        "0 16 53 api.shop.svc.cluster.local.",
        "0 16 80 api.shop.svc.cluster.local.",
        "0 16 9000 api.shop.svc.cluster.local.",
    ]
    assert sorted((str(rr.rname), str(rr.rdata)) for rr in reply.ar) == [
        ("api.shop.svc.cluster.local.", "10.96.3.9"),
        ("api.shop.svc.cluster.local.", "fd00::9"),
    ]
    assert answers(ask("_dns._udp.api.shop.svc.cluster.local", "SRV", resolver)) == [
        ("_dns._udp.api.shop.svc.cluster.local.", "SRV", "0 50 53 api.shop.svc.cluster.local.", 30)
    ]
    headless = ask("db.shop.svc.cluster.local", "SRV", resolver)
    assert sorted(a[2] for a in answers(headless)) == [
        "0 50 5432 10-244-0-6.db.shop.svc.cluster.local.",
        "0 50 5432 db-0.db.shop.svc.cluster.local.",
    ]
    assert sorted(str(rr.rdata) for rr in headless.ar) == ["10.244.0.5", "10.244.0.6"]
    assert answers(ask("db-0.db.shop.svc.cluster.local", "SRV", resolver))[0][2] == (
        "0 100 5432 db-0.db.shop.svc.cluster.local."
    )


def test_an_external_name_inside_the_zone_is_followed_to_its_addresses() -> None:
    resolver = Resolver(lambda: build(SERVICES + MULTI, SLICES), [])
    assert answers(ask("alias.shop.svc.cluster.local", "A", resolver)) == [
        ("alias.shop.svc.cluster.local.", "CNAME", "api.shop.svc.cluster.local.", 30),
        ("api.shop.svc.cluster.local.", "A", "10.96.3.9", 30),
    ]
    assert answers(ask("alias.shop.svc.cluster.local", "AAAA", resolver))[1][1:3] == ("AAAA", "fd00::9")
    assert answers(ask("alias.shop.svc.cluster.local", "CNAME", resolver)) == [
        ("alias.shop.svc.cluster.local.", "CNAME", "api.shop.svc.cluster.local.", 30)
    ]


def test_ptr_external_name_and_pod_records() -> None:
    assert answers(ask("4.3.96.10.in-addr.arpa", "PTR"))[0][2] == "web.shop.svc.cluster.local."
    assert answers(ask("5.0.244.10.in-addr.arpa", "PTR"))[0][2] == "db-0.db.shop.svc.cluster.local."
    assert answers(ask("ext.shop.svc.cluster.local"))[0][1:3] == ("CNAME", "example.org.")
    assert answers(ask("10-244-0-9.shop.pod.cluster.local"))[0][2] == "10.244.0.9"
    assert ask("not-an-ip.shop.pod.cluster.local").header.rcode == RCODE.NXDOMAIN


def test_nxdomain_versus_nodata() -> None:
    missing = ask("nope.shop.svc.cluster.local")
    assert missing.header.rcode == RCODE.NXDOMAIN and not missing.rr and QTYPE[missing.auth[0].rtype] == "SOA"
    nodata = ask("web.shop.svc.cluster.local", "AAAA")
    assert nodata.header.rcode == RCODE.NOERROR and not nodata.rr and QTYPE[nodata.auth[0].rtype] == "SOA"
    assert ask("shop.svc.cluster.local").header.rcode == RCODE.NOERROR  # an empty non-terminal
    assert ask("web.shop.svc.cluster.local", "MX").header.rcode == RCODE.NOERROR  # unsupported type: NODATA


def test_garbage_huge_and_odd_queries_get_proper_rcodes() -> None:
    resolver = Resolver(lambda: build(SERVICES, SLICES), [])
    garbage = asyncio.run(resolver.handle(b"\x12\x34" + b"\xff" * 30))
    assert garbage is not None and DNSRecord.parse(garbage).header.rcode == RCODE.FORMERR
    assert DNSRecord.parse(garbage).header.id == 0x1234
    assert asyncio.run(resolver.handle(b"\x01")) is None  # not even a header: dropped
    huge = (
        b"\x00\x07\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
        + (b"\x3f" + b"a" * 63) * 5
        + b"\x00\x00\x01\x00\x01"
    )
    reply = asyncio.run(resolver.handle(huge))
    assert reply is not None and DNSRecord.parse(reply).header.rcode in (
        RCODE.FORMERR,
        RCODE.NXDOMAIN,
        RCODE.SERVFAIL,
    )
    update = DNSRecord.question("web.shop.svc.cluster.local")
    update.header.opcode = 5
    assert DNSRecord.parse(asyncio.run(resolver.handle(update.pack()))).header.rcode == RCODE.NOTIMP
    two = DNSRecord.question("a.cluster.local")
    two.add_question(*DNSRecord.question("b.cluster.local").questions)
    assert DNSRecord.parse(asyncio.run(resolver.handle(two.pack()))).header.rcode == RCODE.FORMERR
    assert struct.unpack("!H", garbage[:2])[0] == 0x1234


def test_outside_names_without_upstream_are_servfail() -> None:
    assert ask("example.org").header.rcode == RCODE.SERVFAIL


def test_a_repeated_question_gets_the_same_answer_with_its_own_id_until_the_zone_changes() -> None:
    zones = {"now": build(SERVICES, SLICES)}
    resolver = Resolver(lambda: zones["now"], [])

    def query(qid: int) -> DNSRecord:
        packet = DNSRecord.question("web.shop.svc.cluster.local")
        packet.header.id = qid
        reply = asyncio.run(resolver.handle(packet.pack()))
        assert reply is not None
        return DNSRecord.parse(reply)

    first, second = query(101), query(202)
    assert (first.header.id, second.header.id) == (101, 202)
    assert answers(first) == answers(second) == [("web.shop.svc.cluster.local.", "A", "10.96.3.4", 30)]
    moved = [
        {
            **SERVICES[0],
            "spec": {**SERVICES[0]["spec"], "clusterIP": "10.96.3.9", "clusterIPs": ["10.96.3.9"]},
        },
        *SERVICES[1:],
    ]
    zones["now"] = build(moved, SLICES)
    assert answers(query(303)) == [("web.shop.svc.cluster.local.", "A", "10.96.3.9", 30)]


def test_an_srv_answer_too_big_for_udp_loses_its_additional_section_before_its_answers() -> None:
    many = {
        "metadata": {"name": "big", "namespace": "shop", "labels": {"kubernetes.io/service-name": "big"}},
        "addressType": "IPv4",
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
        "endpoints": [{"addresses": [f"10.244.1.{i}"], "conditions": {"ready": True}} for i in range(8)],
    }
    headless = {"metadata": {"name": "big", "namespace": "shop"}, "spec": {"clusterIP": "None"}}
    resolver = Resolver(lambda: build([headless], [many]), [])
    reply = ask("_pg._tcp.big.shop.svc.cluster.local", "SRV", resolver)
    # 8 SRV records fit in 512 bytes (509), with their 8 A records they would not (725).
    assert len(reply.rr) == 8 and not reply.ar and not reply.header.tc
    assert {str(rr.rdata).split()[1] for rr in reply.rr} == {"12"}  # floor(100 / 8)
    tcp = asyncio.run(
        resolver.handle(DNSRecord.question("_pg._tcp.big.shop.svc.cluster.local", "SRV").pack(), tcp=True)
    )
    assert len(DNSRecord.parse(tcp).ar) == 8  # over TCP nothing is dropped


def test_each_answer_is_counted_under_coredns_names_with_the_plugin_that_wrote_it() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from clusterdns.metrics import DnsMetrics, question_type, server_label

    metrics = DnsMetrics(server_label("0.0.0.0", 53))
    resolver = Resolver(lambda: build(SERVICES, SLICES), [], metrics)
    ask("web.shop.svc.cluster.local", resolver=resolver)
    ask("web.shop.svc.cluster.local", resolver=resolver)  # the memo path counts too
    ask("nope.shop.svc.cluster.local", "MX", resolver=resolver)
    asyncio.run(resolver.handle(b"\x12\x34" + b"\xff" * 30, tcp=True, family=2))  # FORMERR, before any plugin
    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}

    def count(name: str, **labels: str) -> float:
        return sum(
            s.value
            for s in families[name].samples
            if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items())
        )

    base = {"server": "dns://:53", "zone": ".", "view": ""}
    assert count("coredns_dns_requests", **base, proto="udp", family="1", type="A") == 2
    assert count("coredns_dns_requests", **base, proto="udp", family="1", type="MX") == 1
    assert count("coredns_dns_requests", **base, proto="tcp", family="2") == 1
    assert count("coredns_dns_responses", **base, rcode="NOERROR", plugin="kubernetes") == 2
    assert count("coredns_dns_responses", **base, rcode="NXDOMAIN", plugin="kubernetes") == 1
    assert count("coredns_dns_responses", **base, rcode="FORMERR", plugin="") == 1
    assert question_type(DNSRecord.question("x.", "NAPTR").pack()) == "other"
    assert server_label("10.0.0.10", 5353) == "dns://10.0.0.10:5353"
    assert not any(s.name.endswith("_created") for f in families.values() for s in f.samples)
