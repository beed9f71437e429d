"""kube-proxy's metrics under their upstream names and help texts (pkg/proxy/metrics; component-base
prefixes each help with its stability level, ALPHA for all of these), in the proxy's own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# upstream: metrics.ExponentialBuckets(0.001, 2, 15)
BUCKETS = tuple(0.001 * 2**i for i in range(15))


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.sync_duration = Histogram(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "[ALPHA] SyncProxyRules latency in seconds",
            buckets=BUCKETS,
            registry=r,
        )
        self.full_sync_duration = Histogram(
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "[ALPHA] SyncProxyRules latency in seconds for full resyncs",
            buckets=BUCKETS,
            registry=r,
        )
        self.partial_sync_duration = Histogram(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "[ALPHA] SyncProxyRules latency in seconds for partial resyncs",
            buckets=BUCKETS,
            registry=r,
        )
        self.last_sync = Gauge(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "[ALPHA] The last time proxy rules were successfully synced",
            registry=r,
        )
        self.last_queued = Gauge(
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "[ALPHA] The last time a sync of proxy rules was queued",
            registry=r,
        )
        self.network_programming = Histogram(
            "kubeproxy_network_programming_duration_seconds",
            "[ALPHA] In Cluster Network Programming Latency in seconds",
            buckets=(
                0.25,
                0.5,
                1,
                2,
                3,
                4,
                5,
                6,
                7,
                8,
                9,
                10,
                11,
                12,
                13,
                14,
                15,
                16,
                17,
                18,
                19,
                20,
                25,
                30,
                35,
                40,
                45,
                50,
                55,
                60,
                75,
                90,
                105,
                120,
                150,
                180,
                210,
                240,
                270,
                300,
            ),
            registry=r,
        )
        self.endpoint_changes_pending = Gauge(
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "[ALPHA] Pending proxy rules Endpoint changes",
            registry=r,
        )
        self.endpoint_changes = Counter(
            "kubeproxy_sync_proxy_rules_endpoint_changes",
            "[ALPHA] Cumulative proxy rules Endpoint changes",
            registry=r,
        )
        self.service_changes_pending = Gauge(
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "[ALPHA] Pending proxy rules Service changes",
            registry=r,
        )
        self.service_changes = Counter(
            "kubeproxy_sync_proxy_rules_service_changes",
            "[ALPHA] Cumulative proxy rules Service changes",
            registry=r,
        )
        self.sync_failures = Counter(
            "kubeproxy_sync_proxy_rules_nftables_sync_failures",
            "[ALPHA] Cumulative proxy nftables sync failures",
            registry=r,
        )
        self.no_local_endpoints = Gauge(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "[ALPHA] Number of services with a Local traffic policy and no endpoints",
            ["traffic_policy"],
            registry=r,
        )
