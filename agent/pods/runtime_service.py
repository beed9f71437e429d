"""The small runtime protocol the pod workers act through, so everything above it (the decisions, the
sync, terminating and terminated phases, kills with their grace periods and hooks) runs against a fake
runtime in unit tests and against containerd in the agent (agent/pods/cri_runtime.py).

Each call is one step a user could name: inspect the pod, make or stop a sandbox, start a container
(image, config, create, start), stop or remove one, run a lifecycle hook. What a failed step means for
the pod's status travels in the exceptions: the waiting reason and message upstream shows.
"""

from __future__ import annotations

from typing import Any, Protocol

from agent.pods.runtime import ContainerRecord, Fingerprint, PodRuntime, SandboxRecord


class SandboxError(Exception):
    """RunPodSandbox failed; `message` is what follows `Failed to create pod sandbox: ` in the event."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class StartError(Exception):
    """A container could not be started; `reason` and `message` are its waiting state (ErrImagePull,
    CreateContainerConfigError, RunContainerError, ...); `retry_in` says when trying again is worth it."""

    def __init__(self, reason: str, message: str, retry_in: float = 5.0) -> None:
        self.reason = reason
        self.message = message
        self.retry_in = retry_in
        super().__init__(f"{reason}: {message}")


class RuntimeService(Protocol):
    runtime_name: str

    async def pod_state(self, uid: str) -> PodRuntime:
        """The pod's sandboxes and containers, newest first."""
        ...

    def observed(self, uid: str) -> Fingerprint | None:
        """The pod's sandbox and container IDs with their states as `pod_state` last saw them (None:
        none, or not known), so the relist wakes a worker only for a change it has not looked at yet."""
        ...

    async def prepare_volumes(self, pod: dict[str, Any]) -> bool:
        """Make the pod's volumes ready; False (with a FailedMount event) when one is not."""
        ...

    async def refresh_volumes(self, pod: dict[str, Any]) -> float:
        """Rewrite the volumes whose service-account token is due (upstream remounts them on its
        periodic sync); seconds until the next one is due (inf: none)."""
        ...

    async def local_storage_exceeded(self, pod: dict[str, Any]) -> str | None:
        """The eviction message when a disk emptyDir of the pod uses more than its sizeLimit, else None."""
        ...

    async def run_sandbox(self, pod: dict[str, Any], attempt: int) -> SandboxRecord:
        """Create and start the pod's sandbox (raises SandboxError)."""
        ...

    async def stop_sandbox(self, sandbox_id: str) -> None: ...

    async def remove_sandbox(self, sandbox_id: str) -> None: ...

    async def start_container(
        self,
        pod: dict[str, Any],
        container: dict[str, Any],
        kind: str,
        sandbox: SandboxRecord,
        restart_count: int,
    ) -> str:
        """Image, config, CreateContainer, StartContainer, with the Pulling/Pulled/Created/Started/Failed
        events; the new container's ID (raises StartError)."""
        ...

    async def stop_container(self, container_id: str, grace: int) -> None:
        """StopContainer: SIGTERM, SIGKILL after `grace` seconds. A container already gone is no error."""
        ...

    async def remove_container(self, record: ContainerRecord) -> None:
        """RemoveContainer, with the container's log files (upstream's container GC and log manager)."""
        ...

    async def run_hook(
        self,
        pod: dict[str, Any],
        container: dict[str, Any],
        container_id: str,
        handler: dict[str, Any],
        pod_ip: str,
        budget: float = 0,
    ) -> str | None:
        """Run a postStart/preStop handler (an exec one bounded by `budget` seconds in the runtime, 0 for
        none); None when it worked, else upstream's failure message."""
        ...

    async def logged_restarts(self, pod: dict[str, Any], name: str) -> int:
        """The restart count the container's log directory implies, for a container the runtime has no
        record of (upstream's calcRestartCountByLogDir: the highest <n>.log plus one)."""
        ...

    async def release_volumes(self, uid: str) -> None:
        """Unmount what the pod's volumes mounted (a memory emptyDir's tmpfs) once nothing of the pod
        runs, as upstream's volume manager does for a terminated pod."""
        ...

    async def remove_pod_files(self, uid: str, pod: dict[str, Any] | None) -> None:
        """What a removed pod left on the host: its folder under the root dir, its log folder, its cgroups."""
        ...
