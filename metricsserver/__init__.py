"""The metrics server (upstream's metrics-server): scrapes every node's kubelet /metrics/resource,
keeps the newest points in memory and serves metrics.k8s.io/v1beta1 NodeMetrics and PodMetrics behind
the API server's aggregation layer. Its own process on the client library, as metrics-server is."""
