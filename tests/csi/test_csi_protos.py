"""The committed CSI and plugin-registration modules are what protoc makes of protos/, and their wire
names and field numbers are the CSI spec's and the kubelet registration API's."""

from __future__ import annotations

from pathlib import Path

from agent.cri import regen
from kubeclient.csi.pb import csi_pb2, registration_pb2


def test_generated_modules_are_fresh(tmp_path: Path) -> None:
    for proto in (regen.CSI_PROTO, regen.REGISTRATION_PROTO):
        regen.generate(tmp_path, proto)
        for name in regen.generated_names(proto):
            assert (regen.CSI_OUT_DIR / name).read_text() == (tmp_path / name).read_text(), name


def number(module, message: str, field: str) -> int:
    descriptor = module.DESCRIPTOR.message_types_by_name[message.split(".")[0]]
    for nested in message.split(".")[1:]:
        descriptor = descriptor.nested_types_by_name[nested]
    return descriptor.fields_by_name[field].number


def test_wire_names() -> None:
    services = {s.full_name for s in csi_pb2.DESCRIPTOR.services_by_name.values()}
    assert services == {"csi.v1.Identity", "csi.v1.Controller", "csi.v1.Node"}
    registration = registration_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert registration.full_name == "pluginregistration.Registration"
    assert {m.name for m in registration.methods} == {"GetInfo", "NotifyRegistrationStatus"}
    controller = csi_pb2.DESCRIPTOR.services_by_name["Controller"].methods_by_name["GetCapacity"]
    assert (controller.input_type.full_name, controller.output_type.full_name) == (
        "csi.v1.GetCapacityRequest",
        "csi.v1.GetCapacityResponse",
    )


def test_field_numbers() -> None:
    expected = {
        ("NodeStageVolumeRequest", "staging_target_path"): 3,
        ("NodeStageVolumeRequest", "volume_capability"): 4,
        ("NodeStageVolumeRequest", "volume_context"): 6,
        ("NodePublishVolumeRequest", "target_path"): 4,
        ("NodePublishVolumeRequest", "readonly"): 6,
        ("NodePublishVolumeRequest", "secrets"): 7,
        ("NodePublishVolumeRequest", "volume_context"): 8,
        ("NodeGetInfoResponse", "max_volumes_per_node"): 2,
        ("NodeGetInfoResponse", "accessible_topology"): 3,
        ("CreateVolumeRequest", "accessibility_requirements"): 7,
        ("Volume", "volume_id"): 2,
        ("Volume", "accessible_topology"): 5,
        ("ControllerPublishVolumeRequest", "readonly"): 4,
        ("VolumeUsage", "unit"): 4,
        ("VolumeCapability", "access_mode"): 3,
        ("VolumeCapability.MountVolume", "mount_flags"): 2,
        ("GetPluginCapabilitiesResponse", "capabilities"): 1,
        ("ControllerExpandVolumeRequest", "capacity_range"): 2,
        ("ControllerExpandVolumeRequest", "volume_capability"): 4,
        ("ControllerExpandVolumeResponse", "node_expansion_required"): 2,
        ("NodeExpandVolumeRequest", "volume_path"): 2,
        ("NodeExpandVolumeRequest", "capacity_range"): 3,
        ("NodeExpandVolumeRequest", "staging_target_path"): 4,
        ("NodeExpandVolumeRequest", "volume_capability"): 5,
        ("NodeExpandVolumeResponse", "capacity_bytes"): 1,
        ("GetCapacityRequest", "volume_capabilities"): 1,
        ("GetCapacityRequest", "parameters"): 2,
        ("GetCapacityRequest", "accessible_topology"): 3,
        ("GetCapacityResponse", "available_capacity"): 1,
        ("GetCapacityResponse", "maximum_volume_size"): 2,
        ("GetCapacityResponse", "minimum_volume_size"): 3,
    }
    assert {key: number(csi_pb2, *key) for key in expected} == expected
    assert number(registration_pb2, "PluginInfo", "supported_versions") == 4
    assert number(registration_pb2, "RegistrationStatus", "error") == 2


def test_get_capacity_on_the_wire() -> None:
    """GetCapacity's bytes as the spec lays them out: the sizes are int64 in the wrapper messages
    google.protobuf.Int64Value (field 1), so an unset wrapper is told from a zero one."""
    response = csi_pb2.GetCapacityResponse.FromString(
        bytes([0x08, 0x80, 0x80, 0x40])  # 1: available_capacity = 1 << 20 (varint)
        + bytes([0x12, 0x03, 0x08, 0x80, 0x08])  # 2: maximum_volume_size { 1: 1024 }
        + bytes([0x1A, 0x00])  # 3: minimum_volume_size {} (set, value 0)
    )
    assert response.available_capacity == 1 << 20
    assert response.maximum_volume_size.value == 1024
    assert response.HasField("minimum_volume_size") and response.minimum_volume_size.value == 0
    assert not csi_pb2.GetCapacityResponse(available_capacity=1).HasField("maximum_volume_size")
    request = csi_pb2.GetCapacityRequest(parameters={"k": "v"})
    request.accessible_topology.SetInParent()  # an empty segment is still sent (every node)
    assert request.SerializeToString() == (
        bytes([0x12, 0x06, 0x0A, 0x01]) + b"k" + bytes([0x12, 0x01]) + b"v" + bytes([0x1A, 0x00])
    )
