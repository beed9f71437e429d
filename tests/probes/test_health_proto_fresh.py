"""The committed grpc.health.v1 modules must be exactly what protoc makes of the proto, and the proto
must keep the protocol's wire names and numbers (any health server in a pod answers to them)."""

from __future__ import annotations

from pathlib import Path

from agent.cri import regen
from agent.probes.pb import health_pb2


def test_generated_modules_are_fresh(tmp_path: Path) -> None:
    regen.generate(tmp_path, regen.HEALTH_PROTO)
    for name in regen.generated_names(regen.HEALTH_PROTO):
        committed = (regen.HEALTH_OUT_DIR / name).read_text()
        fresh = (tmp_path / name).read_text()
        assert committed == fresh, f"agent/probes/pb/{name} is stale: run `python -m agent.cri.regen`"


def test_wire_names_and_numbers_are_the_protocols() -> None:
    service = health_pb2.DESCRIPTOR.services_by_name["Health"]
    assert service.full_name == "grpc.health.v1.Health"
    methods = {m.name: m for m in service.methods}
    assert set(methods) == {"Check", "Watch"}
    assert not methods["Check"].server_streaming and methods["Watch"].server_streaming
    request = health_pb2.DESCRIPTOR.message_types_by_name["HealthCheckRequest"]
    assert request.full_name == "grpc.health.v1.HealthCheckRequest"
    assert request.fields_by_name["service"].number == 1
    response = health_pb2.DESCRIPTOR.message_types_by_name["HealthCheckResponse"]
    assert response.fields_by_name["status"].number == 1
    statuses = {v.name: v.number for v in response.enum_types_by_name["ServingStatus"].values}
    assert statuses == {"UNKNOWN": 0, "SERVING": 1, "NOT_SERVING": 2, "SERVICE_UNKNOWN": 3}
    # On the wire: field 1, varint.
    assert (
        health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.NOT_SERVING).SerializeToString()
        == b"\x08\x02"
    )
    assert health_pb2.HealthCheckRequest(service="a").SerializeToString() == b"\x0a\x01a"
