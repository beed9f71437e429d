"""The CSI resizer's decisions without a driver or an API (kubeclient.csi.resize and
controlplane/controllers/volume/csiresizer.py): which size a claim's volume is expanded to from the
claim's resize status (upstream's expandAndRecover), how the resize conditions merge, and the size as the
resizer writes it; where the kubelet applies fsGroup to a CSI publication by the fsGroupPolicy; when
the attach/detach controller reports an attachment that waited too long; which failed stage or publish
calls leave the mount uncertain."""

from __future__ import annotations

import os

import grpc
import pytest

from agent.volumes.csi import fs_group_applies, is_final
from controlplane.controllers.volume.attachdetach import ATTACH_TIMEOUT, attach_timeout
from controlplane.controllers.volume.csiresizer import target_size
from kubeclient.csi.client import CSICallError
from kubeclient.csi.resize import binary, condition, merge_conditions


def claim(request: str, capacity: str, status: str = "", allocated: str = "", conditions=()) -> dict:
    out: dict = {
        "spec": {"resources": {"requests": {"storage": request}}},
        "status": {"phase": "Bound", "capacity": {"storage": capacity}, "conditions": list(conditions)},
    }
    if status:
        out["status"]["allocatedResourceStatuses"] = {"storage": status}
    if allocated:
        out["status"]["allocatedResources"] = {"storage": allocated}
    return out


def pv(capacity: str) -> dict:
    return {"spec": {"capacity": {"storage": capacity}}}


def test_target_size_follows_the_resize_status() -> None:
    gi = 1 << 30
    assert target_size(claim("2Gi", "1Gi"), pv("1Gi")) == 2 * gi  # a new expansion
    assert target_size(claim("1Gi", "1Gi"), pv("1Gi")) is None  # nothing asked
    # the node's part pending: the controller waits (the PV has the allocated size already)
    assert target_size(claim("2Gi", "1Gi", "NodeResizePending", "2Gi"), pv("2Gi")) is None
    # a controller expansion interrupted: resumed at the allocated size, not the newer request
    assert target_size(claim("3Gi", "1Gi", "ControllerResizeInProgress", "2Gi"), pv("1Gi")) == 2 * gi
    # after an infeasible try the user lowered the request: the allocated size is retried until then
    assert target_size(claim("2Gi", "1Gi", "ControllerResizeInfeasible", "5Gi"), pv("1Gi")) == 2 * gi
    # an older resizer finished the PV and left only the condition: the node's turn
    pending = condition("FileSystemResizePending", "m")
    assert target_size(claim("2Gi", "1Gi", conditions=[pending]), pv("2Gi")) is None


def test_merge_keeps_other_conditions_and_an_unchanged_transition_time() -> None:
    old = {"type": "Resizing", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    other = {"type": "ModifyingVolume", "status": "True"}
    merged = merge_conditions([old, other], [condition("Resizing")])
    assert merged == [other, old]
    pending = condition("FileSystemResizePending", "wait")
    assert merge_conditions([old, other], [pending]) == [other, pending]
    assert merge_conditions([old, other], []) == [other]


def test_sizes_are_written_as_binary_quantities() -> None:
    assert [binary(n) for n in (128 << 20, 1 << 30, 1000, 1536 << 20)] == [
        "128Mi",
        "1Gi",
        "1k",
        "1536Mi",
    ]  # below 1Ki: DecimalSI, as Go


def test_fs_group_policy_decides_where_the_kubelet_applies_fs_group() -> None:
    """upstream's csiMountMgr.supportsFSGroup for each fsGroupPolicy."""

    def driver(policy: str | None) -> dict | None:
        return None if policy is None else {"spec": {"fsGroupPolicy": policy}}

    rwo, rwx = ["ReadWriteOnce"], ["ReadWriteMany"]
    cases = [
        # (policy, fsGroup, fsType, access modes (None: inline), read-only) -> applies
        ((None, 1000, "ext4", rwo, False), True),  # no CSIDriver: ReadWriteOnceWithFSType
        ((None, 1000, "", rwo, False), False),  # no fsType
        (("ReadWriteOnceWithFSType", 1000, "ext4", rwx, False), False),  # not RWO
        (("ReadWriteOnceWithFSType", 1000, "ext4", ["ReadOnlyMany", "ReadWriteOnce"], False), True),
        (("ReadWriteOnceWithFSType", 1000, "ext4", [], False), False),  # a PV without access modes
        (("ReadWriteOnceWithFSType", 1000, "ext4", None, False), True),  # inline: always RWO
        (("File", 1000, "", rwx, False), True),
        (("File", 1000, "", rwx, True), False),  # read-only publication
        (("File", None, "", rwx, False), False),  # no fsGroup
        (("None", 1000, "ext4", rwo, False), False),
    ]
    for (policy, group, fs_type, modes, read_only), expected in cases:
        got = fs_group_applies(driver(policy), group, fs_type, modes, read_only)
        assert got is expected, (policy, group, fs_type, modes, read_only)


def test_a_socket_path_too_long_for_an_address_is_reached_through_its_folder(tmp_path) -> None:
    """A real socket bound and connected through socket_address where its path passes 100 bytes."""
    import socket as sockets

    from kubeclient.csi.client import socket_address

    assert socket_address("/run/csi.sock") == "unix:///run/csi.sock"
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = str(deep / "hostpath.csi.pykubelet.io-reg.sock")
    address = socket_address(path)
    assert address.startswith("unix:///proc/self/fd/") and address.endswith(
        "/hostpath.csi.pykubelet.io-reg.sock"
    )
    via = address.removeprefix("unix://")
    with sockets.socket(sockets.AF_UNIX) as server, sockets.socket(sockets.AF_UNIX) as client:
        server.bind(via)
        server.listen(1)
        assert os.path.exists(path)  # made in the deep folder itself
        client.connect(via)


def test_allowed_topologies_become_the_requisite() -> None:
    """external-provisioner's requirements without strict topology: the class's allowedTopologies
    multiplied out, the selected node's segment preferred first; without them the selected node's."""
    from controlplane.controllers.volume.csiprovisioner import allowed_segments, requirements

    zone, rack = "topology.example.com/zone", "topology.example.com/rack"
    sc = {
        "allowedTopologies": [
            {"matchLabelExpressions": [{"key": zone, "values": ["a", "b"]}, {"key": rack, "values": ["1"]}]},
            {"matchLabelExpressions": [{"key": zone, "values": ["c"]}]},
        ]
    }
    segments = [{zone: "a", rack: "1"}, {zone: "b", rack: "1"}, {zone: "c"}]
    assert allowed_segments(sc) == segments
    assert requirements(sc, {zone: "b", rack: "1"}) == (segments, [segments[1], segments[0], segments[2]])
    assert requirements(sc, None) == (segments, segments)
    assert requirements({}, {zone: "a"}) == ([{zone: "a"}], [{zone: "a"}])
    assert requirements({}, None) == ([], [])
    with pytest.raises(ValueError, match="from selected node is not in requisite"):
        requirements(sc, {zone: "d"})


def test_attach_timeout_is_due_two_minutes_after_the_attachment_or_its_last_report() -> None:
    """upstream's csiAttacher waits 2 minutes for `attached`, then fails the attach (FailedAttachVolume
    with its timeout text) and tries again, waiting as long."""
    attachment = {
        "metadata": {"name": "csi-1", "creationTimestamp": "2026-12-06T04:00:00Z"},
        "spec": {"attacher": "attach.csi.example.com", "nodeName": "n"},
    }
    made = 1796529600.0  # 2026-12-06T04:00:00Z
    assert attach_timeout(attachment, "vol-9", 0.0, made + 30) == ("", 90.0)
    message, wait = attach_timeout(attachment, "vol-9", 0.0, made + 120)
    assert message == (
        "timed out waiting for external-attacher of attach.csi.example.com CSI driver to attach volume vol-9"
    )
    assert wait == ATTACH_TIMEOUT == 120.0
    # reported at +120: the next one is due at +240
    assert attach_timeout(attachment, "vol-9", made + 120, made + 200) == ("", 40.0)
    assert attach_timeout(attachment, "vol-9", made + 120, made + 240)[0] == message


@pytest.mark.parametrize(
    ("code", "final"),
    [
        (grpc.StatusCode.DEADLINE_EXCEEDED, False),
        (grpc.StatusCode.UNAVAILABLE, False),
        (grpc.StatusCode.CANCELLED, False),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, False),
        (grpc.StatusCode.ABORTED, False),
        (grpc.StatusCode.NOT_FOUND, True),
        (grpc.StatusCode.INVALID_ARGUMENT, True),
        (grpc.StatusCode.INTERNAL, True),
        (grpc.StatusCode.FAILED_PRECONDITION, True),
        (grpc.StatusCode.UNKNOWN, True),
    ],
)
def test_which_failed_calls_may_still_have_mounted(code, final):
    """upstream's isFinalError: a timeout, a cancelled call, an unavailable or exhausted driver and a
    pending operation (Aborted) leave the mount uncertain; every other code means nothing was done."""
    assert is_final(CSICallError("NodeStageVolume", code, "x")) is final
