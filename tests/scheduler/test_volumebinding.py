"""VolumeBinding's decisions without a server (its informers stood in by dict stores): PreFilter's
pod-wide refusals with upstream's texts, Filter on bound volumes' node affinity and on WaitForFirstConsumer
claims (a static volume whose affinity admits the node, else a class that provisions, a claim already given
a node), and PreBind's writes followed by the wait for the PV controller's binding."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from controlplane.scheduler.algorithm import FitError, schedule
from controlplane.scheduler.framework import ClusterView
from controlplane.scheduler.volumebinding import (
    BIND_CONFLICT,
    NODE_CONFLICT,
    NOT_ENOUGH_SPACE,
    PV_NOT_EXIST,
    UNBOUND_IMMEDIATE,
    BindingError,
    PodGone,
    VolumeBinding,
)
from tests.scheduler.helpers import make_node, make_pod

Obj = dict[str, Any]


class Store:
    """The two reads VolumeBinding makes of an informer."""

    def __init__(self, *objs: Obj, namespaced: bool = False) -> None:
        self.objs: dict[str, Obj] = {}
        self.namespaced = namespaced
        for obj in objs:
            self.put(obj)

    def put(self, obj: Obj) -> None:
        m = obj["metadata"]
        self.objs[f"{m['namespace']}/{m['name']}" if self.namespaced else m["name"]] = obj

    def get(self, key: str) -> Obj | None:
        return self.objs.get(key)

    def list(self) -> list[Obj]:
        return list(self.objs.values())


def claim(
    name: str, cls: str = "wffc", size: str | None = "1Gi", status: Obj | None = None, **meta: Any
) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", **meta},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size} if size else {}},
            "storageClassName": cls,
        },
        "status": status or {"phase": "Pending"},
    }


def volume(name: str, node: str | None, size: str = "5Gi", cls: str = "wffc", **spec: Any) -> Obj:
    body: Obj = {
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": cls,
            **spec,
        },
        "status": {"phase": "Available"},
    }
    if node:
        body["spec"]["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                        ]
                    }
                ]
            }
        }
    return body


def sc(name: str, mode: str, provisioner: str = "rancher.io/local-path") -> Obj:
    return {"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode}


CLASSES = (
    sc("wffc", "WaitForFirstConsumer", "kubernetes.io/no-provisioner"),
    sc("now", "Immediate"),
    sc("local-path", "WaitForFirstConsumer"),
)


def using(*claims: str):
    return make_pod(
        volumes=[{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    )


def nodes():
    return [make_node(n, labels={"kubernetes.io/hostname": n}) for n in ("a", "b")]


def decide(plugin: VolumeBinding, pod) -> str:
    import random

    try:
        return schedule(pod, nodes(), [plugin], [], ClusterView(2, {}), random.Random(1)).name  # type: ignore[arg-type]
    except FitError as err:
        return str(err)


def plugin(claims: list[Obj], volumes: list[Obj] = ()) -> VolumeBinding:  # type: ignore[assignment]
    return VolumeBinding(Store(*claims, namespaced=True), Store(*volumes), Store(*CLASSES))


def test_pre_filter_refusals() -> None:
    p = plugin(
        [
            claim("imm", "now"),
            claim("gone-class", "missing"),
            claim("dying", deletionTimestamp="2024-01-01T00:00:00Z"),
        ]
    )
    assert decide(p, using("nope")) == '0/2 nodes are available: persistentvolumeclaim "nope" not found.'
    assert decide(p, using("imm")) == f"0/2 nodes are available: {UNBOUND_IMMEDIATE}."
    assert decide(p, using("gone-class")) == f"0/2 nodes are available: {UNBOUND_IMMEDIATE}."
    assert (
        decide(p, using("dying"))
        == '0/2 nodes are available: persistentvolumeclaim "dying" is being deleted.'
    )


def test_bound_volume_node_affinity() -> None:
    bound = claim("data", annotations={"pv.kubernetes.io/bind-completed": "yes"})
    bound["spec"]["volumeName"] = "pv-b"
    p = plugin([bound], [volume("pv-b", "b")])
    assert decide(p, using("data")) == "b"
    elsewhere = plugin([bound], [volume("pv-b", "c")])
    assert decide(elsewhere, using("data")) == f"0/2 nodes are available: 2 {NODE_CONFLICT}."


def test_wait_for_first_consumer_static_volume_picks_its_node() -> None:
    p = plugin([claim("data", size="3Gi")], [volume("small-a", "a", "1Gi"), volume("fits-b", "b", "5Gi")])
    assert decide(p, using("data")) == "b"  # the only node with a volume that fits
    none = plugin([claim("data", size="9Gi")], [volume("fits-b", "b", "5Gi")])
    assert decide(none, using("data")) == f"0/2 nodes are available: 2 {BIND_CONFLICT}."


def test_wait_for_first_consumer_provisions_and_respects_selected_node() -> None:
    p = plugin([claim("dyn", "local-path")])
    assert decide(p, using("dyn")) in ("a", "b")
    given = claim("dyn", "local-path", annotations={"volume.kubernetes.io/selected-node": "a"})
    assert decide(plugin([given]), using("dyn")) == "a"


def test_pre_filter_lost_prebound_and_ephemeral_claims() -> None:
    """podHasPVCs' texts: a Lost claim, an ephemeral claim not made yet or not owned by the pod; a claim
    naming a volume the PV controller has not bound yet counts as an unbound immediate one."""
    lost = claim("lost", status={"phase": "Lost"})
    lost["spec"]["volumeName"] = "pv-gone"
    prebound = claim("pre")
    prebound["spec"]["volumeName"] = "pv-x"
    p = plugin([lost, prebound, claim("pod-0-scratch")])
    assert decide(p, using("lost")) == (
        '0/2 nodes are available: persistentvolumeclaim "lost" bound to non-existent persistentvolume '
        '"pv-gone".'
    )
    assert decide(p, using("pre")) == f"0/2 nodes are available: {UNBOUND_IMMEDIATE}."
    scratch = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
    assert decide(p, make_pod(name="pod-0", volumes=[scratch])) == (
        "0/2 nodes are available: PVC ns/pod-0-scratch was not created for pod ns/pod-0 (pod is not owner)."
    )
    assert decide(p, make_pod(name="pod-1", volumes=[scratch])) == (
        "0/2 nodes are available: waiting for ephemeral volume controller to create the "
        'persistentvolumeclaim "pod-1-scratch".'
    )


def test_bound_volume_missing_and_delayed_claim_reasons_together() -> None:
    """FindPodVolumes reports every failed check in upstream's order, not only the first."""
    bound = claim("data", annotations={"pv.kubernetes.io/bind-completed": "yes"})
    bound["spec"]["volumeName"] = "pv-gone"
    p = plugin([bound, claim("later", size="9Gi")])
    assert decide(p, using("data", "later")) == (
        f"0/2 nodes are available: 2 {BIND_CONFLICT}, 2 {PV_NOT_EXIST}."
    )


CSI = "csi.example.com"


def capacity(name: str, cls: str, zone: str | None, size: str | None, maximum: str | None = None) -> Obj:
    body: Obj = {"metadata": {"name": name, "namespace": "kube-system"}, "storageClassName": cls}
    if zone is not None:
        body["nodeTopology"] = {"matchLabels": {"topology.kubernetes.io/zone": zone}}
    if size is not None:
        body["capacity"] = size
    if maximum is not None:
        body["maximumVolumeSize"] = maximum
    return body


def capacity_plugin(
    tracked: bool | None, *capacities: Obj, topology: list[str] | None = None
) -> VolumeBinding:
    cls = sc("csi", "WaitForFirstConsumer", CSI)
    if topology is not None:
        cls["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": topology}]}
        ]
    driver = {"metadata": {"name": CSI}, "spec": {} if tracked is None else {"storageCapacity": tracked}}
    return VolumeBinding(
        Store(claim("big", "csi", size="5Gi"), claim("nosize", "csi", size=None), namespaced=True),
        Store(),
        Store(cls),
        Store(driver),
        Store(*capacities, namespaced=True),
    )


def zoned_nodes():
    return [
        make_node(n, labels={"kubernetes.io/hostname": n, "topology.kubernetes.io/zone": n}) for n in "ab"
    ]


def decide_zoned(p: VolumeBinding, pod) -> str:
    import random

    try:
        return schedule(pod, zoned_nodes(), [p], [], ClusterView(2, {}), random.Random(1)).name  # type: ignore[arg-type]
    except FitError as err:
        return str(err)


def test_storage_capacity_places_the_claim_where_a_capacity_is_large_enough() -> None:
    """A driver with storageCapacity: true provisions only on nodes a large enough capacity reaches."""
    enough_in_b = capacity_plugin(True, capacity("a", "csi", "a", "1Gi"), capacity("b", "csi", "b", "10Gi"))
    assert decide_zoned(enough_in_b, using("big")) == "b"
    # maximumVolumeSize, when set, is the limit that counts, over capacity.
    capped = capacity_plugin(True, capacity("b", "csi", "b", "10Gi", maximum="4Gi"))
    assert decide_zoned(capped, using("big")) == f"0/2 nodes are available: 2 {NOT_ENOUGH_SPACE}."
    # Another class's capacity, a capacity without nodeTopology: neither counts.
    other = capacity_plugin(True, capacity("x", "other", "a", "10Gi"), capacity("y", "csi", None, "10Gi"))
    assert decide_zoned(other, using("big")) == f"0/2 nodes are available: 2 {NOT_ENOUGH_SPACE}."
    # A claim without a storage request is not checked.
    assert decide_zoned(other, using("nosize")) in ("a", "b")


def test_storage_capacity_is_checked_only_for_drivers_that_opt_in() -> None:
    for tracked in (False, None):
        assert decide_zoned(capacity_plugin(tracked), using("big")) in ("a", "b")
    assert decide_zoned(capacity_plugin(True), using("big")) == (
        f"0/2 nodes are available: 2 {NOT_ENOUGH_SPACE}."
    )


def test_allowed_topologies_limit_provisioning() -> None:
    assert decide_zoned(capacity_plugin(None, topology=["b"]), using("big")) == "b"
    assert decide_zoned(capacity_plugin(None, topology=["c"]), using("big")) == (
        f"0/2 nodes are available: 2 {BIND_CONFLICT}."
    )


def test_capacity_queueing_hints() -> None:
    from controlplane.scheduler.storagecapacity import capacity_disabled, limit_grew

    small, large = capacity("c", "csi", "a", "1Gi"), capacity("c", "csi", "a", "2Gi")
    assert limit_grew(None, small) and limit_grew(small, large)
    assert not limit_grew(large, small) and not limit_grew(small, small)
    on, off = {"spec": {"storageCapacity": True}}, {"spec": {"storageCapacity": False}}
    assert capacity_disabled(on, off) and capacity_disabled(on, {"spec": {}})
    assert not capacity_disabled(off, on) and not capacity_disabled(on, on)


class Writes:
    """A client that records PUTs and, like the PV controller, completes the binding of a claim."""

    def __init__(self, binding: VolumeBinding) -> None:
        self.binding = binding
        self.puts: list[tuple[str, Obj]] = []

    async def replace(self, path: str, body: Obj) -> Obj:
        self.puts.append((path, body))
        return body

    def complete(self, claim_obj: Obj, pv: Obj) -> None:
        claim_obj.setdefault("metadata", {}).setdefault("annotations", {})[
            "pv.kubernetes.io/bind-completed"
        ] = "yes"
        claim_obj["spec"]["volumeName"] = pv["metadata"]["name"]
        pv["spec"]["claimRef"] = {
            "namespace": "ns",
            "name": claim_obj["metadata"]["name"],
            "uid": claim_obj["metadata"]["uid"],
        }
        self.binding.notify()


async def test_pre_bind_writes_then_waits_for_binding() -> None:
    static, dynamic = claim("data"), claim("dyn", "local-path")
    pv = volume("pv-a", "a")
    p = plugin([static, dynamic], [pv])
    pod = using("data", "dyn")
    assert p.pre_filter(pod) is None
    client = Writes(p)
    task = asyncio.create_task(p.pre_bind(client, pod, "a", {"kubernetes.io/hostname": "a"}))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    paths = [path for path, _ in client.puts]
    assert paths == ["/api/v1/persistentvolumes/pv-a", "/api/v1/namespaces/ns/persistentvolumeclaims/dyn"]
    assert client.puts[0][1]["spec"]["claimRef"]["uid"] == "uid-data"
    assert client.puts[1][1]["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == "a"
    assert not task.done()  # the pod is not bound before its claims are
    client.complete(static, pv)
    await asyncio.sleep(0)
    assert not task.done()
    provisioned = volume("pvc-dyn", "a")
    p.volumes.put(provisioned)  # type: ignore[attr-defined]
    client.complete(dynamic, provisioned)
    await asyncio.wait_for(task, 1)


async def test_pre_bind_times_out() -> None:
    p = VolumeBinding(
        Store(claim("dyn", "local-path"), namespaced=True), Store(), Store(*CLASSES), timeout=0.05
    )
    pod = using("dyn")
    p.pre_filter(pod)
    with pytest.raises(BindingError, match="binding volumes: context deadline exceeded"):
        await p.pre_bind(Writes(p), pod, "a", {})  # type: ignore[arg-type]


async def test_pre_bind_ends_when_the_pod_is_deleted() -> None:
    p = plugin([claim("dyn", "local-path")])
    pod = using("dyn")
    p.pre_filter(pod)
    task = asyncio.create_task(p.pre_bind(Writes(p), pod, "a", {}))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert not task.done()
    p.pod_deleted(pod.uid)
    with pytest.raises(PodGone, match="pod does not exist any more"):
        await asyncio.wait_for(task, 1)
