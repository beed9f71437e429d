"""The CSI provisioner's and attacher's pure parts: the PersistentVolume made of a claim, its class and
the driver's CreateVolume answer (csi source, identity attribute, fsType from the class's
csi.storage.k8s.io/fstype, topology as node affinity, finalizer), the selected node's topology segment
from its CSINode keys and labels, and the attacher's finalizer and node ID."""

from __future__ import annotations

from controlplane.controllers.volume.csiattacher import finalizer, node_id
from controlplane.controllers.volume.csiprovisioner import (
    FINALIZER,
    IDENTITY,
    node_topology,
    persistent_volume,
)
from kubeclient.csi.pb import csi_pb2 as pb

CLAIM = {
    "metadata": {"name": "data", "namespace": "ns", "uid": "u1", "resourceVersion": "5"},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}
CLASS = {
    "metadata": {"name": "fast"},
    "provisioner": "d.example.com",
    "reclaimPolicy": "Retain",
    "mountOptions": ["noatime"],
    "parameters": {"csi.storage.k8s.io/fstype": "xfs", "tier": "gold"},
}


def test_volume_from_the_driver_answer():
    created = pb.Volume(volume_id="vol-9", capacity_bytes=2 << 30, volume_context={"k": "v"})
    created.accessible_topology.append(pb.Topology(segments={"zone": "a"}))
    pv = persistent_volume(CLAIM, CLASS, "d.example.com", "123-4-d.example.com", created)
    assert pv["metadata"] == {
        "name": "pvc-u1",
        "annotations": {"pv.kubernetes.io/provisioned-by": "d.example.com"},
        "finalizers": [FINALIZER],
    }
    spec = pv["spec"]
    assert spec["csi"] == {
        "driver": "d.example.com",
        "volumeHandle": "vol-9",
        "volumeAttributes": {"k": "v", IDENTITY: "123-4-d.example.com"},
        "fsType": "xfs",
    }
    assert (spec["persistentVolumeReclaimPolicy"], spec["storageClassName"], spec["capacity"]) == (
        "Retain",
        "fast",
        {"storage": str(2 << 30)},
    )
    assert spec["mountOptions"] == ["noatime"]
    assert spec["claimRef"]["uid"] == "u1"
    assert spec["nodeAffinity"] == {
        "required": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
        }
    }


def test_no_capacity_answer_keeps_the_request_and_no_topology_no_affinity():
    pv = persistent_volume(CLAIM, {**CLASS, "parameters": {}}, "d.example.com", "i", pb.Volume(volume_id="v"))
    assert pv["spec"]["capacity"] == {"storage": str(1 << 30)}
    assert "nodeAffinity" not in pv["spec"] and "fsType" not in pv["spec"]["csi"]


def test_node_topology_and_ids():
    csinode = {
        "spec": {"drivers": [{"name": "d.example.com", "nodeID": "n-1", "topologyKeys": ["zone", "rack"]}]}
    }
    node = {"metadata": {"labels": {"zone": "a", "other": "x"}}}
    assert node_topology(node, csinode, "d.example.com") == {"zone": "a"}
    assert node_topology(node, csinode, "other.example.com") == {}
    assert node_id(csinode, "d.example.com") == "n-1" and node_id(None, "d.example.com") == ""
    assert finalizer("d.example.com") == "external-attacher/d.example.com"


def test_ephemeral_claim_from_the_template():
    from controlplane.controllers.volume.ephemeral import claim_for
    from kubeclient.volumes import claim_names

    pod = {
        "metadata": {"name": "web", "namespace": "ns", "uid": "p1"},
        "spec": {
            "volumes": [
                {"name": "cache", "emptyDir": {}},
                {
                    "name": "scratch",
                    "ephemeral": {
                        "volumeClaimTemplate": {
                            "metadata": {"labels": {"a": "b"}},
                            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast"},
                        }
                    },
                },
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            ]
        },
    }
    assert claim_names(pod) == ["web-scratch", "data"]
    claim = claim_for(pod, pod["spec"]["volumes"][1])
    assert claim["metadata"] == {
        "name": "web-scratch",
        "namespace": "ns",
        "labels": {"a": "b"},
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": "web",
                "uid": "p1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast"}
