"""The persistent-volume loops: the PV controller (binding, release), the pvc- and pv-protection
controllers, and the local-path provisioner k3s ships."""

from controlplane.controllers.volume.localpath import LocalPathProvisioner
from controlplane.controllers.volume.protection import PVCProtectionController, PVProtectionController
from controlplane.controllers.volume.pvcontroller import PersistentVolumeController

__all__ = [
    "LocalPathProvisioner",
    "PVCProtectionController",
    "PVProtectionController",
    "PersistentVolumeController",
]
