"""An asyncio client for the CRI runtime.v1 RuntimeService and ImageService.

One grpc.aio channel per endpoint (the image service may live on its own socket, as upstream allows).
Every call has a deadline: the upstream kubelet's runtimeRequestTimeout (2 min) for calls that change
things, a short one for calls that only read state, so a wedged runtime shows up as a NotReady node
instead of a hung pod worker. Failures come out as the typed errors of `agent.cri.errors`.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from agent.cri.errors import (
    CRIError,
    ImagePullError,
    IncompatibleRuntimeError,
    RuntimeUnreachableError,
    from_rpc_error,
)
from agent.cri.pb import api_pb2 as pb
from agent.cri.pb import api_pb2_grpc as pb_grpc

# What we send as our API version in Version; the runtime answers with the version it serves.
KUBELET_CRI_VERSION = "0.1.0"
CRI_API_VERSION = "v1"
# Upstream's operation_type of each call (kuberuntime/instrumented_services.go), for the observer.
OPERATIONS = {
    "Version": "version",
    "Status": "status",
    "UpdateRuntimeConfig": "update_runtime_config",
    "RunPodSandbox": "run_podsandbox",
    "StopPodSandbox": "stop_podsandbox",
    "RemovePodSandbox": "remove_podsandbox",
    "PodSandboxStatus": "podsandbox_status",
    "ListPodSandbox": "list_podsandbox",
    "CreateContainer": "create_container",
    "StartContainer": "start_container",
    "StopContainer": "stop_container",
    "RemoveContainer": "remove_container",
    "ListContainers": "list_containers",
    "ContainerStatus": "container_status",
    "UpdateContainerResources": "update_container",
    "ReopenContainerLog": "reopen_container_log",
    "ExecSync": "exec_sync",
    "Exec": "exec",
    "Attach": "attach",
    "PortForward": "port_forward",
    "ContainerStats": "container_stats",
    "ListContainerStats": "list_container_stats",
    "PodSandboxStats": "podsandbox_stats",
    "ListPodSandboxStats": "list_podsandbox_stats",
    "PullImage": "pull_image",
    "ImageStatus": "image_status",
    "ListImages": "list_images",
    "RemoveImage": "remove_image",
    "ImageFsInfo": "image_fs_info",
}
# Told of every call: (operation_type, seconds, failed); the kubelet's runtime operation metrics.
Observer = Callable[[str, float, bool], None]
# Upstream caps CRI messages at 16 MiB (ListContainers on a busy node can be large).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Timeouts:
    """Deadlines in seconds."""

    connect: float = 5.0
    # Calls that create, start, stop or remove things (upstream runtimeRequestTimeout).
    mutate: float = 120.0
    # Calls that only read state: they should be quick, and a slow one means the runtime is in trouble.
    status: float = 10.0
    # PullImage has no deadline of its own upstream (it is watched for progress); bound it anyway.
    pull: float = 600.0


@dataclass(frozen=True)
class RuntimeVersion:
    runtime_name: str
    runtime_version: str
    runtime_api_version: str


@dataclass(frozen=True)
class ExecResult:
    stdout: bytes
    stderr: bytes
    exit_code: int


def socket_path(endpoint: str) -> str | None:
    """The filesystem path of a unix:// endpoint, or None for other schemes."""
    if endpoint.startswith("unix://"):
        return endpoint[len("unix://") :] or None
    if endpoint.startswith("/"):
        return endpoint
    return None


def _target(endpoint: str) -> str:
    path = socket_path(endpoint)
    return f"unix://{path}" if path else endpoint


def _channel(endpoint: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(
        _target(endpoint),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # A restarted containerd should be found again quickly.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 2000),
        ],
    )


class CRIClient:
    """RuntimeService and ImageService calls. Use `await CRIClient.connect(endpoint)`."""

    def __init__(
        self,
        endpoint: str,
        image_endpoint: str | None = None,
        timeouts: Timeouts | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.image_endpoint = image_endpoint or endpoint
        self.timeouts = timeouts or Timeouts()
        self._channel = _channel(endpoint)
        self._image_channel = (
            self._channel if self.image_endpoint == endpoint else _channel(self.image_endpoint)
        )
        self._rt = pb_grpc.RuntimeServiceStub(self._channel)
        self._img = pb_grpc.ImageServiceStub(self._image_channel)
        self.version: RuntimeVersion | None = None
        self.observer: Observer | None = None

    @classmethod
    async def connect(
        cls,
        endpoint: str,
        image_endpoint: str | None = None,
        timeouts: Timeouts | None = None,
    ) -> CRIClient:
        """Open the channels and check that the runtime answers and speaks runtime.v1."""
        client = cls(endpoint, image_endpoint, timeouts)
        try:
            await client.check_version()
        except BaseException:
            await client.close()
            raise
        return client

    async def check_version(self) -> RuntimeVersion:
        for endpoint in {self.endpoint, self.image_endpoint}:
            path = socket_path(endpoint)
            # A stat of a local path: cheap, and it gives a clearer error than gRPC's.
            if path is not None and not os.path.exists(path):  # noqa: ASYNC240
                raise RuntimeUnreachableError(endpoint, f"no socket at {path}")
        try:
            resp = await self._rt.Version(
                pb.VersionRequest(version=KUBELET_CRI_VERSION), timeout=self.timeouts.connect
            )
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise IncompatibleRuntimeError(
                    f"runtime at {self.endpoint} does not serve CRI {CRI_API_VERSION}: {err.details()}"
                ) from None
            raise RuntimeUnreachableError(self.endpoint, f"{err.code().name}: {err.details()}") from None
        if resp.runtime_api_version != CRI_API_VERSION:
            raise IncompatibleRuntimeError(
                f"runtime at {self.endpoint} serves CRI {resp.runtime_api_version!r}, "
                f"pykubelet needs {CRI_API_VERSION!r}"
            )
        self.version = RuntimeVersion(resp.runtime_name, resp.runtime_version, resp.runtime_api_version)
        return self.version

    async def close(self) -> None:
        await self._channel.close()
        if self._image_channel is not self._channel:
            await self._image_channel.close()

    async def __aenter__(self) -> CRIClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(
        self, rpc: Any, request: Any, method: str, deadline: float | None, subject: str = ""
    ) -> Any:
        started = time.monotonic()
        failed = True
        try:
            resp = await rpc(request, timeout=deadline)
            failed = False
            return resp
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(method, err, subject) from None
        finally:
            self._observe(method, started, failed)

    def _observe(self, method: str, started: float, failed: bool) -> None:
        if self.observer is not None:
            self.observer(OPERATIONS.get(method, method.lower()), time.monotonic() - started, failed)

    # -- runtime ---------------------------------------------------------------------------------

    async def status(self, verbose: bool = False) -> pb.StatusResponse:
        return await self._call(
            self._rt.Status, pb.StatusRequest(verbose=verbose), "Status", self.timeouts.status
        )

    async def update_runtime_config(self, pod_cidr: str) -> None:
        req = pb.UpdateRuntimeConfigRequest(
            runtime_config=pb.RuntimeConfig(network_config=pb.NetworkConfig(pod_cidr=pod_cidr))
        )
        await self._call(self._rt.UpdateRuntimeConfig, req, "UpdateRuntimeConfig", self.timeouts.mutate)

    # -- sandboxes -------------------------------------------------------------------------------

    async def run_pod_sandbox(self, config: pb.PodSandboxConfig, runtime_handler: str = "") -> str:
        req = pb.RunPodSandboxRequest(config=config, runtime_handler=runtime_handler)
        subject = f"pod {config.metadata.namespace}/{config.metadata.name}"
        resp = await self._call(self._rt.RunPodSandbox, req, "RunPodSandbox", self.timeouts.mutate, subject)
        return resp.pod_sandbox_id

    async def stop_pod_sandbox(self, sandbox_id: str) -> None:
        req = pb.StopPodSandboxRequest(pod_sandbox_id=sandbox_id)
        await self._call(self._rt.StopPodSandbox, req, "StopPodSandbox", self.timeouts.mutate, sandbox_id)

    async def remove_pod_sandbox(self, sandbox_id: str) -> None:
        req = pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id)
        await self._call(self._rt.RemovePodSandbox, req, "RemovePodSandbox", self.timeouts.mutate, sandbox_id)

    async def pod_sandbox_status(self, sandbox_id: str, verbose: bool = False) -> pb.PodSandboxStatusResponse:
        req = pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=verbose)
        return await self._call(
            self._rt.PodSandboxStatus, req, "PodSandboxStatus", self.timeouts.status, sandbox_id
        )

    async def list_pod_sandbox(
        self,
        *,
        sandbox_id: str = "",
        state: int | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[pb.PodSandbox]:
        flt = pb.PodSandboxFilter(id=sandbox_id, label_selector=dict(labels or {}))
        if state is not None:
            flt.state.state = state
        resp = await self._call(
            self._rt.ListPodSandbox,
            pb.ListPodSandboxRequest(filter=flt),
            "ListPodSandbox",
            self.timeouts.status,
        )
        return list(resp.items)

    # -- containers ------------------------------------------------------------------------------

    async def create_container(
        self, sandbox_id: str, config: pb.ContainerConfig, sandbox_config: pb.PodSandboxConfig
    ) -> str:
        req = pb.CreateContainerRequest(
            pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox_config
        )
        subject = f"container {config.metadata.name!r} in {sandbox_id[:13]}"
        resp = await self._call(
            self._rt.CreateContainer, req, "CreateContainer", self.timeouts.mutate, subject
        )
        return resp.container_id

    async def start_container(self, container_id: str) -> None:
        req = pb.StartContainerRequest(container_id=container_id)
        await self._call(self._rt.StartContainer, req, "StartContainer", self.timeouts.mutate, container_id)

    async def stop_container(self, container_id: str, grace_seconds: int) -> None:
        """Stop with that much grace before SIGKILL; the deadline covers the grace plus the usual margin."""
        req = pb.StopContainerRequest(container_id=container_id, timeout=grace_seconds)
        deadline = self.timeouts.mutate + max(grace_seconds, 0)
        await self._call(self._rt.StopContainer, req, "StopContainer", deadline, container_id)

    async def remove_container(self, container_id: str) -> None:
        req = pb.RemoveContainerRequest(container_id=container_id)
        await self._call(self._rt.RemoveContainer, req, "RemoveContainer", self.timeouts.mutate, container_id)

    async def list_containers(
        self,
        *,
        container_id: str = "",
        sandbox_id: str = "",
        state: int | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[pb.Container]:
        flt = pb.ContainerFilter(
            id=container_id, pod_sandbox_id=sandbox_id, label_selector=dict(labels or {})
        )
        if state is not None:
            flt.state.state = state
        resp = await self._call(
            self._rt.ListContainers,
            pb.ListContainersRequest(filter=flt),
            "ListContainers",
            self.timeouts.status,
        )
        return list(resp.containers)

    async def container_status(self, container_id: str, verbose: bool = False) -> pb.ContainerStatusResponse:
        req = pb.ContainerStatusRequest(container_id=container_id, verbose=verbose)
        return await self._call(
            self._rt.ContainerStatus, req, "ContainerStatus", self.timeouts.status, container_id
        )

    async def update_container_resources(
        self, container_id: str, resources: pb.LinuxContainerResources
    ) -> None:
        req = pb.UpdateContainerResourcesRequest(container_id=container_id, linux=resources)
        await self._call(
            self._rt.UpdateContainerResources,
            req,
            "UpdateContainerResources",
            self.timeouts.mutate,
            container_id,
        )

    async def reopen_container_log(self, container_id: str) -> None:
        req = pb.ReopenContainerLogRequest(container_id=container_id)
        await self._call(
            self._rt.ReopenContainerLog, req, "ReopenContainerLog", self.timeouts.mutate, container_id
        )

    # -- exec and streaming ----------------------------------------------------------------------

    async def exec_sync(self, container_id: str, cmd: Sequence[str], timeout_seconds: int = 0) -> ExecResult:
        """Run cmd in the container. The runtime enforces `timeout_seconds` (0 = none); the gRPC
        deadline adds the usual margin on top, as upstream does, so the runtime's answer wins."""
        req = pb.ExecSyncRequest(container_id=container_id, cmd=list(cmd), timeout=timeout_seconds)
        deadline = self.timeouts.mutate + timeout_seconds if timeout_seconds > 0 else None
        resp = await self._call(self._rt.ExecSync, req, "ExecSync", deadline, container_id)
        return ExecResult(resp.stdout, resp.stderr, resp.exit_code)

    async def exec(
        self,
        container_id: str,
        cmd: Sequence[str],
        *,
        tty: bool = False,
        stdin: bool = False,
        stdout: bool = True,
        stderr: bool = True,
    ) -> str:
        """The URL of the runtime's streaming server for this exec session."""
        req = pb.ExecRequest(
            container_id=container_id,
            cmd=list(cmd),
            tty=tty,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr and not tty,
        )
        resp = await self._call(self._rt.Exec, req, "Exec", self.timeouts.mutate, container_id)
        return resp.url

    async def attach(
        self,
        container_id: str,
        *,
        tty: bool = False,
        stdin: bool = False,
        stdout: bool = True,
        stderr: bool = True,
    ) -> str:
        req = pb.AttachRequest(
            container_id=container_id, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr and not tty
        )
        resp = await self._call(self._rt.Attach, req, "Attach", self.timeouts.mutate, container_id)
        return resp.url

    async def port_forward(self, sandbox_id: str, ports: Sequence[int] = ()) -> str:
        req = pb.PortForwardRequest(pod_sandbox_id=sandbox_id, port=list(ports))
        resp = await self._call(self._rt.PortForward, req, "PortForward", self.timeouts.mutate, sandbox_id)
        return resp.url

    async def container_events(self) -> AsyncIterator[pb.ContainerEventResponse]:
        """Container lifecycle events pushed by the runtime. Raises UnimplementedError on runtimes that
        do not offer them (containerd 1.6), in which case callers relist instead."""
        call = self._rt.GetContainerEvents(pb.GetEventsRequest())
        try:
            async for event in call:
                yield event
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error("GetContainerEvents", err) from None
        finally:
            call.cancel()

    # -- stats -----------------------------------------------------------------------------------

    async def container_stats(self, container_id: str) -> pb.ContainerStats:
        req = pb.ContainerStatsRequest(container_id=container_id)
        resp = await self._call(
            self._rt.ContainerStats, req, "ContainerStats", self.timeouts.status, container_id
        )
        return resp.stats

    async def list_container_stats(
        self, *, container_id: str = "", sandbox_id: str = "", labels: Mapping[str, str] | None = None
    ) -> list[pb.ContainerStats]:
        flt = pb.ContainerStatsFilter(
            id=container_id, pod_sandbox_id=sandbox_id, label_selector=dict(labels or {})
        )
        resp = await self._call(
            self._rt.ListContainerStats,
            pb.ListContainerStatsRequest(filter=flt),
            "ListContainerStats",
            self.timeouts.status,
        )
        return list(resp.stats)

    async def pod_sandbox_stats(self, sandbox_id: str) -> pb.PodSandboxStats:
        req = pb.PodSandboxStatsRequest(pod_sandbox_id=sandbox_id)
        resp = await self._call(
            self._rt.PodSandboxStats, req, "PodSandboxStats", self.timeouts.status, sandbox_id
        )
        return resp.stats

    async def list_pod_sandbox_stats(self) -> list[pb.PodSandboxStats]:
        resp = await self._call(
            self._rt.ListPodSandboxStats,
            pb.ListPodSandboxStatsRequest(filter=pb.PodSandboxStatsFilter()),
            "ListPodSandboxStats",
            self.timeouts.status,
        )
        return list(resp.stats)

    # -- images ----------------------------------------------------------------------------------

    async def pull_image(
        self,
        image: str,
        auth: pb.AuthConfig | None = None,
        sandbox_config: pb.PodSandboxConfig | None = None,
    ) -> str:
        """Pull and return the image reference the runtime recorded (its image ID)."""
        req = pb.PullImageRequest(image=pb.ImageSpec(image=image), auth=auth, sandbox_config=sandbox_config)
        started = time.monotonic()
        try:
            resp = await self._img.PullImage(req, timeout=self.timeouts.pull)
        except grpc.aio.AioRpcError as err:
            self._observe("PullImage", started, True)
            raise ImagePullError(image, err.code(), err.details() or "") from None
        self._observe("PullImage", started, False)
        return resp.image_ref

    async def image_status(self, image: str) -> pb.Image | None:
        """The image if the runtime has it, else None (CRI answers with an empty image, not an error)."""
        req = pb.ImageStatusRequest(image=pb.ImageSpec(image=image))
        resp = await self._call(self._img.ImageStatus, req, "ImageStatus", self.timeouts.status, image)
        return resp.image if resp.HasField("image") else None

    async def list_images(self, image: str = "") -> list[pb.Image]:
        req = pb.ListImagesRequest(filter=pb.ImageFilter(image=pb.ImageSpec(image=image)) if image else None)
        resp = await self._call(self._img.ListImages, req, "ListImages", self.timeouts.status)
        return list(resp.images)

    async def remove_image(self, image: str) -> None:
        req = pb.RemoveImageRequest(image=pb.ImageSpec(image=image))
        await self._call(self._img.RemoveImage, req, "RemoveImage", self.timeouts.mutate, image)

    async def image_fs_info(self) -> pb.ImageFsInfoResponse:
        return await self._call(
            self._img.ImageFsInfo, pb.ImageFsInfoRequest(), "ImageFsInfo", self.timeouts.status
        )


def runtime_condition(status: pb.StatusResponse, condition: str) -> pb.RuntimeCondition | None:
    """The named condition (RuntimeReady, NetworkReady) from a Status answer."""
    for cond in status.status.conditions:
        if cond.type == condition:
            return cond
    return None


__all__ = [
    "CRIClient",
    "CRIError",
    "ExecResult",
    "RuntimeVersion",
    "Timeouts",
    "runtime_condition",
    "socket_path",
]
