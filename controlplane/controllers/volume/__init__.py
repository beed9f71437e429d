"""The persistent-volume loops: the PV controller (binding, release), the pvc- and pv-protection
controllers, the attach/detach controller (VolumeAttachments for CSI volumes), the ephemeral volume controller, the local-path provisioner k3s ships, and the CSI external provisioner (with its storage capacity tracking), attacher and
resizer (off by default: a manager beside a CSI driver runs them)."""

from controlplane.controllers.volume.attachdetach import AttachDetachController
from controlplane.controllers.volume.csiattacher import CSIAttacher
from controlplane.controllers.volume.csicapacity import CSICapacity
from controlplane.controllers.volume.csiprovisioner import CSIProvisioner
from controlplane.controllers.volume.csiresizer import CSIResizer
from controlplane.controllers.volume.ephemeral import EphemeralVolumeController
from controlplane.controllers.volume.localpath import LocalPathProvisioner
from controlplane.controllers.volume.protection import PVCProtectionController, PVProtectionController
from controlplane.controllers.volume.pvcontroller import PersistentVolumeController

__all__ = [
    "AttachDetachController",
    "CSIAttacher",
    "CSICapacity",
    "CSIProvisioner",
    "CSIResizer",
    "EphemeralVolumeController",
    "LocalPathProvisioner",
    "PVCProtectionController",
    "PVProtectionController",
    "PersistentVolumeController",
]
