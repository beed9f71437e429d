"""Cluster DNS: `cluster.local` answered from Service and EndpointSlice watches, everything else
forwarded to the host's resolvers (what CoreDNS with its kubernetes and forward plugins does)."""
