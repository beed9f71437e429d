"""Pod volumes on the node: emptyDir, hostPath, configMap, secret, downwardAPI and projected (with
service-account tokens).

Each volume is made ready under <root-dir>/pods/<uid>/volumes/<kind>/<name> before the pod's sandbox
starts, and bind-mounted into containers by their volumeMounts; everything goes with the pod's folder.
"""

from agent.volumes.manager import VolumeError, VolumeManager, container_mounts

__all__ = ["VolumeError", "VolumeManager", "container_mounts"]
