"""Pod volumes on the node, one plugin per volume type (plugin.py holds the table): emptyDir, hostPath,
configMap, secret, downwardAPI and projected (with service-account tokens), persistentVolumeClaim and
CSI.

Each volume a container uses (one no container mounts is skipped, as upstream's populator skips it) is
made ready under <root-dir>/pods/<uid>/volumes/<kind>/<name> before the pod's sandbox starts (a memory
emptyDir as a tmpfs there, fsGroup applied), rewritten on each sync of the pod from its sources, and
bind-mounted into containers by their volumeMounts (subPath, subPathExpr: subpath.py);
mounts are taken away and everything goes with the pod's folder.
"""

from agent.volumes.manager import VolumeManager, container_mounts, default_table
from agent.volumes.plugin import VolumeError

__all__ = ["VolumeError", "VolumeManager", "container_mounts", "default_table"]
