"""CSI on the real stack (our API server, scheduler, controllers and agent on a real containerd), with the
host-path CSI driver running beside the node as a process and the CSI provisioner and attacher in a
controller manager beside it (as the external sidecars run beside a driver): the driver registers through
the agent's plugins_registry (handshake, CSINode entry, topology label); a claim of a class the driver
provisions gets CreateVolume and a PV with the csi source; a pod using it is staged and published on the
node, what its container writes lands in the driver's backing folder; the pod's deletion unpublishes and
unstages (no mount left), the claim's deletion deletes the volume; a CSI ephemeral inline volume lives
and goes with its pod; a generic ephemeral volume's claim is made and goes with its pod; a driver needing
attach gets its VolumeAttachment from the attach/detach controller, attached by the attacher beside it,
and its allocatable count refuses one volume too many (NodeVolumeLimits), detached only once the node
no longer reports it in volumesInUse; a driver restarted under a
mounted volume keeps the mount and registers again; the node reports the volume's stats; a claim of an
expandable class grows online through the resizer beside the driver and the node, and is refused a
shrink below its capacity; the rig's class gets a CSIStorageCapacity for the node's segment with the
driver's figures, a provisioned claim takes its size from it, and a claim bigger than what is left keeps
its pod Pending with the scheduler's message while a smaller one binds; each sidecar writes as its own
account with its repo's RBAC, their manager reads as system:csi-sidecars only; bad input (a refused
CreateVolume, a driver not registered, a failed ControllerPublish) gets upstream 1.32's events word for
word."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from e2e.waiting import finished, wait_for
from journey.auditlog import log_files, parse_event
from kubeclient.volumes import storage_bytes
from pykubelet.rig import csi as rigcsi
from pykubelet.rig.auditlog import AUDIT_LOG
from pykubelet.rig.csi import CLASS, DEFAULT_CLASS
from tests.csi.conftest import mounts_under, volume_stats_reported
from tests.rig.stacks import exists, fresh_namespace, leased_stack

pytestmark = pytest.mark.integration
DRIVER, TOPOLOGY = rigcsi.DRIVER, rigcsi.TOPOLOGY_KEY
ATTACHING = "attach.csi.pykubelet.io"  # a second driver, with ControllerPublish
ADMIN = "kubernetes-admin"  # the stack's admin.kubeconfig user
SA = f"system:serviceaccount:{rigcsi.NAMESPACE}:"  # the sidecars' accounts: SA + "csi-attacher"


def _calls(call_log: Path, method: str) -> list[dict]:
    lines = call_log.read_text().splitlines() if call_log.exists() else []
    return [c["request"] for c in map(json.loads, lines) if c["method"] == method]


class Rigged:
    """The rig's own host-path CSI driver and sidecars (pykubelet.rig.csi, what `up` runs), seen as the
    tests see a driver beside the node."""

    def __init__(self, stack) -> None:
        self.csi = stack.csi
        self.endpoint = self.csi.endpoint
        self.call_log = self.csi.call_log
        self.backing = self.csi.backing
        self.agent_root = stack.config.state_dir / "agent"

    def calls(self, method: str) -> list[dict]:
        return _calls(self.call_log, method)

    def restart_driver(self) -> None:
        self.csi.restart_driver()


class Beside:
    """A driver and its sidecar manager, started beside the node, stopped before the stack goes."""

    def __init__(self, stack, name: str, *flags: str) -> None:
        base = stack.config.state_dir / name.split(".")[0]
        base.mkdir()
        self.base = base
        self.endpoint = str(base / "csi.sock")
        self.call_log = base / "calls.jsonl"
        self.backing = base / "state" / "volumes"
        self.agent_root = stack.config.state_dir / "agent"
        logs = (base / "driver.log").open("w"), (base / "sidecars.log").open("w")
        self.driver_argv = [
            sys.executable,
            "-m",
            "pykubelet.csidriver",
            "--name",
            name,
            "--endpoint",
            self.endpoint,
            "--node-id",
            stack.node_name,
            "--state-dir",
            str(base / "state"),
            "--registration-dir",
            str(self.agent_root / "plugins_registry"),
            "--call-log",
            str(self.call_log),
            *flags,
        ]
        self.driver = subprocess.Popen(self.driver_argv, stdout=logs[0], stderr=subprocess.STDOUT)
        wait_for(lambda: os.path.exists(self.endpoint), 30, what="the driver's socket")
        self.sidecars = subprocess.Popen(
            rigcsi.sidecars_argv(
                stack.csi.kubeconfig,  # the rig's sidecars' manager's identity: the same reads
                "csi-provisioner,csi-attacher,csi-resizer",
                self.endpoint,
                (stack.apiserver.ca_cert, stack.apiserver.ca_key),
            ),
            stdout=logs[1],
            stderr=subprocess.STDOUT,
        )
        for f in logs:
            f.close()

    def calls(self, method: str) -> list[dict]:
        return _calls(self.call_log, method)

    def restart_driver(self) -> None:
        """Stop the driver (its sockets go) and start it again, as a driver pod's restart does."""
        self.driver.terminate()
        self.driver.wait(timeout=30)
        with (self.base / "driver.log").open("a") as log:
            self.driver = subprocess.Popen(self.driver_argv, stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: os.path.exists(self.endpoint), 30, what="the driver's socket again")

    def stop(self) -> None:
        for proc in (self.sidecars, self.driver):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    if os.geteuid() != 0:
        pytest.skip("needs root (containerd, network namespaces, mounts)")
    state = tmp_path_factory.mktemp("csi")
    with leased_stack(state, "c", "csi-node", csi_driver=True) as running:
        attaching = None
        try:
            attaching = Beside(running, ATTACHING, "--attach-required", "--max-volumes", "1")
            running.beside, running.attaching = Rigged(running), attaching
            yield running
        finally:
            _pods_gone(running)  # a failed test's pods: their volumes unpublished while the drivers run
            if attaching is not None:
                attaching.stop()


def _writers(stack, resource: str, name: str, subresource: str = "") -> set[tuple[str, str]]:
    """(verb, user) of each successful write of the object, from the stack's audit log: who wrote it."""
    found = set()
    for file in log_files(stack.config.state_dir / "apiserver" / AUDIT_LOG):
        for line in file.read_text().splitlines():
            write = parse_event(json.loads(line))
            if write is not None and (write.resource, write.name, write.subresource) == (
                resource,
                name,
                subresource,
            ):
                found.add((write.verb, write.user))
    return found


def _pods_gone(stack) -> None:
    kube = client.CoreV1Api(config.new_client_from_config(config_file=str(stack.kubeconfig)))
    for p in kube.list_pod_for_all_namespaces().items:
        if p.metadata.namespace.startswith("csi-"):
            kube.delete_namespaced_pod(p.metadata.name, p.metadata.namespace, grace_period_seconds=0)
    root = stack.config.state_dir / "agent"
    wait_for(lambda: mounts_under(root) == [], 120, what="the node's CSI mounts gone")


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
def csidriver(storage) -> None:
    """The rig applied the driver's CSIDriver: no attach, pod info on mount, both lifecycle modes."""
    spec = storage.read_csi_driver(DRIVER).spec
    assert (
        spec.attach_required,
        spec.pod_info_on_mount,
        spec.volume_lifecycle_modes,
        spec.fs_group_policy,
    ) == (
        False,
        True,
        ["Persistent", "Ephemeral"],
        "File",
    )


@pytest.fixture
def namespace(kube: client.CoreV1Api) -> Iterator[str]:
    with fresh_namespace(kube, "csi") as name:
        yield name


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
    drivers = wait_for(
        lambda: (
            exists(lambda: storage.read_csi_node(stack.node_name))
            and {d.name: d for d in storage.read_csi_node(stack.node_name).spec.drivers or []}.keys()
            == {DRIVER, ATTACHING}
            and {d.name: d for d in storage.read_csi_node(stack.node_name).spec.drivers}
        ),
        60,
        what="both drivers on the node's CSINode",
    )
    driver = drivers[DRIVER]
    assert (driver.node_id, driver.topology_keys, driver.allocatable) == (stack.node_name, [TOPOLOGY], None)
    assert (drivers[ATTACHING].topology_keys, drivers[ATTACHING].allocatable.count) == (None, 1)
    csinode = storage.read_csi_node(stack.node_name)
    assert (csinode.metadata.owner_references[0].kind, csinode.metadata.owner_references[0].name) == (
        "Node",
        stack.node_name,
    )
    node = kube.read_node(stack.node_name)
    assert node.metadata.labels[TOPOLOGY] == stack.node_name
    assert json.loads(node.metadata.annotations["csi.volume.kubernetes.io/nodeid"]) == {
        DRIVER: stack.node_name,
        ATTACHING: stack.node_name,
    }
    assert stack.beside.calls("NotifyRegistrationStatus") == [{"plugin_registered": True}]


def test_each_sidecar_holds_only_its_upstream_rights(api, kube) -> None:
    """The rig applied each sidecar's ServiceAccount, and each account holds what its repo's rbac.yaml
    grants, nothing of the others' and no admin rights; the sidecars' manager's own identity only reads."""
    accounts = ("csi-provisioner", "csi-attacher", "csi-resizer")
    made = [kube.read_namespaced_service_account(a, rigcsi.NAMESPACE).metadata.name for a in accounts]
    assert made == list(accounts)
    authz = client.AuthorizationV1Api(api)
    sa_groups = [
        "system:serviceaccounts",
        f"system:serviceaccounts:{rigcsi.NAMESPACE}",
        "system:authenticated",
    ]

    def allowed(user: str, verb: str, group: str, resource: str, subresource: str = "") -> bool:
        attributes = {"verb": verb, "group": group, "resource": resource, "subresource": subresource}
        if resource in ("pods", "persistentvolumeclaims", "secrets"):
            attributes["namespace"] = "default"
        groups = sa_groups if user.startswith(SA) else ["system:authenticated"]
        body = {"spec": {"user": user, "groups": groups, "resourceAttributes": attributes}}
        return authz.create_subject_access_review(body).status.allowed

    storage, manager = "storage.k8s.io", rigcsi.MANAGER_USER
    asked = {
        (SA + "csi-attacher", "patch", storage, "volumeattachments", "status"): True,
        (SA + "csi-attacher", "patch", "", "persistentvolumes"): True,
        (SA + "csi-attacher", "delete", "", "pods"): False,
        (SA + "csi-attacher", "create", "", "persistentvolumes"): False,
        (SA + "csi-attacher", "create", "", "events"): False,
        (SA + "csi-resizer", "patch", "", "persistentvolumeclaims", "status"): True,
        (SA + "csi-resizer", "patch", "", "persistentvolumes"): True,
        (SA + "csi-resizer", "update", "", "persistentvolumeclaims"): False,
        (SA + "csi-resizer", "patch", storage, "volumeattachments", "status"): False,
        (SA + "csi-provisioner", "create", "", "persistentvolumes"): True,
        (SA + "csi-provisioner", "patch", storage, "volumeattachments", "status"): False,
        (SA + "csi-provisioner", "delete", "", "pods"): False,
        (manager, "watch", "", "persistentvolumes"): True,
        (manager, "list", storage, "volumeattachments"): True,
        (manager, "create", "", "persistentvolumes"): False,
        (manager, "patch", storage, "volumeattachments"): False,
        (manager, "get", "", "secrets"): False,
    }
    assert {ask: allowed(*ask) for ask in asked} == asked


def test_provisioned_claim_mounted_written_and_cleaned_up(stack, kube, storage, csidriver, namespace) -> None:
    """Through the class the rig (`up`) offers: csi-hostpath, WaitForFirstConsumer, not the default while
    local-path is; the volume made on the node the pod got (its topology as requisite and node affinity)."""
    beside = stack.beside
    sc_name = CLASS
    classes = {c.metadata.name: c for c in storage.list_storage_class().items}
    assert (
        classes[CLASS].volume_binding_mode == "WaitForFirstConsumer" and classes[CLASS].allow_volume_expansion
    )
    defaults = [n for n, c in classes.items() if (c.metadata.annotations or {}).get(DEFAULT_CLASS) == "true"]
    assert defaults == ["local-path"]
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
    assert "parameters" not in create and create["capacity_range"]["required_bytes"] == str(64 << 20)
    assert create["accessibility_requirements"]["requisite"] == [{"segments": {TOPOLOGY: stack.node_name}}]
    backing = beside.backing / pv.spec.csi.volume_handle
    assert (backing / "hello").read_text() == "from-the-container\n"
    publish = beside.calls("NodePublishVolume")[-1]
    assert publish["volume_context"]["csi.storage.k8s.io/pod.name"] == "writer"
    assert publish["volume_context"]["csi.storage.k8s.io/pod.namespace"] == namespace
    assert len(beside.calls("NodeStageVolume")) >= 1

    kube.delete_namespaced_pod("writer", namespace, grace_period_seconds=0)
    wait_for(lambda: not exists(lambda: kube.read_namespaced_pod("writer", namespace)), 90, what="pod gone")
    wait_for(lambda: mounts_under(beside.agent_root) == [], 60, what="the node's CSI mounts gone")
    assert beside.calls("NodeUnpublishVolume") and beside.calls("NodeUnstageVolume")

    # A new pod on the same claim reads what the first one wrote (staged and published again).
    stages = len(beside.calls("NodeStageVolume"))
    kube.create_namespaced_pod(
        namespace,
        pod("reader", stack.images.busybox, 'test "$(cat /data/hello)" = from-the-container', claim_volume),
    )
    assert finished(kube, namespace, "reader", 180).status.phase == "Succeeded"
    assert len(beside.calls("NodeStageVolume")) > stages
    assert beside.calls("NodePublishVolume")[-1]["volume_context"]["csi.storage.k8s.io/pod.name"] == "reader"
    kube.delete_namespaced_pod("reader", namespace, grace_period_seconds=0)
    wait_for(lambda: not exists(lambda: kube.read_namespaced_pod("reader", namespace)), 90, what="pod gone")
    wait_for(lambda: mounts_under(beside.agent_root) == [], 60, what="the node's CSI mounts gone again")

    kube.delete_namespaced_persistent_volume_claim("data", namespace)
    wait_for(lambda: not exists(lambda: kube.read_persistent_volume(pv.metadata.name)), 90, what="PV deleted")
    assert not backing.exists()
    assert beside.calls("DeleteVolume")[-1]["volume_id"] == pv.spec.csi.volume_handle


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


def test_attach_required_driver_gets_its_volume_attachment(stack, kube, storage, namespace) -> None:
    """No CSIDriver object: attach is required (upstream's default). The attach/detach controller makes the
    VolumeAttachment, the attacher beside the driver publishes it, the node stages with its metadata; the
    pod gone, the attachment is deleted and detached."""
    attaching = stack.attaching
    sc_name = f"att-{namespace}"
    storage.create_storage_class({"metadata": {"name": sc_name}, "provisioner": ATTACHING})
    try:
        kube.create_namespaced_persistent_volume_claim(
            namespace,
            {
                "metadata": {"name": "att"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "8Mi"}},
                    "storageClassName": sc_name,
                },
            },
        )
        # running while the attachment is looked at: a finished pod's volumes are detached
        script = "echo attached > /data/a && sleep 3600"
        kube.create_namespaced_pod(
            namespace,
            pod("att", stack.images.busybox, script, {"persistentVolumeClaim": {"claimName": "att"}}),
        )
        claim = wait_for(
            lambda: kube.read_namespaced_persistent_volume_claim("att", namespace).spec.volume_name,
            120,
            what="bound",
        )
        pv = kube.read_persistent_volume(claim)
        handle = pv.spec.csi.volume_handle
        wait_for(lambda: (attaching.backing / handle / "a").exists(), 180, what="the container's write")
        assert (attaching.backing / handle / "a").read_text() == "attached\n"
        attachments = [a for a in storage.list_volume_attachment().items if a.spec.attacher == ATTACHING]
        assert [
            (a.spec.node_name, a.spec.source.persistent_volume_name, a.status.attached) for a in attachments
        ] == [(stack.node_name, pv.metadata.name, True)]
        assert attachments[0].status.attachment_metadata == {"attachedTo": stack.node_name}
        # each sidecar wrote as its own account (the audit log's user), not as its manager nor the admin
        status = wait_for(
            lambda: _writers(stack, "volumeattachments", attachments[0].metadata.name, "status"),
            30,
            what="the attachment's status write in the audit log",
        )
        assert {user for _, user in status} == {SA + "csi-attacher"}
        created = {
            user for verb, user in _writers(stack, "persistentvolumes", pv.metadata.name) if verb == "create"
        }
        assert created == {SA + "csi-provisioner"}
        publish = attaching.calls("ControllerPublishVolume")[-1]
        assert (publish["volume_id"], publish["node_id"]) == (handle, stack.node_name)
        assert attaching.calls("NodeStageVolume")[-1]["publish_context"] == {"attachedTo": stack.node_name}
        # the node reports the mounted volume in use (upstream's unique name), so it is not detached yet
        unique = f"kubernetes.io/csi/{ATTACHING}^{handle}"
        wait_for(
            lambda: unique in (kube.read_node(stack.node_name).status.volumes_in_use or []),
            60,
            what="the volume in the node's volumesInUse",
        )
        attached = wait_for(
            lambda: kube.read_node(stack.node_name).status.volumes_attached, 30, what="volumesAttached"
        )
        assert [(v.name, v.device_path) for v in attached] == [(unique, "")]
        # the driver's allocatable count is 1: a second volume of it does not fit the node (NodeVolumeLimits)
        kube.create_namespaced_persistent_volume_claim(
            namespace,
            {
                "metadata": {"name": "att2"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "8Mi"}},
                    "storageClassName": sc_name,
                },
            },
        )
        kube.create_namespaced_pod(
            namespace,
            pod("att2", stack.images.busybox, "true", {"persistentVolumeClaim": {"claimName": "att2"}}),
        )
        refused = wait_for(
            lambda: next(
                (
                    e
                    for e in kube.list_namespaced_event(namespace).items
                    if e.involved_object.name == "att2"
                    and e.reason == "FailedScheduling"
                    and "exceed max volume count" in e.message
                ),
                None,
            ),
            90,
            what="FailedScheduling for the volume limit",
        )
        # NodeVolumeLimits' rejection is one preemption could resolve, so 1.32 adds its preemption verdict.
        assert refused.message == (
            "0/1 nodes are available: 1 node(s) exceed max volume count. "
            "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.."
        )
        kube.delete_namespaced_pod("att2", namespace, grace_period_seconds=0)
        kube.delete_namespaced_persistent_volume_claim("att2", namespace)
        kube.delete_namespaced_pod("att", namespace, grace_period_seconds=0)
        name = attachments[0].metadata.name
        wait_for(
            lambda: not exists(lambda: storage.read_volume_attachment(name)), 90, what="detached and gone"
        )
        assert attaching.calls("ControllerUnpublishVolume")[-1]["volume_id"] == handle
        # detached only after the node unmounted it and stopped reporting it in use
        order = [json.loads(line)["method"] for line in attaching.call_log.read_text().splitlines()]
        assert order.index("NodeUnstageVolume") < order.index("ControllerUnpublishVolume")
        assert unique not in (kube.read_node(stack.node_name).status.volumes_in_use or [])
        wait_for(
            lambda: not kube.read_node(stack.node_name).status.volumes_attached,
            30,
            what="volumesAttached empty",
        )
        wait_for(lambda: mounts_under(attaching.agent_root) == [], 60, what="the node's mounts gone")
        kube.delete_namespaced_persistent_volume_claim("att", namespace)
        wait_for(lambda: not (attaching.backing / handle).exists(), 90, what="the volume deleted")
    finally:
        storage.delete_storage_class(sc_name)


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
            lambda: not exists(lambda: kube.read_namespaced_persistent_volume_claim("eph-data", namespace)),
            120,
            what="the claim collected with its pod",
        )
        wait_for(lambda: not (beside.backing / handle).exists(), 120, what="the volume deleted")
        assert mounts_under(beside.agent_root) == []
    finally:
        storage.delete_storage_class(sc_name)


def test_driver_restart_keeps_mounts_and_registers_again(stack, kube, storage, csidriver, namespace) -> None:
    """The driver restarted while a pod's volume is mounted: the mount stays, the agent deregisters the
    driver when its socket goes and registers it again when it is back (a second handshake), and the
    pod's volume is then unpublished and unstaged through the new driver process."""
    beside = stack.beside
    sc_name = f"rst-{namespace}"
    storage.create_storage_class({"metadata": {"name": sc_name}, "provisioner": DRIVER})
    try:
        kube.create_namespaced_persistent_volume_claim(
            namespace,
            {
                "metadata": {"name": "keep"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "8Mi"}},
                    "storageClassName": sc_name,
                },
            },
        )
        script = "echo before > /data/b && sleep 3600"
        kube.create_namespaced_pod(
            namespace,
            pod("keeper", stack.images.busybox, script, {"persistentVolumeClaim": {"claimName": "keep"}}),
        )
        volume = wait_for(
            lambda: kube.read_namespaced_persistent_volume_claim("keep", namespace).spec.volume_name,
            120,
            what="bound",
        )
        handle = kube.read_persistent_volume(volume).spec.csi.volume_handle
        wait_for(lambda: (beside.backing / handle / "b").exists(), 180, what="the container's write")
        volume_stats_reported(kube, stack.node_name, namespace, "keeper", "keep", beside.backing / handle)
        mounted = mounts_under(beside.agent_root)
        notified = len(beside.calls("NotifyRegistrationStatus"))
        beside.restart_driver()
        wait_for(
            lambda: len(beside.calls("NotifyRegistrationStatus")) > notified,
            60,
            what="the driver registered again",
        )
        assert beside.calls("NotifyRegistrationStatus")[-1] == {"plugin_registered": True}
        assert mounts_under(beside.agent_root) == mounted  # nothing unmounted by the restart
        wait_for(
            lambda: DRIVER in {d.name for d in storage.read_csi_node(stack.node_name).spec.drivers or []},
            60,
            what="the CSINode entry back",
        )
        unpublished = len(beside.calls("NodeUnpublishVolume"))
        kube.delete_namespaced_pod("keeper", namespace, grace_period_seconds=0)
        wait_for(lambda: mounts_under(beside.agent_root) == [], 90, what="the mounts gone")
        assert len(beside.calls("NodeUnpublishVolume")) == unpublished + 1  # through the new process
        kube.delete_namespaced_persistent_volume_claim("keep", namespace)
        wait_for(lambda: not (beside.backing / handle).exists(), 90, what="the volume deleted")
    finally:
        storage.delete_storage_class(sc_name)


def _claim(name: str, size: str, sc_name: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
            "storageClassName": sc_name,
        },
    }


def _resize(kube, namespace: str, name: str, size: str):
    return kube.patch_namespaced_persistent_volume_claim(
        name, namespace, {"spec": {"resources": {"requests": {"storage": size}}}}
    )


def _reasons(kube, namespace: str, name: str) -> dict[str, str]:
    return {
        e.reason: e.message
        for e in kube.list_namespaced_event(namespace).items
        if e.involved_object.name == name
    }


def test_online_expansion_through_the_resizer_and_the_node(
    stack, kube, storage, csidriver, namespace
) -> None:
    """A running pod's claim raised on a class with allowVolumeExpansion: the resizer marks it Resizing,
    calls ControllerExpandVolume, grows the PV and leaves FileSystemResizePending / NodeResizePending with
    allocatedResources; the pod's next sync on the node calls NodeExpandVolume on its publication and sets
    the claim's capacity, the condition gone; upstream's events on the claim and the pod. A size the
    driver refuses is VolumeResizeFailed and ControllerResizeInfeasible until the request comes down. A
    request below the claim's capacity is upstream's 422, an expansion on a class without
    allowVolumeExpansion its 403 (that class binds at once within its allowedTopologies)."""
    beside = stack.beside
    grow_sc, fixed_sc = f"grow-{namespace}", f"fixed-{namespace}"
    storage.create_storage_class(
        {"metadata": {"name": grow_sc}, "provisioner": DRIVER, "allowVolumeExpansion": True}
    )
    allowed = [{"matchLabelExpressions": [{"key": TOPOLOGY, "values": [stack.node_name]}]}]
    storage.create_storage_class(
        {"metadata": {"name": fixed_sc}, "provisioner": DRIVER, "allowedTopologies": allowed}
    )
    try:
        kube.create_namespaced_persistent_volume_claim(namespace, _claim("grow", "8Mi", grow_sc))
        kube.create_namespaced_persistent_volume_claim(namespace, _claim("fixed", "8Mi", fixed_sc))
        script = "echo grown > /data/g && sleep 3600"
        kube.create_namespaced_pod(
            namespace,
            pod("grower", stack.images.busybox, script, {"persistentVolumeClaim": {"claimName": "grow"}}),
        )
        pv_name = wait_for(
            lambda: kube.read_namespaced_persistent_volume_claim("grow", namespace).spec.volume_name,
            120,
            what="bound",
        )
        handle = kube.read_persistent_volume(pv_name).spec.csi.volume_handle
        wait_for(lambda: (beside.backing / handle / "g").exists(), 180, what="the container's write")
        wait_for(
            lambda: kube.read_namespaced_persistent_volume_claim("fixed", namespace).status.phase == "Bound",
            60,
            what="the fixed claim bound",
        )
        # Immediate binding with allowedTopologies: the class's topology is the requisite
        fixed_pv = kube.read_namespaced_persistent_volume_claim("fixed", namespace).spec.volume_name
        fixed_handle = kube.read_persistent_volume(fixed_pv).spec.csi.volume_handle
        (create,) = [c for c in beside.calls("CreateVolume") if c["name"] == fixed_handle]
        assert create["accessibility_requirements"] == {
            "requisite": [{"segments": {TOPOLOGY: stack.node_name}}],
            "preferred": [{"segments": {TOPOLOGY: stack.node_name}}],
        }

        with pytest.raises(ApiException) as shrink:
            _resize(kube, namespace, "grow", "4Mi")
        assert shrink.value.status == 422
        assert json.loads(shrink.value.body)["message"] == (
            'PersistentVolumeClaim "grow" is invalid: spec.resources.requests.storage: Forbidden: field can '
            "not be less than status.capacity"
        )
        with pytest.raises(ApiException) as fixed:
            _resize(kube, namespace, "fixed", "16Mi")
        assert fixed.value.status == 403
        assert json.loads(fixed.value.body)["message"] == (
            'persistentvolumeclaims "fixed" is forbidden: only dynamically provisioned pvc can be resized and '
            "the storageclass that provisions the pvc must support resize"
        )

        _resize(kube, namespace, "grow", "16Mi")
        wait_for(
            lambda: kube.read_persistent_volume(pv_name).spec.capacity["storage"] == "16Mi",
            60,
            what="the PV grown by the resizer",
        )
        wait_for(
            lambda: ("patch", SA + "csi-resizer") in _writers(stack, "persistentvolumes", pv_name),
            30,
            what="the resizer's patch of the PV in the audit log",
        )
        status_writers = {user for _, user in _writers(stack, "persistentvolumeclaims", "grow", "status")}
        assert SA + "csi-resizer" in status_writers and ADMIN not in status_writers
        expand = beside.calls("ControllerExpandVolume")[-1]
        assert (expand["volume_id"], expand["capacity_range"]) == (handle, {"required_bytes": str(16 << 20)})
        claim = wait_for(
            lambda: (
                (
                    (c := kube.read_namespaced_persistent_volume_claim("grow", namespace)).status.conditions
                    or c.status.capacity["storage"] == "16Mi"
                )
                and c
            ),
            60,
            what="the claim waiting for the node (or done by a sync of the pod meanwhile)",
        )
        assert claim.status.allocated_resources == {"storage": "16Mi"}
        if claim.status.capacity["storage"] == "8Mi":
            assert [c.type for c in claim.status.conditions] == ["FileSystemResizePending"]
            assert claim.status.conditions[0].message == (
                "Waiting for user to (re-)start a pod to finish file system resize of volume on node."
            )
            assert claim.status.allocated_resource_statuses == {"storage": "NodeResizePending"}
        # an update of the pod makes the node sync it now (upstream reprocesses a pod's volumes on
        # each of its syncs; the periodic one would come within a minute)
        kube.patch_namespaced_pod("grower", namespace, {"metadata": {"annotations": {"sync": "now"}}})
        done = wait_for(
            lambda: (
                (c := kube.read_namespaced_persistent_volume_claim("grow", namespace)).status.capacity[
                    "storage"
                ]
                == "16Mi"
                and c
            ),
            90,
            what="the node's expansion",
        )
        assert not done.status.conditions and not done.status.allocated_resource_statuses
        assert done.status.allocated_resources == {"storage": "16Mi"}
        node_call = beside.calls("NodeExpandVolume")[-1]
        assert node_call["volume_path"].endswith(f"/volumes/kubernetes.io~csi/{pv_name}/mount")
        assert node_call["capacity_range"] == {"required_bytes": str(16 << 20)}
        succeeded = f'MountVolume.NodeExpandVolume succeeded for volume "{pv_name}" {stack.node_name}'
        claim_events = wait_for(
            lambda: (r := _reasons(kube, namespace, "grow")).get("FileSystemResizeSuccessful") and r,
            30,
            what="the claim's events",
        )
        assert claim_events["Resizing"] == f"External resizer is resizing volume {pv_name}"
        assert claim_events["FileSystemResizeRequired"] == "Require file system resize of volume on node"
        assert claim_events["FileSystemResizeSuccessful"] == succeeded
        assert _reasons(kube, namespace, "grower")["FileSystemResizeSuccessful"] == succeeded

        # a size the driver refuses (OUT_OF_RANGE past its 1 TiB): VolumeResizeFailed and
        # ControllerResizeInfeasible; the request may then come down (above the capacity) and succeeds
        _resize(kube, namespace, "grow", "2Ti")
        failed = wait_for(
            lambda: _reasons(kube, namespace, "grow").get("VolumeResizeFailed"), 60, what="VolumeResizeFailed"
        )
        assert failed == (
            f'resize volume "{pv_name}" by resizer "{DRIVER}" failed: rpc error: code = OutOfRange desc = '
            f"Requested capacity {2 << 40} exceeds maximum allowed {1 << 40}"
        )
        wait_for(
            lambda: (
                kube.read_namespaced_persistent_volume_claim(
                    "grow", namespace
                ).status.allocated_resource_statuses
                == {"storage": "ControllerResizeInfeasible"}
            ),
            30,
            what="ControllerResizeInfeasible",
        )
        _resize(kube, namespace, "grow", "32Mi")
        wait_for(
            lambda: kube.read_persistent_volume(pv_name).spec.capacity["storage"] == "32Mi",
            60,
            what="the PV grown to the lowered request",
        )

        kube.delete_namespaced_pod("grower", namespace, grace_period_seconds=0)
        wait_for(lambda: mounts_under(beside.agent_root) == [], 90, what="the mounts gone")
        for name in ("grow", "fixed"):
            kube.delete_namespaced_persistent_volume_claim(name, namespace)
        wait_for(lambda: not (beside.backing / handle).exists(), 90, what="the volume deleted")
    finally:
        storage.delete_storage_class(grow_sc)
        storage.delete_storage_class(fixed_sc)


def _pool_left(kube) -> int:
    """What the rig driver's pool should offer: its size less the volumes it made that are still there
    (each has its PV: made after CreateVolume, deleted after DeleteVolume)."""
    used = sum(
        storage_bytes(v.spec.capacity["storage"])
        for v in kube.list_persistent_volume().items
        if v.spec.csi and v.spec.csi.driver == DRIVER
    )
    return storage_bytes(rigcsi.CAPACITY) - used


def _offered(storage) -> dict[tuple[str, str], tuple[int, int]]:
    """(class, segment's node) -> (capacity, maximumVolumeSize) of the rig driver's CSIStorageCapacities."""
    selector = f"csi.storage.k8s.io/drivername={DRIVER},csi.storage.k8s.io/managed-by=external-provisioner"
    return {
        (c.storage_class_name, c.node_topology.match_labels[TOPOLOGY]): (
            storage_bytes(c.capacity),
            storage_bytes(c.maximum_volume_size),
        )
        for c in storage.list_namespaced_csi_storage_capacity(rigcsi.NAMESPACE, label_selector=selector).items
    }


def test_capacity_tracked_and_honoured_by_the_scheduler(stack, kube, storage, csidriver, namespace) -> None:
    """Driver -> csi-capacity -> CSIStorageCapacity -> scheduler: the rig's class has one object for the
    node's segment offering what is left of the driver's pool; a claim bigger than that keeps its pod
    Pending (FailedScheduling, upstream's message) and is never provisioned, a smaller one binds and the
    offer drops by its size at once (the PV's appearance triggers the refresh, not the minute's poll)."""
    assert storage.read_csi_driver(DRIVER).spec.storage_capacity is True
    key = (CLASS, stack.node_name)

    def offered_as_expected():
        left = _pool_left(kube)
        return _offered(storage) == {key: (left, left)} and left

    wait_for(offered_as_expected, 60, what="the class's CSIStorageCapacity with the pool's figures")

    kube.create_namespaced_persistent_volume_claim(namespace, _claim("huge", "200Gi", CLASS))
    kube.create_namespaced_pod(
        namespace, pod("huge", stack.images.busybox, "true", {"persistentVolumeClaim": {"claimName": "huge"}})
    )
    waiting = wait_for(
        lambda: _reasons(kube, namespace, "huge").get("FailedScheduling"), 60, what="FailedScheduling"
    )
    assert waiting.startswith("0/1 nodes are available: 1 node(s) did not have enough free storage.")
    conditions = kube.read_namespaced_pod("huge", namespace).status.conditions or []
    (scheduled,) = [c for c in conditions if c.type == "PodScheduled"]
    assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")

    kube.create_namespaced_persistent_volume_claim(namespace, _claim("small", "1Gi", CLASS))
    kube.create_namespaced_pod(
        namespace,
        pod("small", stack.images.busybox, "true", {"persistentVolumeClaim": {"claimName": "small"}}),
    )
    assert finished(kube, namespace, "small", 180).status.phase == "Succeeded"
    small = kube.read_namespaced_persistent_volume_claim("small", namespace)
    assert small.status.phase == "Bound"
    left = wait_for(offered_as_expected, 30, what="the offer down by the new volume")
    assert left <= storage_bytes(rigcsi.CAPACITY) - (1 << 30)

    huge = kube.read_namespaced_persistent_volume_claim("huge", namespace)
    assert huge.status.phase == "Pending" and not huge.spec.volume_name
    assert kube.read_namespaced_pod("huge", namespace).status.phase == "Pending"
    assert f"pvc-{huge.metadata.uid}" not in {c["name"] for c in stack.beside.calls("CreateVolume")}

    for name in ("huge", "small"):
        kube.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    for name in ("huge", "small"):
        wait_for(
            lambda n=name: not exists(lambda: kube.read_namespaced_pod(n, namespace)), 90, what="pod gone"
        )
        kube.delete_namespaced_persistent_volume_claim(name, namespace)
    wait_for(
        lambda: not exists(lambda: kube.read_persistent_volume(small.spec.volume_name)), 90, what="PV deleted"
    )
    wait_for(offered_as_expected, 30, what="the offer back up once the volume is deleted")


def _static_pv(name: str, driver: str, handle: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "8Mi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "csi": {"driver": driver, "volumeHandle": handle},
        },
    }


def _static_claim(name: str, pv_name: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "8Mi"}},
            "storageClassName": "",
            "volumeName": pv_name,
        },
    }


def test_bad_input_gets_upstreams_events_word_for_word(stack, kube, storage, namespace) -> None:
    """A CreateVolume the driver refuses: the PV controller's ExternalProvisioning, the provisioner's
    Provisioning and ProvisioningFailed; a PV naming a driver not registered on the node: the kubelet's
    MountDevice FailedMount; a ControllerPublish that fails: the attach/detach controller's
    FailedAttachVolume and no FailedMount of the kubelet's (it waits for the attachment in silence). Each
    pod stays ContainerCreating; the texts are upstream 1.32's."""
    sc_name, missing = f"bad-{namespace}", "missing.csi.pykubelet.io"
    ghost_pv, lost_pv = f"ghost-{namespace}", f"lost-{namespace}"
    storage.create_storage_class({"metadata": {"name": sc_name}, "provisioner": DRIVER})
    storage.create_csi_driver({"metadata": {"name": missing}, "spec": {"attachRequired": False}})
    try:
        kube.create_namespaced_persistent_volume_claim(
            namespace,
            {
                "metadata": {"name": "huge"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "2Ti"}},
                    "storageClassName": sc_name,
                },
            },
        )
        for name, pv_name, driver, handle in (
            ("ghost", ghost_pv, missing, "h-1"),
            ("lost", lost_pv, ATTACHING, "nowhere"),
        ):
            kube.create_persistent_volume(_static_pv(pv_name, driver, handle))
            kube.create_namespaced_persistent_volume_claim(namespace, _static_claim(name, pv_name))
        for name in ("ghost", "lost"):  # bound first: the node meets no claim still binding
            wait_for(
                lambda n=name: (
                    kube.read_namespaced_persistent_volume_claim(n, namespace).status.phase == "Bound"
                ),
                60,
                what="the claim bound",
            )
            kube.create_namespaced_pod(
                namespace,
                pod(name, stack.images.busybox, "true", {"persistentVolumeClaim": {"claimName": name}}),
            )

        huge = wait_for(
            lambda: (r := _reasons(kube, namespace, "huge")).get("ProvisioningFailed") and r,
            90,
            what="ProvisioningFailed",
        )
        assert huge["ExternalProvisioning"] == (
            f"Waiting for a volume to be created either by the external provisioner '{DRIVER}' or manually by "
            "the system administrator. If volume creation is delayed, please verify that the provisioner is "
            "running and correctly registered."
        )
        assert (
            huge["Provisioning"]
            == f'External provisioner is provisioning volume for claim "{namespace}/huge"'
        )
        assert huge["ProvisioningFailed"] == (
            f'failed to provision volume with StorageClass "{sc_name}": rpc error: code = OutOfRange desc = '
            f"Requested capacity {2 << 40} exceeds maximum allowed {1 << 40}"
        )

        ghost = wait_for(
            lambda: _reasons(kube, namespace, "ghost").get("FailedMount"), 120, what="FailedMount"
        )
        assert ghost == (
            f'MountVolume.MountDevice failed for volume "{ghost_pv}" : kubernetes.io/csi: attacher.MountDevice '
            f"failed to create newCsiDriverClient: driver name {missing} not found in the list of registered "
            "CSI drivers"
        )

        lost = wait_for(
            lambda: _reasons(kube, namespace, "lost").get("FailedAttachVolume"),
            120,
            what="FailedAttachVolume",
        )
        assert lost == (
            f'AttachVolume.Attach failed for volume "{lost_pv}" : rpc error: code = NotFound desc = volume '
            "nowhere not found"
        )
        for name in ("ghost", "lost"):
            waiting = kube.read_namespaced_pod(name, namespace).status
            assert waiting.phase == "Pending"
            assert waiting.container_statuses[0].state.waiting.reason == "ContainerCreating"
        assert "FailedMount" not in _reasons(kube, namespace, "lost")
        for name in ("ghost", "lost"):
            kube.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        for name in ("ghost", "lost"):
            wait_for(
                lambda n=name: not exists(lambda: kube.read_namespaced_pod(n, namespace)), 90, what="pod gone"
            )
        wait_for(
            lambda: not [a for a in storage.list_volume_attachment().items if a.spec.attacher == ATTACHING],
            90,
            what="the failed attachment gone",
        )
    finally:
        for name in ("huge", "ghost", "lost"):
            try:
                kube.delete_namespaced_persistent_volume_claim(name, namespace)
            except ApiException:
                pass
        for name in (ghost_pv, lost_pv):
            try:
                kube.delete_persistent_volume(name)
            except ApiException:
                pass
        storage.delete_csi_driver(missing)
        storage.delete_storage_class(sc_name)
