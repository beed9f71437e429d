"""gRPC failures become typed errors that name the call and its subject."""

from __future__ import annotations

import grpc
import pytest

from agent.cri import errors


class FakeRpcError(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (grpc.StatusCode.NOT_FOUND, errors.NotFoundError),
        (grpc.StatusCode.ALREADY_EXISTS, errors.AlreadyExistsError),
        (grpc.StatusCode.INVALID_ARGUMENT, errors.InvalidArgumentError),
        (grpc.StatusCode.DEADLINE_EXCEEDED, errors.DeadlineExceededError),
        (grpc.StatusCode.UNIMPLEMENTED, errors.UnimplementedError),
        (grpc.StatusCode.UNAVAILABLE, errors.RuntimeUnavailableError),
        (grpc.StatusCode.INTERNAL, errors.CRIError),
    ],
)
def test_status_codes_map_to_types(code: grpc.StatusCode, cls: type) -> None:
    err = errors.from_rpc_error("ContainerStatus", FakeRpcError(code, "boom"), "abc123")
    assert type(err) is cls
    assert isinstance(err, errors.CRIError)
    assert err.code == code
    assert str(err) == f"ContainerStatus abc123: rpc error: code = {errors.go_code(code)} desc = boom"
    assert err.rpc_text == f"rpc error: code = {errors.go_code(code)} desc = boom"


def test_image_pull_error_keeps_registry_reason() -> None:
    err = errors.ImagePullError("busybox:nope", grpc.StatusCode.NOT_FOUND, "failed to resolve: not found")
    assert err.image == "busybox:nope"
    assert "not found" in err.details
    assert "PullImage image 'busybox:nope'" in str(err)


def test_unreachable_message_names_endpoint_and_cause() -> None:
    err = errors.RuntimeUnreachableError("unix:///x.sock", "no socket at /x.sock")
    assert str(err) == "container runtime not reachable at unix:///x.sock: no socket at /x.sock"


def test_codes_print_as_go_spells_them() -> None:
    """Events and messages quote CRI errors as Go's gRPC status does (upstream's texts)."""
    assert [
        errors.go_code(c)
        for c in (
            grpc.StatusCode.NOT_FOUND,
            grpc.StatusCode.UNKNOWN,
            grpc.StatusCode.OK,
            grpc.StatusCode.CANCELLED,
            grpc.StatusCode.DEADLINE_EXCEEDED,
            None,
        )
    ] == ["NotFound", "Unknown", "OK", "Canceled", "DeadlineExceeded", "Unknown"]
