"""Each filter alone, against the real API server with Node objects only (no agents)."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from e2e.waiting import wait_for
from tests.scheduler.conftest import WAIT, preemption

pytestmark = pytest.mark.integration
ONE_CPU = "0/1 nodes are available: 1 Insufficient cpu." + preemption(1, no_victims=1)


def test_binds_and_records_scheduled_event(cluster, start_scheduler):
    only = cluster.add_node("a")
    start_scheduler()
    cluster.create(cluster.pod("web"))
    assert cluster.wait_bound("web") == only
    pod = cluster.get("web")
    scheduled = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert scheduled and scheduled[0].status == "True"
    ev = cluster.wait_event("web", "Scheduled")
    assert ev.type == "Normal"
    assert ev.message == f"Successfully assigned {cluster.namespace}/web to {only}"
    assert ev.source.component == "default-scheduler"


def test_node_unschedulable(cluster, start_scheduler):
    cordoned = cluster.add_node("cordoned", unschedulable=True)
    start_scheduler()
    cluster.create(cluster.pod("plain"))
    assert cluster.wait_unschedulable(
        "plain"
    ) == "0/1 nodes are available: 1 node(s) were unschedulable." + preemption(1, not_helpful=1)
    # A pod tolerating the unschedulable taint (as DaemonSet pods do) may still go there.
    cluster.create(
        cluster.pod(
            "daemon",
            tolerations=[
                {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
            ],
        )
    )
    assert cluster.wait_bound("daemon") == cordoned
    # Uncordoning is a node change: the waiting pod is retried and bound.
    cluster.patch_node(cordoned, {"spec": {"unschedulable": False}})
    assert cluster.wait_bound("plain") == cordoned


def test_node_resources_fit(cluster, start_scheduler):
    small = cluster.add_node("small", cpu="1", memory="1Gi", pods=2)
    big = cluster.add_node("big", cpu="8", memory="16Gi", pods=2)
    start_scheduler()
    cluster.create(cluster.pod("needs-2cpu", cpu="2", memory="64Mi"))
    assert cluster.wait_bound("needs-2cpu") == big
    cluster.create(cluster.pod("needs-4gi", cpu="100m", memory="4Gi"))
    assert cluster.wait_bound("needs-4gi") == big
    # big is now out of pod slots; small lacks cpu and memory: every shortfall is counted.
    cluster.create(cluster.pod("huge", cpu="3", memory="2Gi"))
    assert cluster.wait_unschedulable("huge") == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 Too many pods."
        + preemption(2, no_victims=2)
    )
    assert small != big


def test_init_containers_and_overhead_count(cluster, start_scheduler):
    node = cluster.add_node("n", cpu="2", memory="4Gi")
    start_scheduler()
    # App containers need 1 cpu, but the init container needs 3 at its step: the pod needs 3.
    init_heavy = cluster.pod("init-heavy", cpu="1")
    init_heavy["spec"]["initContainers"] = [
        {"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "3"}}}
    ]
    cluster.create(init_heavy)
    assert cluster.wait_unschedulable("init-heavy") == ONE_CPU
    # Sequential init containers do not add up: max(1.5, 1.5) and the app's 1 -> 1.5 cpu fits.
    init_light = cluster.pod("init-light", cpu="1")
    init_light["spec"]["initContainers"] = [
        {"name": f"i{i}", "image": "busybox", "resources": {"requests": {"cpu": "1500m"}}} for i in range(2)
    ]
    cluster.create(init_light)
    assert cluster.wait_bound("init-light") == node
    # 1.5 cpu of 2 taken; a 400m pod plus 200m overhead no longer fits in the 500m left. (Upstream's
    # RuntimeClass admission only lets a RuntimeClass set overhead; a server that enforces that refuses
    # this pod, and the overhead rule is then covered by the unit tests alone.)
    overhead = cluster.pod("with-overhead", cpu="400m", overhead={"cpu": "200m"})
    try:
        cluster.create(overhead)
    except ApiException as err:
        assert "verhead" in str(err)
        return
    assert cluster.wait_unschedulable("with-overhead") == ONE_CPU
    cluster.create(cluster.pod("without-overhead", cpu="400m"))
    assert cluster.wait_bound("without-overhead") == node


def test_pods_bound_by_others_take_their_share(cluster, start_scheduler):
    node = cluster.add_node("n", cpu="2")
    cluster.create(cluster.pod("prebound", cpu="1500m", nodeName=node))
    start_scheduler()
    cluster.create(cluster.pod("second", cpu="1"))
    assert cluster.wait_unschedulable("second") == ONE_CPU


@pytest.mark.parametrize(
    ("operator", "values", "expected"),
    [
        ("In", ["ssd", "nvme"], "fast"),
        ("NotIn", ["ssd", "nvme"], "slow"),
        ("Exists", None, "fast"),
        ("DoesNotExist", None, "slow"),
    ],
)
def test_required_node_affinity_label_operators(cluster, start_scheduler, operator, values, expected):
    nodes = {
        "fast": cluster.add_node("fast", labels={"disk": "ssd"}),
        "slow": cluster.add_node("slow", labels={}),
    }
    start_scheduler()
    expression = {"key": "disk", "operator": operator, **({"values": values} if values else {})}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expression]}]
            }
        }
    }
    for i in range(3):  # several pods: a lucky random pick cannot pass this
        cluster.create(cluster.pod(f"p{i}", affinity=affinity))
    for i in range(3):
        assert cluster.wait_bound(f"p{i}") == nodes[expected]


@pytest.mark.parametrize(("operator", "value", "expected"), [("Gt", "8", "large"), ("Lt", "8", "small")])
def test_required_node_affinity_gt_lt(cluster, start_scheduler, operator, value, expected):
    nodes = {
        "large": cluster.add_node("large", labels={"cores": "16"}),
        "small": cluster.add_node("small", labels={"cores": "4"}),
        "odd": cluster.add_node("odd", labels={"cores": "many"}),
    }
    start_scheduler()
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "cores", "operator": operator, "values": [value]}]}
                ]
            }
        }
    }
    for i in range(3):
        cluster.create(cluster.pod(f"p{i}", affinity=affinity))
    for i in range(3):
        assert cluster.wait_bound(f"p{i}") == nodes[expected]


def test_node_selector_and_match_fields(cluster, start_scheduler):
    gpu = cluster.add_node("gpu", labels={"accelerator": "gpu"})
    cpu = cluster.add_node("cpu")
    start_scheduler()
    cluster.create(cluster.pod("selector", nodeSelector={"accelerator": "gpu"}))
    assert cluster.wait_bound("selector") == gpu
    by_name = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [cpu]}]}
                ]
            }
        }
    }
    cluster.create(cluster.pod("fields", affinity=by_name))
    assert cluster.wait_bound("fields") == cpu
    cluster.create(cluster.pod("nowhere", nodeSelector={"accelerator": "tpu"}))
    assert cluster.wait_unschedulable("nowhere") == (
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
        + preemption(2, not_helpful=2)
    )
    # As a DaemonSet's pod: pinned by name to a node it does not fit; the other node is left out by
    # NodeAffinity's PreFilter (upstream 1.32's schedule_one.go text), not filtered.
    cluster.create(cluster.pod("pinned", cpu="64", affinity=by_name))
    assert cluster.wait_unschedulable("pinned") == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't satisfy plugin(s) [NodeAffinity]."
        + preemption(2, no_victims=1, not_helpful=1)
    )


def test_taint_toleration(cluster, start_scheduler):
    gpu = cluster.add_node("gpu", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    evicting = cluster.add_node("evicting", taints=[{"key": "maintenance", "effect": "NoExecute"}])
    start_scheduler()
    cluster.create(cluster.pod("plain"))
    assert cluster.wait_unschedulable("plain") == (
        "0/2 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, "
        "1 node(s) had untolerated taint {maintenance: }." + preemption(2, not_helpful=2)
    )
    cluster.create(
        cluster.pod(
            "equal",
            tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
        )
    )
    assert cluster.wait_bound("equal") == gpu
    cluster.create(cluster.pod("exists", tolerations=[{"key": "maintenance", "operator": "Exists"}]))
    assert cluster.wait_bound("exists") == evicting
    # A toleration for the wrong value does not count.
    cluster.create(
        cluster.pod(
            "wrong-value",
            tolerations=[{"key": "dedicated", "operator": "Equal", "value": "tpu", "effect": "NoSchedule"}],
        )
    )
    cluster.wait_unschedulable("wrong-value")


def test_not_ready_and_unreachable_taints(cluster, start_scheduler):
    # The node lifecycle controller sets NoSchedule taints for both conditions (TaintNodesByCondition).
    not_ready = cluster.add_node(
        "not-ready", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    )
    unreachable = cluster.add_node(
        "unreachable", taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]
    )
    start_scheduler()
    cluster.create(cluster.pod("plain"))
    assert cluster.wait_unschedulable("plain") == (
        "0/2 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
        "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }." + preemption(2, not_helpful=2)
    )
    # The node lifecycle controller lifting the taint is a node change: the pod is retried.
    cluster.patch_node(not_ready, {"spec": {"taints": None}})
    assert cluster.wait_bound("plain") == not_ready
    # The NoExecute variants are tolerated for 300 s by the tolerations the API server's admission adds
    # to every pod, so they do not keep a new pod off the node, as upstream.
    cluster.patch_node(
        unreachable, {"spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}}
    )
    cluster.patch_node(not_ready, {"spec": {"unschedulable": True}})
    cluster.create(cluster.pod("defaulted"))
    tolerations = {t.key for t in cluster.get("defaulted").spec.tolerations or ()}
    assert "node.kubernetes.io/unreachable" in tolerations
    assert cluster.wait_bound("defaulted") == unreachable


def test_node_ports(cluster, start_scheduler):
    a = cluster.add_node("a")
    b = cluster.add_node("b")
    start_scheduler()
    port = [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}]
    for i in range(2):
        cluster.create(cluster.pod(f"web{i}", ports=port))
    assert {cluster.wait_bound("web0"), cluster.wait_bound("web1")} == {a, b}
    cluster.create(cluster.pod("web2", ports=port))
    assert cluster.wait_unschedulable("web2") == (
        "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports."
        + preemption(2, no_victims=2)
    )
    # Same port, other protocol: no conflict.
    cluster.create(cluster.pod("dns", ports=[{"containerPort": 53, "hostPort": 8080, "protocol": "UDP"}]))
    assert cluster.wait_bound("dns") in (a, b)


def test_ephemeral_storage(cluster, start_scheduler):
    cluster.add_node("small-disk", ephemeral="1Gi")
    roomy = cluster.add_node("big-disk", ephemeral="100Gi")
    start_scheduler()
    pod = cluster.pod("scratch")
    pod["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "10Gi"
    cluster.create(pod)
    assert cluster.wait_bound("scratch") == roomy
    pod = cluster.pod("too-big")
    pod["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "95Gi"
    cluster.create(pod)
    assert cluster.wait_unschedulable("too-big") == (
        "0/2 nodes are available: 2 Insufficient ephemeral-storage." + preemption(2, no_victims=2)
    )


def test_all_filters_combined(cluster, start_scheduler):
    """Six nodes, each failing a different filter but one; a pod that needs everything lands there, and
    its twin (now also blocked by the port) is told about every node."""
    labels = {"tier": "web"}
    cluster.add_node("cordoned", labels=labels, unschedulable=True)
    cluster.add_node(
        "tainted", labels=labels, taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]
    )
    cluster.add_node("unlabelled")
    cluster.add_node("small", labels=labels, cpu="500m")
    busy_port = cluster.add_node("port-taken", labels=labels)
    good = cluster.add_node(
        "good", labels=labels, taints=[{"key": "team", "value": "a", "effect": "NoSchedule"}]
    )
    start_scheduler()
    port = [{"containerPort": 80, "hostPort": 80}]
    cluster.create(cluster.pod("holder", ports=port, nodeName=busy_port))
    spec = {
        "nodeSelector": {"tier": "web"},
        "ports": port,
        "tolerations": [{"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}],
    }
    cluster.create(cluster.pod("first", cpu="1", **spec))
    assert cluster.wait_bound("first") == good
    cluster.create(cluster.pod("twin", cpu="1", **spec))
    assert cluster.wait_unschedulable("twin") == (
        "0/6 nodes are available: 1 Insufficient cpu, "
        "1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {dedicated: db}, "
        "1 node(s) were unschedulable, "
        "2 node(s) didn't have free ports for the requested pod ports."
        + preemption(6, no_victims=3, not_helpful=3)
    )


def test_a_host_port_on_every_address_conflicts_with_one_address(cluster, start_scheduler):
    """Upstream's conformance tests: hostPort 54322 on 0.0.0.0 (an empty hostIP) and the same port and
    protocol on the node's IP cannot share a node, whichever comes first (HostPortInfo.CheckConflict)."""
    node = cluster.add_node("only")
    start_scheduler()
    every = [{"containerPort": 8080, "hostPort": 54322, "protocol": "TCP"}]
    one = [{"containerPort": 8080, "hostPort": 54322, "protocol": "TCP", "hostIP": "10.1.2.3"}]
    cluster.create(cluster.pod("pod4", ports=every))
    assert cluster.wait_bound("pod4") == node
    cluster.create(cluster.pod("pod5", ports=one))
    assert cluster.wait_unschedulable("pod5") == (
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
        + preemption(1, no_victims=1)
    )
    for name in ("pod4", "pod5"):
        cluster.v1.delete_namespaced_pod(name, cluster.namespace, grace_period_seconds=0)
    cluster.create(cluster.pod("specific", ports=one))
    assert cluster.wait_bound("specific") == node
    cluster.create(cluster.pod("wildcard", ports=[{**every[0], "hostIP": "0.0.0.0"}]))
    assert cluster.wait_unschedulable("wildcard") == (
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
        + preemption(1, no_victims=1)
    )


def test_volume_zone_and_a_read_write_once_pod_claim(cluster, start_scheduler):
    """VolumeZone sends the pod to its volume's zone; a second pod of the ReadWriteOncePod claim waits
    with VolumeRestrictions' message; a volume of a zone no node is in: VolumeZone's, not for preemption."""
    zone = "topology.kubernetes.io/zone"
    cluster.add_node("za", labels={zone: "a"})
    in_b = cluster.add_node("zb", labels={zone: "b"})
    volumes = []
    for name, where in (("solo", "b"), ("far", "c")):
        pv = f"{cluster.namespace}-{name}"
        cluster.v1.create_persistent_volume(
            {
                "metadata": {"name": pv, "labels": {zone: where}},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOncePod"],
                    "hostPath": {"path": f"/tmp/{pv}"},
                    "storageClassName": "",
                    "claimRef": {"namespace": cluster.namespace, "name": name},
                },
            }
        )
        volumes.append(pv)
        cluster.v1.create_namespaced_persistent_volume_claim(
            cluster.namespace,
            {
                # Bound as the PV controller leaves a claim (upstream's scheduler counts a claim as bound
                # only with this annotation; without it, "pod has unbound immediate PersistentVolumeClaims").
                "metadata": {"name": name, "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                "spec": {
                    "accessModes": ["ReadWriteOncePod"],
                    "resources": {"requests": {"storage": "1Gi"}},
                    "storageClassName": "",
                    "volumeName": pv,
                },
            },
        )
    try:
        start_scheduler()

        def using(pod: str, claim: str) -> dict:
            volume = {"name": "data", "persistentVolumeClaim": {"claimName": claim}}
            return cluster.pod(pod, volumes=[volume])

        cluster.create(using("first", "solo"))
        assert cluster.wait_bound("first") == in_b
        cluster.create(using("second", "solo"))
        assert cluster.wait_unschedulable("second") == (
            "0/2 nodes are available: 2 node has pod using PersistentVolumeClaim with the same name and "
            "ReadWriteOncePod access mode." + preemption(2, no_victims=2)
        )
        cluster.create(using("elsewhere", "far"))
        assert cluster.wait_unschedulable("elsewhere") == (
            "0/2 nodes are available: 2 node(s) had no available volume zone." + preemption(2, not_helpful=2)
        )
    finally:
        for pv in volumes:
            cluster.v1.delete_persistent_volume(pv)


def test_volume_binding_storage_capacity(cluster, start_scheduler):
    """A WaitForFirstConsumer claim of a CSIDriver with storageCapacity: true goes only to the zone whose
    CSIStorageCapacity is large enough (the claim gets that node as selected-node); a claim larger than
    every capacity waits with upstream's text, and a capacity that grows wakes it (queueing hint)."""
    zone = "topology.kubernetes.io/zone"
    storage = client.StorageV1Api(cluster.v1.api_client)
    ns = cluster.namespace
    driver, cls = f"{ns}.csi.example.com", f"{ns}-csi"
    za = cluster.add_node("za", labels={zone: f"{ns}-a"})
    zb = cluster.add_node("zb", labels={zone: f"{ns}-b"})
    storage.create_csi_driver({"metadata": {"name": driver}, "spec": {"storageCapacity": True}})
    storage.create_storage_class(
        {"metadata": {"name": cls}, "provisioner": driver, "volumeBindingMode": "WaitForFirstConsumer"}
    )

    def capacity(name: str, where: str, size: str) -> dict:
        return {
            "metadata": {"name": name},
            "storageClassName": cls,
            "nodeTopology": {"matchLabels": {zone: f"{ns}-{where}"}},
            "capacity": size,
        }

    storage.create_namespaced_csi_storage_capacity(ns, capacity("cap-a", "a", "1Gi"))
    storage.create_namespaced_csi_storage_capacity(ns, capacity("cap-b", "b", "10Gi"))
    for name, size in (("fits-b", "5Gi"), ("huge", "20Gi")):
        cluster.v1.create_namespaced_persistent_volume_claim(
            ns,
            {
                "metadata": {"name": name},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": size}},
                    "storageClassName": cls,
                },
            },
        )

    def selected_node(claim: str) -> str | None:
        annotations = cluster.v1.read_namespaced_persistent_volume_claim(claim, ns).metadata.annotations
        return (annotations or {}).get("volume.kubernetes.io/selected-node")

    def wait_selected(claim: str) -> str:
        return wait_for(
            lambda: selected_node(claim), timeout=WAIT, interval=0.1, what=f"claim {claim} given a node"
        )

    try:
        start_scheduler()
        volume = {"name": "data", "persistentVolumeClaim": {"claimName": "fits-b"}}
        cluster.create(cluster.pod("small", volumes=[volume]))
        assert wait_selected("fits-b") == zb  # PreBind then waits for a provisioner this test has not
        volume = {"name": "data", "persistentVolumeClaim": {"claimName": "huge"}}
        cluster.create(cluster.pod("big", volumes=[volume]))
        assert cluster.wait_unschedulable("big") == (
            "0/2 nodes are available: 2 node(s) did not have enough free storage."
            + preemption(2, not_helpful=2)
        )
        assert selected_node("huge") is None
        storage.patch_namespaced_csi_storage_capacity("cap-a", ns, {"capacity": "50Gi"})
        assert wait_selected("huge") == za
        # Deleted pods end their PreBind waits (no provisioner here), so the scheduler stops at once.
        for pod in ("small", "big"):
            cluster.v1.delete_namespaced_pod(pod, ns, grace_period_seconds=0)
    finally:
        storage.delete_storage_class(cls)
        storage.delete_csi_driver(driver)
