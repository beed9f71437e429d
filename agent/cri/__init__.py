"""CRI runtime.v1 access for the agent: an asyncio client, typed errors and CRI log parsing.

This layer knows containerd's protocol and nothing of pods as Kubernetes objects; it must never import
`agent.pods` (enforced by the import-linter contract in pyproject.toml).
"""

from agent.cri.client import CRIClient, ExecResult, RuntimeVersion, Timeouts, runtime_condition
from agent.cri.errors import (
    AlreadyExistsError,
    CRIError,
    DeadlineExceededError,
    ImagePullError,
    IncompatibleRuntimeError,
    InvalidArgumentError,
    NotFoundError,
    RuntimeUnavailableError,
    RuntimeUnreachableError,
    UnimplementedError,
    go_code,
)
from agent.cri.pb import api_pb2 as pb

__all__ = [
    "AlreadyExistsError",
    "CRIClient",
    "CRIError",
    "DeadlineExceededError",
    "ExecResult",
    "ImagePullError",
    "IncompatibleRuntimeError",
    "InvalidArgumentError",
    "NotFoundError",
    "RuntimeUnavailableError",
    "RuntimeUnreachableError",
    "RuntimeVersion",
    "Timeouts",
    "UnimplementedError",
    "go_code",
    "pb",
    "runtime_condition",
]
