"""The DNS server: UDP and TCP on one address, wire format by dnslib (no hand-written packets).

Questions inside the cluster domain (and reverse names of cluster addresses) are answered from the
zone the watches keep; everything else is forwarded to the host's resolvers and their answer relayed.
Bad input never raises: an unparseable query is FORMERR (or dropped when not even its header can be
read), an opcode other than QUERY is NOTIMP, a query without exactly one question is FORMERR, an
upstream that does not answer is SERVFAIL."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dnslib import AAAA, CNAME, PTR, QTYPE, RCODE, RR, SOA, SRV, A, DNSHeader, DNSLabel, DNSRecord
from dnslib.dns import DNSError

from clusterdns.metrics import DnsMetrics
from clusterdns.records import TTL, Answer, Record, Zone

log = logging.getLogger("dns")
UPSTREAM_TIMEOUT = 2.0
# The plugins credited with an answer in coredns_dns_responses_total.
KUBERNETES, FORWARD = "kubernetes", "forward"


def _rdata(record: Record):  # type: ignore[no-untyped-def]
    if record.type == "A":
        return A(record.value)
    if record.type == "AAAA":
        return AAAA(record.value)
    if record.type == "CNAME":
        return CNAME(record.value + ".")
    if record.type == "PTR":
        return PTR(record.value + ".")
    priority, weight, port, target = record.value.split()
    return SRV(int(priority), int(weight), int(port), target + ".")


def _rr(record: Record) -> RR:
    return RR(DNSLabel(record.name + "."), getattr(QTYPE, record.type), ttl=TTL, rdata=_rdata(record))


def soa(domain: str) -> RR:
    return RR(
        domain + ".",
        QTYPE.SOA,
        ttl=TTL,
        rdata=SOA(f"ns.dns.{domain}.", f"hostmaster.{domain}.", (1, 7200, 1800, 86400, TTL)),
    )


def _error(data: bytes, rcode: int) -> bytes | None:
    """A reply carrying only the query's id and the rcode; None if not even a header can be read."""
    if len(data) < 12:
        return None
    (qid,) = struct.unpack("!H", data[:2])
    return DNSRecord(DNSHeader(id=qid, qr=1, ra=1, rcode=rcode)).pack()


MEMO_SIZE = 10_000


@dataclass
class Resolver:
    zone: Callable[[], Zone]
    upstreams: list[str]
    metrics: DnsMetrics | None = None
    # Replies to in-zone questions for the current zone, by the query's bytes after its id: an answer is
    # a pure function of those and the zone, so a repeated question skips parsing and packing. Cleared
    # whenever the zone is rebuilt (and when full).
    _memo: dict[tuple[bytes, bool], bytes] = field(default_factory=dict, init=False, repr=False)
    _memo_zone: Zone | None = field(default=None, init=False, repr=False)

    async def handle(self, data: bytes, tcp: bool = False, family: int = 1) -> bytes | None:
        """The reply to one query (None: nothing to send); `family` 1 for IPv4, 2 for IPv6 peers."""
        started = time.perf_counter()
        zone = self.zone()
        if zone is not self._memo_zone or len(self._memo) >= MEMO_SIZE:
            self._memo.clear()
            self._memo_zone = zone
        key = (bytes(data[2:]), tcp)
        hit = self._memo.get(key)
        if hit is not None and len(data) >= 12:
            reply: bytes | None = bytes(data[:2]) + hit
            plugin = KUBERNETES
        else:
            reply, plugin = await self._handle(data, zone, tcp)
        if reply is not None and self.metrics is not None:
            self.metrics.report(data, reply, plugin, tcp, family, time.perf_counter() - started)
        return reply

    def panicked(self) -> None:
        if self.metrics is not None:
            self.metrics.panics.inc()

    async def _handle(self, data: bytes, zone: Zone, tcp: bool) -> tuple[bytes | None, str]:
        """The reply and the plugin CoreDNS would credit with it ("" before the plugin chain)."""
        try:
            query = DNSRecord.parse(data)
        except (DNSError, struct.error, ValueError, IndexError, UnicodeDecodeError):
            return _error(data, RCODE.FORMERR), ""
        if query.header.qr:
            return None, ""  # a response sent to us: ignore it
        if query.header.opcode != 0:
            return self._reply(query, RCODE.NOTIMP), ""
        if len(query.questions) != 1:
            return self._reply(query, RCODE.FORMERR), ""
        question = query.questions[0]
        if len(question.qname) > 253:  # longer than a name may be: it cannot even be echoed back
            return _error(data, RCODE.FORMERR), ""
        name = str(question.qname)
        if zone.in_zone(name):
            qtype = QTYPE.get(question.qtype, str(question.qtype))
            answer = zone.lookup(name, qtype)
            if answer.external or answer.external_extra:  # upstream's data: answered afresh every time
                return self._answer(query, zone, answer, tcp, *await self._outside(answer, qtype)), KUBERNETES
            reply = self._answer(query, zone, answer, tcp)
            self._memo[(bytes(data[2:]), tcp)] = reply[2:]
            return reply, KUBERNETES
        return await self._forward(query, data), FORWARD

    async def _outside(self, answer: Answer, qtype: str) -> tuple[list[RR], list[RR]]:
        """The records of targets outside the zone, asked of the upstream resolvers as CoreDNS asks its
        upstream: the asked type of a CNAME's target (appended to the answer), A and AAAA of SRV targets
        (the additional section; AAAA without CNAMEs, which the A answer already carried)."""
        records = await self._resolve(answer.external, qtype) if answer.external else []
        extra: list[RR] = []
        for target in answer.external_extra:
            extra += await self._resolve(target, "A")
            extra += [rr for rr in await self._resolve(target, "AAAA") if rr.rtype != QTYPE.CNAME]
        return records, extra

    async def _resolve(self, name: str, qtype: str) -> list[RR]:
        question = DNSRecord.question(name, qtype)
        try:
            reply = DNSRecord.parse(await self._forward(question, question.pack()))
        except (DNSError, struct.error, ValueError, IndexError, UnicodeDecodeError):
            return []
        return list(reply.rr) if reply.header.rcode in (RCODE.NOERROR, RCODE.NXDOMAIN) else []

    def _reply(self, query: DNSRecord, rcode: int) -> bytes:
        reply = query.reply()
        reply.header.rcode = rcode
        return reply.pack()

    def _answer(
        self,
        query: DNSRecord,
        zone: Zone,
        answer: Answer,
        tcp: bool,
        outside: list[RR] | None = None,
        outside_extra: list[RR] | None = None,
    ) -> bytes:
        reply = query.reply(ra=1, aa=1)
        reply.header.rcode = getattr(RCODE, answer.rcode)
        reply.add_answer(*(_rr(record) for record in answer.records), *(outside or []))
        reply.add_ar(*(_rr(record) for record in answer.extra), *(outside_extra or []))
        if not reply.rr:
            reply.add_auth(soa(zone.domain))
        packed = reply.pack()
        if not tcp and len(packed) > 512 and not query.ar and reply.ar:
            # Over a plain UDP reply's size the additional section goes first, without TC (miekg/dns's
            # Truncate, which CoreDNS applies, sets TC only when answers had to go).
            reply.ar = []
            packed = reply.pack()
        if not tcp and len(packed) > 512 and not query.ar:
            reply = query.reply(ra=1, aa=1)
            reply.header.tc = 1
            packed = reply.pack()
        return packed

    async def _forward(self, query: DNSRecord, data: bytes) -> bytes:
        loop = asyncio.get_running_loop()
        for upstream in self.upstreams:
            future: asyncio.Future[bytes] = loop.create_future()
            host, _, port = upstream.rpartition(":") if upstream.count(":") == 1 else (upstream, "", "53")
            try:
                transport, _ = await loop.create_datagram_endpoint(
                    lambda f=future: _Upstream(f, data[:2]), remote_addr=(host, int(port or 53))
                )
            except OSError as err:
                log.warning("forward failed upstream=%s error=%s", upstream, err)
                continue
            try:
                sent = time.perf_counter()
                transport.sendto(data)
                async with asyncio.timeout(UPSTREAM_TIMEOUT):
                    reply = await future
                if self.metrics is not None:
                    self.metrics.forwarded(f"{host}:{port or 53}", reply, time.perf_counter() - sent)
                return reply
            except (TimeoutError, OSError):
                log.warning("no answer upstream=%s name=%s", upstream, query.q.qname)
            finally:
                transport.close()
        return self._reply(query, RCODE.SERVFAIL)


class _Upstream(asyncio.DatagramProtocol):
    """One forwarded question: the first reply with its id completes `future`."""

    def __init__(self, future: asyncio.Future[bytes], qid: bytes) -> None:
        self.future, self.qid = future, qid

    def datagram_received(self, reply: bytes, _addr: object) -> None:
        if not self.future.done() and reply[:2] == self.qid:
            self.future.set_result(reply)


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        asyncio.ensure_future(self._answer(data, addr))

    async def _answer(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            reply = await self.resolver.handle(data, family=2 if ":" in addr[0] else 1)
        except Exception:  # never let one query take the server down
            log.exception("query failed peer=%s", addr[0])
            self.resolver.panicked()
            reply = _error(data, RCODE.SERVFAIL)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)


async def _tcp_client(resolver: Resolver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    peer = writer.get_extra_info("peername")
    family = 2 if peer and ":" in str(peer[0]) else 1
    try:
        while True:
            size = struct.unpack("!H", await reader.readexactly(2))[0]
            data = await reader.readexactly(size)
            try:
                reply = await resolver.handle(data, tcp=True, family=family)
            except Exception:
                log.exception("query failed over TCP")
                resolver.panicked()
                reply = _error(data, RCODE.SERVFAIL)
            if reply is None:
                break
            writer.write(struct.pack("!H", len(reply)) + reply)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@dataclass
class Servers:
    udp: asyncio.DatagramTransport
    tcp: asyncio.AbstractServer
    port: int

    async def close(self) -> None:
        self.udp.close()
        self.tcp.close()
        await self.tcp.wait_closed()


async def serve(resolver: Resolver, host: str, port: int) -> Servers:
    """UDP and TCP on host:port (port 0: a free port, the same for both)."""
    loop = asyncio.get_running_loop()
    tcp = await asyncio.start_server(lambda r, w: _tcp_client(resolver, r, w), host, port)
    bound = tcp.sockets[0].getsockname()[1]
    udp, _ = await loop.create_datagram_endpoint(lambda: _Udp(resolver), local_addr=(host, bound))
    return Servers(udp, tcp, bound)
