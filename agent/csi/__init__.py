"""CSI drivers on the node, as upstream's kubelet plugin manager and CSI plugin know them: the plugin
registration folder watched (watcher.py: the GetInfo / NotifyRegistrationStatus handshake, NodeGetInfo)
and the registered drivers by name (registry.py), each with its CSI client, for the volume plugin
(agent/volumes/csi.py) and the CSINode writer (agent/node/csinode.py)."""
