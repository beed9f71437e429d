"""The network-policy agent: NetworkPolicies enforced with nftables for the pods of this host's nodes."""
