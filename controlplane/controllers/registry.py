"""The controllers the manager can run, by their --controllers names, and which are on by default.

`--controllers` reads as upstream's: `*` is every controller that is on by default, `name` turns one
on, `-name` turns one off (`*,-podgc`: all the defaults but pod GC).
"""

from __future__ import annotations

from controlplane.controllers.base import Controller
from controlplane.controllers.bootstrap.bootstrapsigner import BootstrapSigner
from controlplane.controllers.bootstrap.tokencleaner import TokenCleaner
from controlplane.controllers.certificates.approving import CSRApprovingController
from controlplane.controllers.certificates.cleaner import CSRCleanerController
from controlplane.controllers.certificates.signing import CSRSigningController
from controlplane.controllers.clusterroleaggregation import ClusterRoleAggregationController
from controlplane.controllers.cronjob import CronJobController
from controlplane.controllers.daemonset import DaemonSetController
from controlplane.controllers.deployment import DeploymentController
from controlplane.controllers.disruption import DisruptionController
from controlplane.controllers.endpoints import EndpointsController
from controlplane.controllers.endpointslice import EndpointSliceController
from controlplane.controllers.endpointslicemirroring import EndpointSliceMirroringController
from controlplane.controllers.garbagecollector.collector import GarbageCollector
from controlplane.controllers.job import JobController
from controlplane.controllers.nodeipam import NodeIpamController
from controlplane.controllers.nodelifecycle import NodeLifecycleController
from controlplane.controllers.podautoscaler import HorizontalPodAutoscalerController
from controlplane.controllers.podgc import PodGCController
from controlplane.controllers.replicaset import ReplicaSetController, ReplicationControllerController
from controlplane.controllers.resourcequota import ResourceQuotaController
from controlplane.controllers.rootca import RootCAPublisher
from controlplane.controllers.serviceaccount import ServiceAccountController
from controlplane.controllers.serviceaccounttoken import ServiceAccountTokenController
from controlplane.controllers.servicelb import ServiceLBController
from controlplane.controllers.statefulset import StatefulSetController
from controlplane.controllers.tainteviction import TaintEvictionController
from controlplane.controllers.ttlafterfinished import TTLAfterFinishedController
from controlplane.controllers.volume import (
    AttachDetachController,
    CSIAttacher,
    CSICapacity,
    CSIProvisioner,
    CSIResizer,
    EphemeralVolumeController,
    LocalPathProvisioner,
    PersistentVolumeController,
    PVCProtectionController,
    PVProtectionController,
)

CONTROLLERS: dict[str, type[Controller]] = {
    c.name: c
    for c in (
        ReplicaSetController,
        DeploymentController,
        ReplicationControllerController,
        GarbageCollector,
        ServiceAccountController,
        ServiceAccountTokenController,
        RootCAPublisher,
        NodeLifecycleController,
        TaintEvictionController,
        PodGCController,
        ClusterRoleAggregationController,
        JobController,
        TTLAfterFinishedController,
        CronJobController,
        DaemonSetController,
        EndpointsController,
        EndpointSliceController,
        EndpointSliceMirroringController,
        DisruptionController,
        BootstrapSigner,
        TokenCleaner,
        CSRApprovingController,
        CSRSigningController,
        CSRCleanerController,
        StatefulSetController,
        PersistentVolumeController,
        PVCProtectionController,
        PVProtectionController,
        LocalPathProvisioner,
        CSIProvisioner,
        CSIAttacher,
        CSIResizer,
        CSICapacity,
        AttachDetachController,
        EphemeralVolumeController,
        HorizontalPodAutoscalerController,
        ServiceLBController,
        ResourceQuotaController,
        NodeIpamController,
    )
}
# Upstream leaves a few controllers off unless named (bootstrapsigner, tokencleaner, ...); the CSI sidecars
# run only in a manager started beside a driver (--csi-address).
OFF_BY_DEFAULT: frozenset[str] = frozenset(
    {"bootstrapsigner", "tokencleaner", "csi-provisioner", "csi-attacher", "csi-resizer", "csi-capacity"}
)


def enabled(spec: str) -> list[str]:
    """The controller names a --controllers value turns on; ValueError naming an unknown one."""
    on: set[str] = set()
    off: set[str] = set()
    star = False
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        if item == "*":
            star = True
            continue
        name = item[1:] if item.startswith("-") else item
        if name not in CONTROLLERS:
            raise ValueError(
                f'"{name}" is not in the list of known controllers ({", ".join(sorted(CONTROLLERS))})'
            )
        (off if item.startswith("-") else on).add(name)
    chosen = {n for n in CONTROLLERS if n not in OFF_BY_DEFAULT} if star else set()
    chosen |= on
    chosen -= off
    return [n for n in CONTROLLERS if n in chosen]
