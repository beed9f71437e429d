"""The DNS server for real: fed by watches on the real API server (on its own identity), answering
over UDP and TCP on a local port, forwarding what is not the cluster's to an upstream resolver (a
second server here, on another port), following Services and slices as they change."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from dnslib import QTYPE, RCODE, DNSRecord
from kubernetes import client

from clusterdns.records import Zone
from clusterdns.server import Resolver, serve
from clusterdns.watch import ClusterZone
from e2e.waiting import wait_for_async
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from pykubelet.rig.apiserver import ApiServer

pytestmark = pytest.mark.integration
DNS_USER = "system:serviceaccount:kube-system:coredns"
DNS_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:kube-system")


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("dns-api")) as server:
        yield server


@pytest.fixture(scope="module")
def v1(apiserver: ApiServer) -> Iterator[client.CoreV1Api]:
    with apiserver.api_client() as api:
        yield client.CoreV1Api(api)


@pytest.fixture
async def dns_port(apiserver: ApiServer, tmp_path: Path) -> AsyncIterator[int]:
    upstream_zone = Zone("example.test")
    upstream_zone.add("www.example.test", "A", "192.0.2.80")
    upstream = await serve(Resolver(lambda: upstream_zone, []), "127.0.0.1", 0)
    # The identity the stack gives the DNS server: kube-system/coredns, bound to system:coredns (kubeadm's).
    kubeconfig = apiserver.client_kubeconfig(DNS_USER, DNS_GROUPS, tmp_path / "dns.kubeconfig")
    kube = KubeClient(load_kubeconfig(kubeconfig), component="coredns")
    zone = ClusterZone(kube)
    await zone.start()
    servers = await serve(Resolver(zone.zone, [f"127.0.0.1:{upstream.port}"]), "127.0.0.1", 0)
    try:
        yield servers.port
    finally:
        await servers.close()
        await upstream.close()
        await zone.stop()
        await kube.close()


async def query(port: int, name: str, qtype: str = "A", tcp: bool = False) -> DNSRecord:
    packet = DNSRecord.question(name, qtype)
    raw = await asyncio.to_thread(packet.send, "127.0.0.1", port, tcp=tcp, timeout=3)
    return DNSRecord.parse(raw)


def addresses(reply: DNSRecord) -> list[str]:
    return sorted(str(rr.rdata) for rr in reply.rr if QTYPE[rr.rtype] in ("A", "AAAA"))


async def test_services_resolve_over_udp_and_tcp_and_follow_changes(dns_port, v1):
    ns = f"d-{time.time_ns() % 10**8}"
    v1.create_namespace({"metadata": {"name": ns}})
    try:
        svc = v1.create_namespaced_service(
            ns,
            {
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]},
            },
        )
        name = f"web.{ns}.svc.cluster.local"
        reply = await wait_for_async(lambda: _answered(dns_port, name), timeout=10.0, interval=0.05)
        assert addresses(reply) == [svc.spec.cluster_ip] and reply.rr[0].ttl == 30
        assert addresses(await query(dns_port, name, tcp=True)) == [svc.spec.cluster_ip]
        srv = await query(dns_port, f"_http._tcp.{name}", "SRV")
        assert str(srv.rr[0].rdata) == f"0 100 80 {name}."
        kubernetes = await query(dns_port, "kubernetes.default.svc.cluster.local")
        assert addresses(kubernetes) == ["10.96.0.1"]
        v1.delete_namespaced_service("web", ns)
        gone = await wait_for_async(
            lambda: _rcode(dns_port, name, RCODE.NXDOMAIN),
            timeout=10.0,
            interval=0.05,
        )
        assert QTYPE[gone.auth[0].rtype] == "SOA"
    finally:
        v1.delete_namespace(ns)


async def test_external_names_carry_the_targets_addresses_and_srv_answers_the_bare_name(dns_port, v1):
    """CoreDNS follows an ExternalName's CNAME to the target's records through its upstream (clients
    that do not chase CNAMEs themselves, glibc's and musl's stub resolvers among them, get an address),
    and answers SRV on a Service's bare name with every port, the weight split over the entries."""
    ns = f"x-{time.time_ns() % 10**8}"
    v1.create_namespace({"metadata": {"name": ns}})
    try:
        v1.create_namespaced_service(
            ns,
            {
                "metadata": {"name": "ext"},
                "spec": {"type": "ExternalName", "externalName": "www.example.test"},
            },
        )
        web = v1.create_namespaced_service(
            ns,
            {
                "metadata": {"name": "web"},
                "spec": {
                    "selector": {"app": "web"},
                    "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}],
                },
            },
        )
        ext = f"ext.{ns}.svc.cluster.local"
        reply = await wait_for_async(lambda: _answered(dns_port, ext), timeout=10.0, interval=0.05)
        assert [(str(rr.rname), QTYPE[rr.rtype], str(rr.rdata)) for rr in reply.rr] == [
            (f"{ext}.", "CNAME", "www.example.test."),
            ("www.example.test.", "A", "192.0.2.80"),
        ]
        srv = await query(dns_port, ext, "SRV")
        assert [str(rr.rdata) for rr in srv.rr] == ["0 100 0 www.example.test."]
        assert [(str(rr.rname), str(rr.rdata)) for rr in srv.ar] == [("www.example.test.", "192.0.2.80")]
        name = f"web.{ns}.svc.cluster.local"
        bare = await query(dns_port, name, "SRV", tcp=True)
        assert sorted(str(rr.rdata) for rr in bare.rr) == [f"0 50 443 {name}.", f"0 50 80 {name}."]
        assert [str(rr.rdata) for rr in bare.ar] == [web.spec.cluster_ip]
    finally:
        v1.delete_namespace(ns)


async def test_other_names_are_forwarded_upstream(dns_port):
    reply = await query(dns_port, "www.example.test")
    assert addresses(reply) == ["192.0.2.80"]
    assert (await query(dns_port, "nope.example.test")).header.rcode == RCODE.NXDOMAIN


async def _answered(port: int, name: str) -> DNSRecord | None:
    reply = await query(port, name)
    return reply if reply.rr else None


async def _rcode(port: int, name: str, rcode: int) -> DNSRecord | None:
    reply = await query(port, name)
    return reply if reply.header.rcode == rcode else None
