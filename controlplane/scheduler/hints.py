"""Queueing hints: which filter plugins a cluster change may help (upstream's EventsToRegister and
QueueingHint functions, by plugin). A pod waits in the unschedulable queue until a change that may help
one of the plugins that rejected it; any other change leaves it there, so a pod kept off by node
affinity is not retried each time an unrelated pod comes or goes.
"""

from __future__ import annotations

from controlplane.scheduler.nodeinfo import NodeFacts

# A placed pod went away: its resources and ports are free, affinity/spread counts drop.
POD_REMOVED = frozenset(
    {
        "NodeResourcesFit",
        "NodePorts",
        "InterPodAffinity",
        "PodTopologySpread",
        "VolumeBinding",
        "NodeVolumeLimits",
        "VolumeRestrictions",
    }
)
# A pod was placed (or a placed pod's labels changed): affinity may now be satisfied, spread changes.
POD_PLACED = frozenset({"InterPodAffinity", "PodTopologySpread"})
VOLUMES = frozenset({"VolumeBinding", "NodeVolumeLimits", "VolumeRestrictions", "VolumeZone"})
VOLUME_BINDING = frozenset({"VolumeBinding"})  # storage capacity grew, or a driver stopped tracking it
NAMESPACE = frozenset({"InterPodAffinity"})


def node_changed(before: NodeFacts | None, after: NodeFacts) -> frozenset[str] | None:
    """The plugins an update of a node may help; None (all) for a node not seen before."""
    if before is None:
        return None
    plugins: set[str] = set()
    if before.labels != after.labels:
        plugins |= {"NodeAffinity", "PodTopologySpread", "InterPodAffinity", "VolumeBinding", "VolumeZone"}
    if before.taints != after.taints:
        plugins |= {"TaintToleration", "PodTopologySpread"}
    if before.unschedulable != after.unschedulable:
        plugins.add("NodeUnschedulable")
    if before.allocatable != after.allocatable:
        plugins |= {"NodeResourcesFit", "NodeVolumeLimits"}
    return frozenset(plugins)
