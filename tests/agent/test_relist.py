"""The PLEG-like relist wakes a pod's worker for a runtime change the worker has not looked at yet, and
only then: a state its own last inspection found (its own sandbox and container starts) costs no second
pass of the same reads and writes. CRI is a small in-memory stand-in here; the relist against containerd
runs in every stack test."""

from __future__ import annotations

from typing import Any

from agent.cri import pb
from agent.pods import labels as L
from agent.pods.manager import PodManager
from agent.pods.runtime import RuntimeInspector
from tests.agent.fakeruntime import FakeRuntime, fake_context


class MemoryCRI:
    """ListPodSandbox/ListContainers (with the label filter), PodSandboxStatus and ContainerStatus."""

    def __init__(self) -> None:
        self.sandboxes: list[pb.PodSandbox] = []
        self.containers: list[pb.Container] = []

    @staticmethod
    def _match(obj: Any, labels: dict[str, str] | None) -> bool:
        return all(obj.labels.get(k) == v for k, v in (labels or {}).items())

    async def list_pod_sandbox(self, labels: dict[str, str] | None = None, **_: Any) -> list[pb.PodSandbox]:
        return [sb for sb in self.sandboxes if self._match(sb, labels)]

    async def list_containers(self, labels: dict[str, str] | None = None, **_: Any) -> list[pb.Container]:
        return [c for c in self.containers if self._match(c, labels)]

    async def pod_sandbox_status(self, sandbox_id: str) -> pb.PodSandboxStatusResponse:
        return pb.PodSandboxStatusResponse(status=pb.PodSandboxStatus(id=sandbox_id))

    async def container_status(self, container_id: str) -> pb.ContainerStatusResponse:
        c = next(c for c in self.containers if c.id == container_id)
        return pb.ContainerStatusResponse(
            status=pb.ContainerStatus(id=c.id, metadata=c.metadata, state=c.state, labels=c.labels)
        )

    def add_sandbox(self, uid: str, sid: str) -> None:
        self.sandboxes.append(pb.PodSandbox(id=sid, state=pb.SANDBOX_READY, labels={L.POD_UID: uid}))

    def add_container(self, uid: str, sid: str, cid: str, state: int) -> None:
        self.containers.append(
            pb.Container(
                id=cid,
                pod_sandbox_id=sid,
                state=state,
                metadata=pb.ContainerMetadata(name="main"),
                labels={L.POD_UID: uid, L.CONTAINER_NAME: "main"},
            )
        )


class InspectingRuntime(FakeRuntime):
    """The fake runtime, but what the worker last saw is what a RuntimeInspector over the CRI saw."""

    def __init__(self, inspector: RuntimeInspector) -> None:
        super().__init__()
        self.inspector = inspector

    def observed(self, uid: str) -> Any:
        return self.inspector.observed(uid)


async def test_relist_wakes_a_worker_only_for_a_state_it_has_not_seen() -> None:
    cri = MemoryCRI()
    inspector = RuntimeInspector(cri)  # type: ignore[arg-type]
    ctx = fake_context(InspectingRuntime(inspector))
    ctx.cri = cri  # type: ignore[assignment]
    manager = PodManager(ctx)
    woken: list[str] = []

    class Worker:
        def __init__(self, uid: str) -> None:
            self.uid = uid

        def wake(self) -> None:
            woken.append(self.uid)

    manager.workers = {"a": Worker("a"), "b": Worker("b")}  # type: ignore[dict-item]
    for uid in ("a", "b"):
        cri.add_sandbox(uid, f"sb-{uid}")
        cri.add_container(uid, f"sb-{uid}", f"c-{uid}", pb.CONTAINER_RUNNING)
    # a's worker inspected after its starts (as its own next pass does); b's never looked
    await inspector.inspect("a")
    assert await manager.relist() == {"a", "b"}
    assert woken == ["b"]

    # a container that exits is news to the worker that saw it running
    woken.clear()
    cri.containers[0] = pb.Container(
        id="c-a",
        pod_sandbox_id="sb-a",
        state=pb.CONTAINER_EXITED,
        metadata=pb.ContainerMetadata(name="main"),
        labels={L.POD_UID: "a", L.CONTAINER_NAME: "main"},
    )
    assert await manager.relist() == {"a"}
    assert woken == ["a"]

    # everything of b gone after b's worker last saw it running: woken, to clean up or report
    woken.clear()
    await inspector.inspect("b")
    cri.sandboxes = [sb for sb in cri.sandboxes if sb.labels[L.POD_UID] != "b"]
    cri.containers = [c for c in cri.containers if c.labels[L.POD_UID] != "b"]
    assert await manager.relist() == {"b"}
    assert woken == ["b"]
    # ... and once its worker has looked at the empty state, nothing is left to remember of it
    await inspector.inspect("b")
    assert inspector.observed("b") is None
