"""The capacity tracker (csi-capacity) against the real API server and the host-path CSI driver as a
process (pools of 1Gi, and 2Gi for `kind: fast`, in the segment of node-a), on its own identity: the
account kube-system/csi-provisioner with external-provisioner's RBAC as the rig applies it. One
CSIStorageCapacity per tracked class and segment with the driver's figures and upstream's shape; a stray
object of ours goes, another manager's stays; a volume made in the pool shows at the next refresh; an
object deleted by hand comes back; a segment or a class that goes takes its objects with it; a class
whose GetCapacity fails gets no object while the others do, an object whose GetCapacity starts failing
keeps its last figures, and a CSIDriver that stops asking for capacity tracking loses its objects. With
the poll a long way off, a new class and a volume the provisioner made or deleted (its PV coming or
going) are reflected at once."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from controlplane.controllers.volume.capacityitems import Item
from kubeclient.csi.client import CSIClient, capability
from pykubelet.rig.csi import DRIVER, NAMESPACE, PROVISIONER_ACCOUNT, TOPOLOGY_KEY, provisioner_rbac
from tests.controllers.conftest import eventually, running
from tests.controllers.kubeletplay import make_node
from tests.csi.conftest import RunningDriver, start_driver

pytestmark = pytest.mark.integration
POOLS = ("--topology-key", TOPOLOGY_KEY, "--capacity", "1Gi", "--capacity", "fast=2Gi")
OURS = f"csi.storage.k8s.io/drivername={DRIVER},csi.storage.k8s.io/managed-by=external-provisioner"
POLL = 1.0  # seconds between refreshes (upstream's default is a minute)


@pytest.fixture
def short_base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="cap", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def driver(short_base: Path) -> Iterator[RunningDriver]:
    running_driver = start_driver(short_base, *POOLS, node_id="node-a")
    yield running_driver
    running_driver.stop()


@pytest.fixture(scope="module")
def storage(api: client.ApiClient) -> client.StorageV1Api:
    return client.StorageV1Api(api)


@pytest.fixture(scope="module")
def cluster(api: client.ApiClient, v1: client.CoreV1Api, storage: client.StorageV1Api) -> None:
    """The provisioner's account and RBAC, the driver's CSIDriver, and two nodes whose CSINodes list the driver."""
    rbac = client.RbacAuthorizationV1Api(api)
    for obj in provisioner_rbac():
        kind, ns = obj["kind"], obj["metadata"].get("namespace")
        create = {
            "ServiceAccount": lambda o, ns=ns: v1.create_namespaced_service_account(ns, o),
            "ClusterRole": lambda o: rbac.create_cluster_role(o),
            "ClusterRoleBinding": lambda o: rbac.create_cluster_role_binding(o),
            "Role": lambda o, ns=ns: rbac.create_namespaced_role(ns, o),
            "RoleBinding": lambda o, ns=ns: rbac.create_namespaced_role_binding(ns, o),
        }[kind]
        create(obj)
    storage.create_csi_driver({"metadata": {"name": DRIVER}, "spec": {"storageCapacity": True}})
    for name in ("node-a", "node-b"):
        make_node(v1, None, name, labels={TOPOLOGY_KEY: name})
        storage.create_csi_node(
            {
                "metadata": {"name": name},
                "spec": {"drivers": [{"name": DRIVER, "nodeID": name, "topologyKeys": [TOPOLOGY_KEY]}]},
            }
        )


def figures(storage: client.StorageV1Api) -> dict[tuple[str, str], tuple[str, str | None]]:
    """(class, node of the segment) -> (capacity, maximumVolumeSize) of our objects."""
    items = storage.list_namespaced_csi_storage_capacity(NAMESPACE, label_selector=OURS).items
    return {
        (c.storage_class_name, (c.node_topology.match_labels or {}).get(TOPOLOGY_KEY, "")): (
            c.capacity,
            c.maximum_volume_size,
        )
        for c in items
    }


def gauges(manager) -> dict[str, float]:
    """The tracker's gauges as the manager's /metrics serves them."""
    text = manager._metrics().decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("csistoragecapacities_")
    }


def wffc(name: str, provisioner: str = DRIVER, mode: str = "WaitForFirstConsumer", **params: str) -> dict:
    return {
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
        "parameters": params,
    }


def opt_in(storage: client.StorageV1Api, on: bool) -> None:
    storage.patch_csi_driver(DRIVER, {"spec": {"storageCapacity": on}})


def capacity_body(cls: str, managed_by: str) -> dict:
    return {
        "metadata": {
            "generateName": "csisc-",
            "labels": {"csi.storage.k8s.io/drivername": DRIVER, "csi.storage.k8s.io/managed-by": managed_by},
        },
        "storageClassName": cls,
        "nodeTopology": {"matchLabels": {TOPOLOGY_KEY: "node-a"}},
        "capacity": "1Gi",
    }


def delete_classes(storage: client.StorageV1Api, *names: str) -> None:
    for name in names:
        try:
            storage.delete_storage_class(name)
        except ApiException as err:
            if err.status != 404:
                raise


async def test_objects_per_class_and_segment_follow_the_cluster(
    apiserver, api, v1, storage, cluster, driver: RunningDriver
) -> None:
    opt_in(storage, True)
    stray = storage.create_namespaced_csi_storage_capacity(
        NAMESPACE, capacity_body("gone", "external-provisioner")
    )
    foreign = storage.create_namespaced_csi_storage_capacity(NAMESPACE, capacity_body("gone", "someone-else"))
    classes = ("cap-plain", "cap-fast", "cap-now", "cap-other")
    storage.create_storage_class(wffc("cap-plain"))
    storage.create_storage_class(wffc("cap-fast", kind="fast"))
    storage.create_storage_class(wffc("cap-now", mode="Immediate"))  # the scheduler never reads it
    storage.create_storage_class(wffc("cap-other", provisioner="other.example.com"))
    csi = CSIClient(driver.endpoint)
    try:
        async with running(
            apiserver, "csi-capacity", csi_address=driver.endpoint, capacity_poll_interval=POLL
        ) as manager:
            want = {
                ("cap-plain", "node-a"): ("1Gi", "1Gi"),
                ("cap-plain", "node-b"): ("0", "0"),  # the driver serves node-a's segment only
                ("cap-fast", "node-a"): ("2Gi", "2Gi"),
                ("cap-fast", "node-b"): ("0", "0"),
            }
            await eventually(lambda: figures(storage) == want, 30, what="one object per class and segment")
            await eventually(
                lambda: not gauges(manager)["csistoragecapacities_obsolete"], 10, what="no stray"
            )
            assert gauges(manager) == {
                "csistoragecapacities_desired_goal": 4.0,
                "csistoragecapacities_desired_current": 4.0,
                "csistoragecapacities_obsolete": 0.0,
            }
            made = storage.list_namespaced_csi_storage_capacity(NAMESPACE, label_selector=OURS).items
            for obj in made:
                assert obj.metadata.name.startswith("csisc-") and not obj.metadata.owner_references
                assert obj.metadata.generate_name == "csisc-"
                assert list(obj.node_topology.match_labels) == [TOPOLOGY_KEY]
            names = {o.metadata.name for o in storage.list_namespaced_csi_storage_capacity(NAMESPACE).items}
            assert stray.metadata.name not in names and foreign.metadata.name in names
            asked = [c for c in driver.calls("GetCapacity") if c.get("parameters") == {"kind": "fast"}]
            assert {c["accessible_topology"]["segments"][TOPOLOGY_KEY] for c in asked} == {"node-a", "node-b"}

            # a volume made in the pool (as the provisioner would): the next refresh shows it
            await csi.create_volume("vol-1", 256 << 20, [capability("", [], 1)], {}, {})
            await eventually(
                lambda: figures(storage)[("cap-plain", "node-a")] == ("768Mi", "768Mi"),
                30,
                what="the pool used",
            )

            (lost,) = [
                o
                for o in made
                if (o.storage_class_name, o.node_topology.match_labels[TOPOLOGY_KEY])
                == ("cap-fast", "node-b")
            ]
            storage.delete_namespaced_csi_storage_capacity(lost.metadata.name, NAMESPACE)
            await eventually(
                lambda: (
                    ("cap-fast", "node-b") in figures(storage)
                    and lost.metadata.name
                    not in {
                        o.metadata.name for o in storage.list_namespaced_csi_storage_capacity(NAMESPACE).items
                    }
                ),
                30,
                what="the object deleted by hand made again",
            )

            v1.patch_node("node-b", {"metadata": {"labels": {TOPOLOGY_KEY: None}}})
            await eventually(
                lambda: {k[1] for k in figures(storage)} == {"node-a"}, 30, what="node-b's segment gone"
            )
            storage.delete_storage_class("cap-fast")
            await eventually(
                lambda: set(figures(storage)) == {("cap-plain", "node-a")},
                30,
                what="the class's objects gone",
            )
    finally:
        await csi.close()
        v1.patch_node("node-b", {"metadata": {"labels": {TOPOLOGY_KEY: "node-b"}}})
        delete_classes(storage, *classes)
        storage.delete_namespaced_csi_storage_capacity(foreign.metadata.name, NAMESPACE)


async def test_a_failing_get_capacity_spares_the_others_and_keeps_its_object(
    apiserver, storage, cluster, driver: RunningDriver, short_base: Path, caplog
) -> None:
    opt_in(storage, True)
    classes = ("bad-kind", "fine", "fast-pool")
    storage.create_storage_class(wffc("bad-kind", kind="nope"))
    storage.create_storage_class(wffc("fine"))
    storage.create_storage_class(wffc("fast-pool", kind="fast"))
    try:
        async with running(
            apiserver, "csi-capacity", csi_address=driver.endpoint, capacity_poll_interval=POLL
        ):
            await eventually(
                lambda: {("fine", "node-a"), ("fast-pool", "node-a")} <= set(figures(storage)),
                30,
                what="the good classes' objects",
            )
            assert not [k for k in figures(storage) if k[0] == "bad-kind"]
            bad = Item("bad-kind", ((TOPOLOGY_KEY, "node-a"),))
            refused = (
                f"CSI GetCapacity for {bad}: rpc error: code = InvalidArgument desc = "
                'storage kind "nope" is not configured'
            )
            await eventually(
                lambda: any(r.levelno == logging.ERROR and r.getMessage() == refused for r in caplog.records),
                10,
                what="the failure logged",
            )
            before = figures(storage)[("fast-pool", "node-a")]

            # the driver comes back without the fast pool: that class's object keeps its last figures
            driver.stop()
            again = start_driver(
                short_base, "--topology-key", TOPOLOGY_KEY, "--capacity", "1Gi", node_id="node-a"
            )
            try:
                failing = "CSI GetCapacity for fast-pool@"
                await eventually(
                    lambda: any(r.getMessage().startswith(failing) for r in caplog.records),
                    30,
                    what="the fast pool refused",
                )
                assert figures(storage)[("fast-pool", "node-a")] == before == ("2Gi", "2Gi")
                assert figures(storage)[("fine", "node-a")] == ("1Gi", "1Gi")

                opt_in(storage, False)  # the scheduler would not read them: they go
                await eventually(lambda: not figures(storage), 30, what="every object gone")
            finally:
                again.stop()
    finally:
        opt_in(storage, True)
        delete_classes(storage, *classes)


def provisioned_pv(name: str, handle: str, size: str, cls: str, node: str) -> dict:
    """A PV as the CSI provisioner writes it: its annotation, the csi source, the segment as affinity."""
    term = {"matchExpressions": [{"key": TOPOLOGY_KEY, "operator": "In", "values": [node]}]}
    return {
        "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": DRIVER}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": cls,
            "csi": {"driver": DRIVER, "volumeHandle": handle},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
        },
    }


async def test_events_refresh_at_once_without_waiting_for_the_poll(
    apiserver, v1, storage, cluster, driver: RunningDriver
) -> None:
    opt_in(storage, True)
    csi = CSIClient(driver.endpoint)
    try:
        async with running(  # pv-protection: the admission's finalizer lets the deleted PV go
            apiserver,
            "csi-capacity",
            "pv-protection",
            csi_address=driver.endpoint,
            capacity_poll_interval=600,
        ):
            storage.create_storage_class(wffc("ev-class"))
            await eventually(
                lambda: figures(storage).get(("ev-class", "node-a")) == ("1Gi", "1Gi"),
                20,
                what="the new class",
            )
            calls = len(driver.calls("GetCapacity"))
            await csi.create_volume("pvc-ev", 128 << 20, [capability("", [], 1)], {}, {})
            v1.create_persistent_volume(provisioned_pv("pvc-ev", "pvc-ev", "128Mi", "ev-class", "node-a"))
            await eventually(
                lambda: figures(storage)[("ev-class", "node-a")] == ("896Mi", "896Mi"),
                20,
                what="the refresh after the volume was made",
            )
            # only the volume's segment was asked again, not node-b's
            again = driver.calls("GetCapacity")[calls:]
            assert {c["accessible_topology"]["segments"][TOPOLOGY_KEY] for c in again} == {"node-a"}
            await csi.delete_volume("pvc-ev", {})
            v1.delete_persistent_volume("pvc-ev")
            await eventually(
                lambda: figures(storage)[("ev-class", "node-a")] == ("1Gi", "1Gi"),
                20,
                what="the refresh after the volume was deleted",
            )
    finally:
        await csi.close()
        delete_classes(storage, "ev-class")


def test_the_provisioner_account_may_write_capacities_in_its_namespace_only(api, cluster) -> None:
    """external-provisioner's Role grants the objects in the sidecars' namespace, nowhere else."""
    authz = client.AuthorizationV1Api(api)
    user = f"system:serviceaccount:{NAMESPACE}:{PROVISIONER_ACCOUNT}"

    def allowed(verb: str, namespace: str) -> bool:
        review = authz.create_subject_access_review(
            {
                "spec": {
                    "user": user,
                    "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
                    "resourceAttributes": {
                        "group": "storage.k8s.io",
                        "resource": "csistoragecapacities",
                        "verb": verb,
                        "namespace": namespace,
                    },
                }
            }
        )
        return bool(review.status.allowed)

    assert all(allowed(verb, NAMESPACE) for verb in ("create", "update", "delete", "list", "watch"))
    assert not allowed("create", "default")
