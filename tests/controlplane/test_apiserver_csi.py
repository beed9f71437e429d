"""storage.k8s.io/v1 CSIDriver, CSINode, VolumeAttachment (+status) and CSIStorageCapacity served as
upstream serves them: defaults, validation 422s with upstream's paths and texts, update rules, kubectl's
columns, protobuf; and the agent's CSINode writer (what a node does when a driver registers) against
the real server: the CSINode owned by the Node, the nodeid annotation and the topology labels."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agent.node.csinode import NODE_ID_ANNOTATION, CSINodeWriter
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from tests.controlplane.conftest import Kubectl, message
from tests.controlplane.test_apiserver_protobuf import PB, Http

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def storage(api: client.ApiClient) -> client.StorageV1Api:
    return client.StorageV1Api(api)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_csidriver_defaults_validation_update_and_columns(storage: client.StorageV1Api, kubectl: Kubectl):
    name = unique("d") + ".csi.example.com"
    manifest = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": name},
        "spec": {},
    }
    kubectl.run("create", "-f", "-", input=json.dumps(manifest))
    spec = storage.read_csi_driver(name).spec
    assert (spec.attach_required, spec.pod_info_on_mount, spec.requires_republish, spec.storage_capacity) == (
        True,
        False,
        False,
        False,
    )
    assert (spec.fs_group_policy, spec.volume_lifecycle_modes, spec.se_linux_mount) == (
        "ReadWriteOnceWithFSType",
        ["Persistent"],
        False,
    )
    with pytest.raises(ApiException) as err:
        storage.create_csi_driver(
            {
                "metadata": {"name": "bad.example.com"},
                "spec": {
                    "fsGroupPolicy": "Sometimes",
                    "volumeLifecycleModes": ["Forever"],
                    "tokenRequests": [{"audience": "a", "expirationSeconds": 60}, {"audience": "a"}],
                },
            }
        )
    assert message(err) == (
        'CSIDriver.storage.k8s.io "bad.example.com" is invalid: [spec.fsGroupPolicy: Unsupported value: '
        '"Sometimes": supported values: "File", "None", "ReadWriteOnceWithFSType", '
        "spec.tokenRequests[0].expirationSeconds: Invalid value: 60: may not specify a duration less than 10 "
        'minutes, spec.tokenRequests[1].audience: Duplicate value: "a", spec.volumeLifecycleModes: Unsupported '
        'value: "Forever": supported values: "Persistent", "Ephemeral"]'
    )
    with pytest.raises(ApiException) as err:
        storage.patch_csi_driver(name, {"spec": {"attachRequired": False}})
    assert message(err) == (
        f'CSIDriver.storage.k8s.io "{name}" is invalid: spec.attachedRequired: Invalid value: false: field is immutable'
    )
    changed = storage.patch_csi_driver(name, {"spec": {"podInfoOnMount": True}})
    assert changed.spec.pod_info_on_mount is True
    header, row = kubectl("get", "csidriver", name).splitlines()
    assert header.split() == [
        "NAME",
        "ATTACHREQUIRED",
        "PODINFOONMOUNT",
        "STORAGECAPACITY",
        "TOKENREQUESTS",
        "REQUIRESREPUBLISH",
        "MODES",
        "AGE",
    ]
    assert row.split()[:7] == [name, "true", "true", "false", "<unset>", "false", "Persistent"]
    storage.delete_csi_driver(name)


def test_csinode_validation_and_immutable_entries(storage: client.StorageV1Api, kubectl: Kubectl):
    name = unique("node")
    driver = {
        "name": "a.csi.example.com",
        "nodeID": "n1",
        "topologyKeys": ["zone"],
        "allocatable": {"count": 3},
    }
    storage.create_csi_node({"metadata": {"name": name}, "spec": {"drivers": [driver]}})
    with pytest.raises(ApiException) as err:
        storage.create_csi_node(
            {
                "metadata": {"name": unique("bad")},
                "spec": {
                    "drivers": [
                        {"name": "x.example.com", "nodeID": "", "allocatable": {"count": -1}},
                        {"name": "x.example.com", "nodeID": "n", "topologyKeys": ["k", "k"]},
                    ]
                },
            }
        )
    text = message(err)
    assert "spec.drivers[0].nodeID: Required value" in text
    assert "spec.drivers[0].allocatable.count: Invalid value: -1: must be greater than or equal to 0" in text
    assert 'spec.drivers[1].name: Duplicate value: "x.example.com"' in text
    assert 'spec.drivers[1]: Duplicate value: "k"' in text
    with pytest.raises(ApiException) as err:
        storage.replace_csi_node(
            name,
            {"metadata": {"name": name}, "spec": {"drivers": [{**driver, "nodeID": "n2"}]}},
        )
    assert f'CSINode.storage.k8s.io "{name}" is invalid: spec.drivers: Invalid value:' in message(err)
    assert "field is immutable" in message(err)
    header, row = kubectl("get", "csinode", name).splitlines()
    assert header.split() == ["NAME", "DRIVERS", "AGE"] and row.split()[:2] == [name, "1"]
    storage.delete_csi_node(name)


def test_volume_attachment_spec_status_and_columns(storage: client.StorageV1Api, kubectl: Kubectl):
    name = unique("csi")
    body = {
        "metadata": {"name": name},
        "spec": {
            "attacher": "a.csi.example.com",
            "nodeName": "node-1",
            "source": {"persistentVolumeName": "pv-1"},
        },
        "status": {"attached": True},
    }
    made = storage.create_volume_attachment(body)
    assert made.status.attached is False  # the status is the attacher's, through /status
    done = storage.patch_volume_attachment_status(
        name, {"status": {"attached": True, "attachmentMetadata": {"lun": "1"}}}
    )
    assert done.status.attached and done.status.attachment_metadata == {"lun": "1"}
    with pytest.raises(ApiException) as err:
        storage.patch_volume_attachment(name, {"spec": {"nodeName": "node-2"}})
    assert message(err).startswith(
        f'VolumeAttachment.storage.k8s.io "{name}" is invalid: spec: Invalid value:'
    )
    assert message(err).endswith("field is immutable")
    with pytest.raises(ApiException) as err:
        storage.create_volume_attachment(
            {"metadata": {"name": unique("bad")}, "spec": {"attacher": "", "nodeName": "n", "source": {}}}
        )
    assert "spec.attacher: Required value" in message(err)
    assert (
        "spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName"
        in (message(err))
    )
    header, row = kubectl("get", "volumeattachment", name).splitlines()
    assert header.split() == ["NAME", "ATTACHER", "PV", "NODE", "ATTACHED", "AGE"]
    assert row.split()[:5] == [name, "a.csi.example.com", "pv-1", "node-1", "true"]
    storage.delete_volume_attachment(name)


def test_csi_storage_capacity(storage: client.StorageV1Api, kubectl: Kubectl):
    name = unique("cap")
    storage.create_namespaced_csi_storage_capacity(
        "default", {"metadata": {"name": name}, "storageClassName": "fast", "capacity": "10Gi"}
    )
    with pytest.raises(ApiException) as err:
        storage.create_namespaced_csi_storage_capacity(
            "default", {"metadata": {"name": unique("bad")}, "storageClassName": "Fast!", "capacity": "-1"}
        )
    text = message(err)
    assert 'storageClassName: Invalid value: "Fast!"' in text
    assert 'capacity: Invalid value: "-1": must be greater than or equal to 0' in text
    header, row = kubectl("get", "csistoragecapacity", name).splitlines()
    assert header.split() == ["NAME", "STORAGECLASSNAME", "CAPACITY", "AGE"]
    assert row.split()[:3] == [name, "fast", "10Gi"]
    storage.delete_namespaced_csi_storage_capacity(name, "default")


def test_csi_kinds_in_protobuf(apiserver, storage: client.StorageV1Api):
    """A CSINode and a VolumeAttachment sent and read back in protobuf, as client-go's clients speak."""
    conn = Http(apiserver)
    name = unique("pb")
    driver = {
        "name": "a.csi.example.com",
        "nodeID": "n1",
        "topologyKeys": ["zone"],
        "allocatable": {"count": 2},
    }
    node = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name},
        "spec": {"drivers": [driver]},
    }
    status, content_type, got = conn.call("POST", "/apis/storage.k8s.io/v1/csinodes", node)
    assert (status, content_type, got["spec"]["drivers"]) == (201, PB, [driver])
    attachment = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": name},
        "spec": {"attacher": "a.csi.example.com", "nodeName": name, "source": {"persistentVolumeName": "pv"}},
    }
    status, _, got = conn.call("POST", "/apis/storage.k8s.io/v1/volumeattachments", attachment)
    assert status == 201 and got["spec"] == attachment["spec"] and got["status"] == {"attached": False}
    storage.delete_csi_node(name)
    storage.delete_volume_attachment(name)


async def test_agent_writes_csinode_and_node_labels(
    apiserver, api: client.ApiClient, storage: client.StorageV1Api
):
    v1 = client.CoreV1Api(api)
    node = unique("csi-node")
    v1.create_node({"metadata": {"name": node}})
    kube = KubeClient(load_kubeconfig(apiserver.kubeconfig))
    writer = CSINodeWriter(kube, node)
    try:
        await writer.install("a.csi.example.com", "id-a", {"topology.a/zone": "z1"}, 5)
        await writer.install("b.csi.example.com", "id-b", {}, 0)
        csinode = storage.read_csi_node(node)
        owner = csinode.metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.uid) == ("Node", node, v1.read_node(node).metadata.uid)
        drivers = {d.name: d for d in csinode.spec.drivers}
        a = drivers["a.csi.example.com"]
        assert (a.node_id, a.topology_keys, a.allocatable.count) == ("id-a", ["topology.a/zone"], 5)
        assert drivers["b.csi.example.com"].allocatable is None
        meta = v1.read_node(node).metadata
        assert meta.labels["topology.a/zone"] == "z1"
        assert json.loads(meta.annotations[NODE_ID_ANNOTATION]) == {
            "a.csi.example.com": "id-a",
            "b.csi.example.com": "id-b",
        }
        await writer.install("a.csi.example.com", "id-a", {"topology.a/zone": "z1"}, 5)  # a re-registration
        await writer.uninstall("b.csi.example.com")
        assert [d.name for d in storage.read_csi_node(node).spec.drivers] == ["a.csi.example.com"]
        assert json.loads(v1.read_node(node).metadata.annotations[NODE_ID_ANNOTATION]) == {
            "a.csi.example.com": "id-a"
        }
    finally:
        await kube.close()
        v1.delete_node(node)
        storage.delete_csi_node(node)
