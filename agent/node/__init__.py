"""The Node object: registration, status setters (capacity, addresses, nodeInfo, conditions) and the
Lease heartbeat in kube-node-lease."""
