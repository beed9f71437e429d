"""The committed CRI modules must be exactly what protoc makes of protos/runtime/v1/api.proto."""

from __future__ import annotations

from pathlib import Path

from agent.cri import regen
from agent.cri.pb import api_pb2


def test_generated_modules_are_fresh(tmp_path: Path) -> None:
    regen.generate(tmp_path)
    for name in regen.GENERATED:
        committed = (regen.OUT_DIR / name).read_text()
        fresh = (tmp_path / name).read_text()
        assert committed == fresh, f"agent/cri/pb/{name} is stale: run `python -m agent.cri.regen`"


def test_wire_names_match_cri_v1() -> None:
    """Method paths on the wire are /runtime.v1.<Service>/<Method>: the names must be upstream's."""
    services = {s.full_name: s for s in api_pb2.DESCRIPTOR.services_by_name.values()}
    assert set(services) == {"runtime.v1.RuntimeService", "runtime.v1.ImageService"}
    runtime = {m.name for m in services["runtime.v1.RuntimeService"].methods}
    for method in (
        "Version", "Status", "RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "PodSandboxStatus",
        "ListPodSandbox", "CreateContainer", "StartContainer", "StopContainer", "RemoveContainer",
        "ListContainers", "ContainerStatus", "ExecSync", "Exec", "Attach", "PortForward",
        "ReopenContainerLog", "ContainerStats", "ListContainerStats", "UpdateRuntimeConfig",
    ):  # fmt: skip
        assert method in runtime, method
    image = {m.name for m in services["runtime.v1.ImageService"].methods}
    assert image == {"ListImages", "ImageStatus", "PullImage", "RemoveImage", "ImageFsInfo"}


def test_field_numbers_of_key_messages() -> None:
    """Spot checks against upstream's numbering, including the out-of-order ones that are easy to get wrong."""

    def number(message: str, field: str) -> int:
        return api_pb2.DESCRIPTOR.message_types_by_name[message].fields_by_name[field].number

    assert number("LinuxSandboxSecurityContext", "run_as_group") == 8
    assert number("LinuxContainerSecurityContext", "run_as_group") == 12
    assert number("LinuxContainerSecurityContext", "no_new_privs") == 11
    assert number("ImageSpec", "user_specified_image") == 18
    assert number("PodSandboxConfig", "linux") == 8
    assert number("ContainerConfig", "linux") == 15
    assert number("ContainerStatus", "log_path") == 15
    assert number("Namespace", "options") == 2
    assert number("PullImageRequest", "sandbox_config") == 3
