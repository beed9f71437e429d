"""Typed errors for CRI calls.

The pod workers decide what to do from the kind of failure (a missing container is not a dead runtime),
so gRPC status codes are turned into exception classes once, here, and every error names the call and
the object it was about.
"""

from __future__ import annotations

import grpc


def go_code(code: grpc.StatusCode | None) -> str:
    """A gRPC status code as Go's codes.Code prints it: NOT_FOUND -> NotFound, CANCELLED -> Canceled."""
    if code is None:
        return "Unknown"
    special = {"OK": "OK", "CANCELLED": "Canceled"}
    return special.get(code.name) or "".join(word.capitalize() for word in code.name.split("_"))


class CRIError(Exception):
    """A CRI call failed. `code` is the gRPC status code, `details` the runtime's own message."""

    def __init__(self, method: str, code: grpc.StatusCode | None, details: str, subject: str = "") -> None:
        self.method = method
        self.code = code
        self.details = details
        self.subject = subject
        about = f" {subject}" if subject else ""
        super().__init__(f"{method}{about}: {self.rpc_text}")

    @property
    def rpc_text(self) -> str:
        """The error as upstream's events and messages show it (Go's gRPC status text), without the
        call and object this error names for the agent's own log: `rpc error: code = NotFound desc = ...`."""
        return f"rpc error: code = {go_code(self.code)} desc = {self.details}"


class NotFoundError(CRIError):
    """The sandbox, container or image does not exist (any more)."""


class AlreadyExistsError(CRIError):
    """A sandbox or container with that name already exists."""


class InvalidArgumentError(CRIError):
    """The runtime rejected the request as malformed."""


class DeadlineExceededError(CRIError):
    """The call did not finish within its deadline."""


class UnimplementedError(CRIError):
    """The runtime does not serve this RPC (for example GetContainerEvents on containerd 1.6)."""


class RuntimeUnavailableError(CRIError):
    """The runtime's socket did not answer; the node should go NotReady, not crash."""


class RuntimeUnreachableError(Exception):
    """Connecting to the runtime failed: the socket is missing, refused, or never answered."""

    def __init__(self, endpoint: str, cause: str) -> None:
        self.endpoint = endpoint
        self.cause = cause
        super().__init__(f"container runtime not reachable at {endpoint}: {cause}")


class IncompatibleRuntimeError(Exception):
    """The runtime answered but does not speak CRI runtime.v1."""


class ImagePullError(CRIError):
    """PullImage failed; `details` carries the registry's reason for the ErrImagePull status."""

    def __init__(self, image: str, code: grpc.StatusCode | None, details: str) -> None:
        self.image = image
        super().__init__("PullImage", code, details, subject=f"image {image!r}")


_BY_CODE: dict[grpc.StatusCode, type[CRIError]] = {
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.UNAVAILABLE: RuntimeUnavailableError,
}


def from_rpc_error(method: str, err: grpc.aio.AioRpcError, subject: str = "") -> CRIError:
    """The typed exception for a failed call."""
    code = err.code()
    cls = _BY_CODE.get(code, CRIError)
    return cls(method, code, err.details() or "", subject)
