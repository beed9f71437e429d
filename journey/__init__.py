"""See the loops: `pykubelet trace` shows one object's journey through the components that wrote it, and
`pykubelet diagnose` names the first boundary that stopped making progress.

Both work from the Kubernetes API alone (ownerReferences, managedFields, conditions, events, leases,
access reviews), so they run unchanged against any cluster; they import only kubeclient. What the API
keeps is coarse: managedFields and condition times have 1 s resolution and keep only each manager's last
write, core/v1 events' first/lastTimestamp likewise; an events.k8s.io eventTime (MicroTime) is used where
present. Every step says whether its time is exact or approximate.
"""
