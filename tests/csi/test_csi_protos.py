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
    }
    assert {key: number(csi_pb2, *key) for key in expected} == expected
    assert number(registration_pb2, "PluginInfo", "supported_versions") == 4
    assert number(registration_pb2, "RegistrationStatus", "error") == 2
