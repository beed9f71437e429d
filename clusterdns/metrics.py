"""CoreDNS's metrics under CoreDNS's names (plugin/metrics/vars, plugin/pkg/proxy as of CoreDNS 1.11,
the release Kubernetes 1.32 ships), in the DNS server's own registry, served on :9153 /metrics.

The labels are what a kubeadm cluster's Corefile gives (`.:53 { ... prometheus :9153 forward . ... }`):
one server block, so `zone` is "." for every question; `view` is empty (no view plugin); `server` is
`dns://:53`, or `dns://<address>:<port>` when bound to one address; `plugin` on responses names who
wrote the answer (`kubernetes` for the cluster domain and reverse zones, `forward` for the rest, empty
for what was refused before any plugin: FORMERR, NOTIMP). Forwarded questions are timed per upstream
as `coredns_proxy_request_duration_seconds{proxy_name="forward"}`, the name CoreDNS 1.11 moved the
forward plugin's latency to. No cache series: the memo of in-zone answers is not CoreDNS's cache
plugin (no TTL, no eviction by age), and no DO-bit counter (no DNSSEC here).
"""

from __future__ import annotations

import platform
import struct
from importlib.metadata import PackageNotFoundError, version

from dnslib import QTYPE, RCODE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kubeclient.exposition import render

# plugin.TimeBuckets: prometheus.ExponentialBuckets(0.00025, 2, 16), 0.25 ms .. 8.2 s
TIME_BUCKETS = tuple(0.00025 * 2**i for i in range(16))
# plugin.SizeBuckets
SIZE_BUCKETS = (0, 100, 200, 300, 400, 511, 1023, 2047, 4095, 8291, 16e3, 32e3, 48e3, 64e3)
# The query types CoreDNS names in the `type` label (vars.monitorType); any other is "other".
MONITORED_TYPES = frozenset(
    (
        "A",
        "AAAA",
        "CNAME",
        "DNSKEY",
        "DS",
        "MX",
        "NSEC3",
        "NSEC",
        "NS",
        "PTR",
        "RRSIG",
        "SOA",
        "SRV",
        "TXT",
        "HTTPS",
        "IXFR",
        "AXFR",
        "ANY",
    )
)
ZONE = "."
# The plugins a kubeadm Corefile enables, reported as coredns_plugin_enabled.
ENABLED_PLUGINS = ("errors", "forward", "health", "kubernetes", "prometheus", "ready")


def server_label(bind_address: str, port: int) -> str:
    """CoreDNS's `server` label: the listening address as `dns://[bind]:port`."""
    host = "" if bind_address in ("", "0.0.0.0", "::") else bind_address
    return f"dns://{host}:{port}"


def question_type(data: bytes) -> str:
    """The `type` label of a query, read from its wire form (the memo path never parses it)."""
    offset = 12
    try:
        while data[offset]:
            offset += data[offset] + 1
        (qtype,) = struct.unpack_from("!H", data, offset + 1)
    except (IndexError, struct.error):
        return "other"
    name = QTYPE.get(qtype, "")
    return name if name in MONITORED_TYPES else "other"


def rcode_name(reply: bytes) -> str:
    """The reply's RCODE as CoreDNS prints it (NOERROR, NXDOMAIN, ...)."""
    code = reply[3] & 0x0F if len(reply) >= 4 else 2
    return str(RCODE.get(code, str(code)))


def _own_version() -> str:
    try:
        return version("pykubelet")
    except PackageNotFoundError:
        return "unknown"


class DnsMetrics:
    def __init__(self, server: str) -> None:
        self.server = server
        self.registry = r = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            "coredns_dns_requests",
            "Counter of DNS requests made per zone, protocol and family.",
            ["server", "zone", "view", "proto", "family", "type"],
            registry=r,
        )
        self.duration = Histogram(
            "coredns_dns_request_duration_seconds",
            "Histogram of the time (in seconds) each request took per zone.",
            ["server", "zone", "view", "type"],
            buckets=TIME_BUCKETS,
            registry=r,
        )
        self.request_size = Histogram(
            "coredns_dns_request_size_bytes",
            "Size of the EDNS0 UDP buffer in bytes (64K for TCP) per zone and protocol.",
            ["server", "zone", "view", "proto"],
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.response_size = Histogram(
            "coredns_dns_response_size_bytes",
            "Size of the returned response in bytes.",
            ["server", "zone", "view", "proto"],
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.responses = Counter(
            "coredns_dns_responses",
            "Counter of response status codes.",
            ["server", "zone", "view", "rcode", "plugin"],
            registry=r,
        )
        self.panics = Counter("coredns_panics", "A metrics that counts the number of panics.", registry=r)
        self.panics.inc(0)
        self.proxy_duration = Histogram(
            "coredns_proxy_request_duration_seconds",
            "Histogram of the time each request took.",
            ["proxy_name", "to", "rcode"],
            buckets=TIME_BUCKETS,
            registry=r,
        )
        build = Gauge(
            "coredns_build_info",
            "A metric with a constant '1' value labeled by version, revision, and goversion from which "
            "CoreDNS was built.",
            ["version", "revision", "goversion"],
            registry=r,
        )
        # Not Go: the runtime label says which Python serves, honestly rather than a made-up Go version.
        build.labels(_own_version(), "", f"python{platform.python_version()}").set(1)
        enabled = Gauge(
            "coredns_plugin_enabled",
            "A metric that monitors which plugin(s) is(are) enabled.",
            ["server", "zone", "view", "name"],
            registry=r,
        )
        for name in ENABLED_PLUGINS:
            enabled.labels(server, ZONE, "", name).set(1)

    def report(self, query: bytes, reply: bytes, plugin: str, tcp: bool, family: int, seconds: float) -> None:
        """One question answered: what vars.Report records in CoreDNS."""
        proto = "tcp" if tcp else "udp"
        qtype = question_type(query)
        self.requests.labels(self.server, ZONE, "", proto, str(family), qtype).inc()
        self.duration.labels(self.server, ZONE, "", qtype).observe(seconds)
        self.request_size.labels(self.server, ZONE, "", proto).observe(len(query))
        self.response_size.labels(self.server, ZONE, "", proto).observe(len(reply))
        self.responses.labels(self.server, ZONE, "", rcode_name(reply), plugin).inc()

    def forwarded(self, upstream: str, reply: bytes, seconds: float) -> None:
        self.proxy_duration.labels("forward", upstream, rcode_name(reply)).observe(seconds)

    def exposition(self) -> bytes:
        return render([self.registry])
