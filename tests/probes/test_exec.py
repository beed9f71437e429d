"""exec handler against the real containerd: output, exit codes, the runtime's timeout and our own
bound on a runtime that never answers, and a container that is gone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.cri import CRIClient, NotFoundError, pb
from agent.probes.exec import exec_probe
from agent.probes.handlers import run_handler
from agent.probes.result import Result, Target
from pykubelet.rig.containerd import Containerd
from pykubelet.rig.cripod import pod_sandbox_config
from pykubelet.rig.images import RigImages

pytestmark = pytest.mark.integration


def _container(name: str, image: str, sandbox: pb.PodSandboxConfig) -> pb.ContainerConfig:
    labels = dict(sandbox.labels)
    labels["io.kubernetes.container.name"] = name
    return pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name, attempt=0),
        image=pb.ImageSpec(image=image),
        command=["sleep", "3600"],
        log_path=f"{name}/0.log",
        labels=labels,
    )


@pytest.fixture(scope="module")
async def pod(
    containerd: Containerd, test_images: RigImages, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[CRIClient, str, str]]:
    """A sandbox with a running busybox container; yields (cri, sandbox id, container id)."""
    log_dir: Path = tmp_path_factory.mktemp("probe-exec-logs")
    async with await CRIClient.connect(containerd.endpoint) as cri:
        await cri.pull_image(test_images.busybox)
        sandbox = pod_sandbox_config("probe-exec", "default", log_dir)
        sandbox_id = await cri.run_pod_sandbox(sandbox)
        try:
            container_id = await cri.create_container(
                sandbox_id, _container("main", test_images.busybox, sandbox), sandbox
            )
            await cri.start_container(container_id)
            yield cri, sandbox_id, container_id
        finally:
            await cri.stop_pod_sandbox(sandbox_id)
            await cri.remove_pod_sandbox(sandbox_id)


async def test_exit_zero_is_success_with_stdout_then_stderr(pod) -> None:
    cri, _, container_id = pod
    outcome = await exec_probe(cri, container_id, ["sh", "-c", "echo out; echo err >&2"], 1)
    assert (outcome.result, outcome.output) == (Result.SUCCESS, "out\nerr\n")


async def test_non_zero_exit_is_failure_with_its_output(pod) -> None:
    cri, _, container_id = pod
    outcome = await exec_probe(cri, container_id, ["sh", "-c", "echo not ready; exit 3"], 1)
    assert (outcome.result, outcome.output) == (Result.FAILURE, "not ready\n")


async def test_output_is_cut_at_10_kib(pod) -> None:
    cri, _, container_id = pod
    outcome = await exec_probe(cri, container_id, ["sh", "-c", "head -c 20000 /dev/zero | tr '\\0' x"], 5)
    assert outcome.result is Result.SUCCESS
    assert outcome.output == "x" * 10240


async def test_runtime_timeout_is_failure_with_upstreams_message(pod) -> None:
    cri, _, container_id = pod
    started = time.monotonic()
    outcome = await exec_probe(cri, container_id, ["sleep", "5"], 1)
    elapsed = time.monotonic() - started
    assert outcome.result is Result.FAILURE
    assert outcome.output == 'command timed out: "sleep 5" timed out after 1s'
    assert elapsed < 2.5, f"took {elapsed:.2f} s"


async def test_fractional_timeout_goes_to_cri_rounded_up(pod) -> None:
    cri, _, container_id = pod
    outcome = await exec_probe(cri, container_id, ["sh", "-c", "sleep 1.3; echo done"], 1.2)
    assert (outcome.result, outcome.output) == (Result.SUCCESS, "done\n")


async def test_removed_container_is_unknown(pod, test_images: RigImages) -> None:
    cri, sandbox_id, _ = pod
    sandbox = (await cri.pod_sandbox_status(sandbox_id)).status
    config = pod_sandbox_config("probe-exec", "default", Path("/tmp"))
    config.metadata.uid = sandbox.metadata.uid
    gone = await cri.create_container(sandbox_id, _container("gone", test_images.busybox, config), config)
    await cri.remove_container(gone)
    with pytest.raises(NotFoundError):
        await cri.container_status(gone)
    outcome = await exec_probe(cri, gone, ["true"], 1)
    assert outcome.result is Result.UNKNOWN
    assert outcome.output.startswith("rpc error: code = NotFound desc = ")


async def test_dispatcher_runs_exec_in_the_target_container(pod) -> None:
    cri, _, container_id = pod
    action = {"exec": {"command": ["cat", "/etc/hostname"]}}
    outcome = await run_handler(action, Target("10.0.0.1", container_id), 1, cri, "kube-probe/1.32")
    assert (outcome.result, outcome.output) == (Result.SUCCESS, "probe-exec\n")


async def test_a_runtime_that_never_answers_is_cut_off_by_our_own_bound(tmp_path: Path) -> None:
    """A socket that accepts and then says nothing: the ExecSync call would wait for its 2-minute
    deadline; the probe gives up at its timeout plus the margin."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    path = tmp_path / "silent.sock"
    server = await asyncio.start_unix_server(hold, path=str(path))
    try:
        async with CRIClient(f"unix://{path}") as cri:
            started = time.monotonic()
            outcome = await exec_probe(cri, "abc", ["true"], 1)
            elapsed = time.monotonic() - started
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    assert outcome.result is Result.FAILURE
    assert outcome.output == 'command timed out: "true" timed out after 1s'
    assert 2.5 < elapsed < 4.5
