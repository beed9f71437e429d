"""CSI on the real stack (our API server, scheduler, controllers and agent on a real containerd), with the
host-path CSI driver running beside the node as a process and the CSI provisioner and attacher in a
controller manager beside it (as the external sidecars run beside a driver): the driver registers through
the agent's plugins_registry (handshake, CSINode entry, topology label); a claim of a class the driver
provisions gets CreateVolume and a PV with the csi source; a pod using it is staged and published on the
node, what its container writes lands in the driver's backing folder; the pod's deletion unpublishes and
unstages (no mount left), the claim's deletion deletes the volume; a CSI ephemeral inline volume lives
and goes with its pod; a VolumeAttachment is attached by the attacher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from e2e.waiting import finished, wait_for
from pykubelet.rig.leaks import Scope
from pykubelet.rig.netlease import lease_network

pytestmark = pytest.mark.integration
DRIVER = "hostpath.csi.pykubelet.io"
TOPOLOGY = "topology.hostpath.csi.pykubelet.io/node"


def mounts_under(root: Path) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(str(root) + "/")]


class Beside:
    """The driver and the sidecar manager, started beside the node, stopped before the stack goes."""

    def __init__(self, stack) -> None:
        base = stack.config.state_dir / "csi"
        base.mkdir()
        self.base = base
        self.endpoint = str(base / "csi.sock")
        self.call_log = base / "calls.jsonl"
        self.backing = base / "state" / "volumes"
        self.agent_root = stack.config.state_dir / "agent"
        logs = (base / "driver.log").open("w"), (base / "sidecars.log").open("w")
        self.driver = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pykubelet.csidriver",
                "--endpoint",
                self.endpoint,
                "--node-id",
                stack.node_name,
                "--state-dir",
                str(base / "state"),
                "--registration-dir",
                str(self.agent_root / "plugins_registry"),
                "--topology-key",
                TOPOLOGY,
                "--max-volumes",
                "10",
                "--call-log",
                str(self.call_log),
            ],
            stdout=logs[0],
            stderr=subprocess.STDOUT,
        )
        wait_for(lambda: os.path.exists(self.endpoint), 30, what="the driver's socket")
        self.sidecars = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pykubelet",
                "controller-manager",
                "--kubeconfig",
                str(stack.kubeconfig),
                "--controllers",
                "csi-provisioner,csi-attacher",
                "--csi-address",
                self.endpoint,
                "--leader-elect=false",
                "--secure-port",
                "0",
            ],
            stdout=logs[1],
            stderr=subprocess.STDOUT,
        )
        for f in logs:
            f.close()

    def calls(self, method: str) -> list[dict]:
        lines = self.call_log.read_text().splitlines() if self.call_log.exists() else []
        return [c["request"] for c in map(json.loads, lines) if c["method"] == method]

    def stop(self) -> None:
        for proc in (self.sidecars, self.driver):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    if os.geteuid() != 0:
        pytest.skip("needs root (containerd, network namespaces, mounts)")
    from pykubelet.rig.stack import Stack, StackConfig, proxy_table

    with lease_network("c") as net:
        cfg = StackConfig(
            state_dir=tmp_path_factory.mktemp("csi"),
            node_name="csi-node",
            bridge=net.bridge,
            pod_cidr=net.pod_cidr,
        )
        scope = Scope.of(
            cfg.state_dir,
            bridges=[net.bridge],
            pod_cidrs=[net.pod_cidr],
            nft_tables=[f"ip {proxy_table(net.bridge)}"],
        )
        running = Stack(cfg)
        running.start()
        beside = None
        try:
            beside = Beside(running)
            running.beside = beside
            yield running
        finally:
            if beside is not None:
                beside.stop()
            problems = running.stop()
            assert not problems, problems
            assert not scope.leaked()


@pytest.fixture(scope="module")
def api(stack) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(stack.kubeconfig))


@pytest.fixture(scope="module")
def kube(api) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def storage(api) -> client.StorageV1Api:
    return client.StorageV1Api(api)


@pytest.fixture(scope="module")
def csidriver(storage) -> Iterator[None]:
    storage.create_csi_driver(
        {
            "metadata": {"name": DRIVER},
            "spec": {
                "attachRequired": False,
                "podInfoOnMount": True,
                "volumeLifecycleModes": ["Persistent", "Ephemeral"],
            },
        }
    )
    yield
    storage.delete_csi_driver(DRIVER)


@pytest.fixture
def namespace(kube: client.CoreV1Api) -> Iterator[str]:
    name = f"csi-{uuid.uuid4().hex[:6]}"
    kube.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: _exists(lambda: kube.read_namespaced_service_account("default", name)), timeout=30)
    yield name
    kube.delete_namespace(name)


def _exists(read) -> bool:
    try:
        read()
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def pod(name: str, image: str, script: str, volume: dict) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "command": ["sh", "-c", script],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", **volume}],
        },
    }


def test_registration_writes_csinode_and_topology(stack, kube, storage) -> None:
    csinode = wait_for(
        lambda: (
            _exists(lambda: storage.read_csi_node(stack.node_name)) and storage.read_csi_node(stack.node_name)
        ),
        60,
        what="the node's CSINode",
    )
    driver = wait_for(
        lambda: next(
            (d for d in storage.read_csi_node(stack.node_name).spec.drivers or [] if d.name == DRIVER), None
        ),
        60,
        what="the driver's CSINode entry",
    )
    assert (driver.node_id, driver.topology_keys, driver.allocatable.count) == (
        stack.node_name,
        [TOPOLOGY],
        10,
    )
    assert csinode.metadata.owner_references[0].kind == "Node"
    node = kube.read_node(stack.node_name)
    assert node.metadata.labels[TOPOLOGY] == stack.node_name
    assert json.loads(node.metadata.annotations["csi.volume.kubernetes.io/nodeid"]) == {
        DRIVER: stack.node_name
    }
    assert stack.beside.calls("NotifyRegistrationStatus") == [{"plugin_registered": True}]


def test_provisioned_claim_mounted_written_and_cleaned_up(stack, kube, storage, csidriver, namespace) -> None:
    beside = stack.beside
    sc_name = f"csi-{namespace}"
    storage.create_storage_class(
        {
            "metadata": {"name": sc_name},
            "provisioner": DRIVER,
            "volumeBindingMode": "WaitForFirstConsumer",
            "parameters": {"kind": "dir"},
        }
    )
    try:
        kube.create_namespaced_persistent_volume_claim(
            namespace,
            {
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "64Mi"}},
                    "storageClassName": sc_name,
                },
            },
        )
        claim_volume = {"persistentVolumeClaim": {"claimName": "data"}}
        kube.create_namespaced_pod(
            namespace,
            pod("writer", stack.images.busybox, "echo from-the-container > /data/hello", claim_volume),
        )
        assert finished(kube, namespace, "writer", 180).status.phase == "Succeeded"
        claim = kube.read_namespaced_persistent_volume_claim("data", namespace)
        pv = kube.read_persistent_volume(claim.spec.volume_name)
        assert pv.spec.csi.driver == DRIVER and pv.spec.csi.volume_handle == f"pvc-{claim.metadata.uid}"
        assert pv.metadata.annotations["pv.kubernetes.io/provisioned-by"] == DRIVER
        term = pv.spec.node_affinity.required.node_selector_terms[0].match_expressions[0]
        assert (term.key, term.values) == (TOPOLOGY, [stack.node_name])
        create = beside.calls("CreateVolume")[-1]
        assert create["parameters"] == {"kind": "dir"} and create["capacity_range"]["required_bytes"] == str(
            64 << 20
        )
        assert create["accessibility_requirements"]["requisite"] == [
            {"segments": {TOPOLOGY: stack.node_name}}
        ]
        backing = beside.backing / pv.spec.csi.volume_handle
        assert (backing / "hello").read_text() == "from-the-container\n"
        publish = beside.calls("NodePublishVolume")[-1]
        assert publish["volume_context"]["csi.storage.k8s.io/pod.name"] == "writer"
        assert publish["volume_context"]["csi.storage.k8s.io/pod.namespace"] == namespace
        assert len(beside.calls("NodeStageVolume")) >= 1

        kube.delete_namespaced_pod("writer", namespace, grace_period_seconds=0)
        wait_for(
            lambda: not _exists(lambda: kube.read_namespaced_pod("writer", namespace)), 90, what="pod gone"
        )
        wait_for(lambda: mounts_under(beside.agent_root) == [], 60, what="the node's CSI mounts gone")
        assert beside.calls("NodeUnpublishVolume") and beside.calls("NodeUnstageVolume")

        kube.delete_namespaced_persistent_volume_claim("data", namespace)
        wait_for(
            lambda: not _exists(lambda: kube.read_persistent_volume(pv.metadata.name)), 90, what="PV deleted"
        )
        assert not backing.exists()
        assert beside.calls("DeleteVolume")[-1]["volume_id"] == pv.spec.csi.volume_handle
    finally:
        storage.delete_storage_class(sc_name)


def test_inline_ephemeral_volume_lives_with_its_pod(stack, kube, csidriver, namespace) -> None:
    beside = stack.beside
    inline = {"csi": {"driver": DRIVER, "volumeAttributes": {"size": "small"}}}
    kube.create_namespaced_pod(
        namespace, pod("inline", stack.images.busybox, "echo scratch > /data/f && cat /data/f", inline)
    )
    assert finished(kube, namespace, "inline", 180).status.phase == "Succeeded"
    assert kube.read_namespaced_pod_log("inline", namespace) == "scratch\n"
    publish = [c for c in beside.calls("NodePublishVolume") if c["volume_context"].get("size") == "small"][-1]
    assert publish["volume_context"]["csi.storage.k8s.io/ephemeral"] == "true"
    handle = publish["volume_id"]
    kube.delete_namespaced_pod("inline", namespace, grace_period_seconds=0)
    wait_for(lambda: mounts_under(beside.agent_root) == [], 90, what="the inline volume unmounted")
    wait_for(lambda: not (beside.backing / handle).exists(), 30, what="the inline volume's folder gone")


def test_attacher_attaches_a_volume_attachment(stack, storage, csidriver) -> None:
    name = f"csi-{uuid.uuid4().hex[:8]}"
    storage.create_volume_attachment(
        {
            "metadata": {"name": name},
            "spec": {
                "attacher": DRIVER,
                "nodeName": stack.node_name,
                "source": {"persistentVolumeName": "nothing"},
            },
        }
    )
    got = wait_for(
        lambda: storage.read_volume_attachment(name).status.attached and storage.read_volume_attachment(name),
        60,
        what="attached",
    )
    assert got.metadata.finalizers == [f"external-attacher/{DRIVER}"]
    storage.delete_volume_attachment(name)
    wait_for(lambda: not _exists(lambda: storage.read_volume_attachment(name)), 60, what="detached and gone")


def test_generic_ephemeral_volume_made_and_gone_with_its_pod(
    stack, kube, storage, csidriver, namespace
) -> None:
    beside = stack.beside
    sc_name = f"eph-{namespace}"
    storage.create_storage_class(
        {"metadata": {"name": sc_name}, "provisioner": DRIVER, "volumeBindingMode": "WaitForFirstConsumer"}
    )
    try:
        template = {
            "metadata": {"labels": {"made-for": "eph"}},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "16Mi"}},
                "storageClassName": sc_name,
            },
        }
        kube.create_namespaced_pod(
            namespace,
            pod(
                "eph",
                stack.images.busybox,
                "echo generic > /data/g",
                {"ephemeral": {"volumeClaimTemplate": template}},
            ),
        )
        assert finished(kube, namespace, "eph", 180).status.phase == "Succeeded"
        claim = kube.read_namespaced_persistent_volume_claim("eph-data", namespace)
        owner = claim.metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.controller) == ("Pod", "eph", True)
        assert claim.metadata.labels == {"made-for": "eph"}
        handle = kube.read_persistent_volume(claim.spec.volume_name).spec.csi.volume_handle
        assert (beside.backing / handle / "g").read_text() == "generic\n"
        kube.delete_namespaced_pod("eph", namespace, grace_period_seconds=0)
        wait_for(
            lambda: not _exists(lambda: kube.read_namespaced_persistent_volume_claim("eph-data", namespace)),
            120,
            what="the claim collected with its pod",
        )
        wait_for(lambda: not (beside.backing / handle).exists(), 120, what="the volume deleted")
        assert mounts_under(beside.agent_root) == []
    finally:
        storage.delete_storage_class(sc_name)
