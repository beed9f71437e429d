"""The controller's sync loop without a server: a change is synced into nginx while the Lease holder's
status writes of the previous sync are still under way (at 1 000 Ingresses those writes held the next
change for seconds), the writes then use the object as cached now and the newest hand-over only, and a
change after a quiet spell is synced without the coalescing wait. The client and nginx are stand-ins
here; the real API server and nginx drive the same paths in test_ingress_controller_integration.py and
bench/ingress/routes.py."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import pytest

from ingresscontroller import manifest
from ingresscontroller.controller import COALESCE, ControllerConfig, IngressController, settle_delay
from ingresscontroller.nginxconf import Listen
from ingresscontroller.statuswork import StatusWork

INGRESS = "web/site"


class _HeldStatusClient:
    """Status PUTs wait until released; what they sent is kept."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.bodies: list[dict[str, Any]] = []

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.entered.set()
        await self.release.wait()
        self.bodies.append(body)
        return body


class _Nginx:
    running = True

    def __init__(self) -> None:
        self.applied: list[str] = []

    async def apply(self, text: str) -> None:
        self.applied.append(text)


def _ingress(path: str, version: str) -> dict[str, Any]:
    backend = {"service": {"name": "site", "port": {"number": 80}}}
    return {
        "metadata": {
            "name": "site",
            "namespace": "web",
            "resourceVersion": version,
            "generation": int(version),
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "ingressClassName": manifest.CLASS,
            "rules": [
                {
                    "host": "site.example",
                    "http": {"paths": [{"path": path, "pathType": "Exact", "backend": backend}]},
                }
            ],
        },
    }


def _controller(client: object, state_dir: Path) -> IngressController:
    config = ControllerConfig(
        controller_name=manifest.CONTROLLER,
        state_dir=state_dir,
        listen=Listen("127.0.0.1", 18080, 18443),
        publish_address="192.0.2.10",
    )
    return IngressController(client, config)  # type: ignore[arg-type]


async def test_a_change_is_synced_while_the_previous_status_writes_wait(tmp_path: Path) -> None:
    client = _HeldStatusClient()
    controller = _controller(client, tmp_path)
    nginx = _Nginx()
    controller.nginx = nginx  # type: ignore[assignment]
    controller.leading = True
    controller.classes.store[manifest.CLASS] = manifest.ingress_class()
    controller.ingresses.store[INGRESS] = _ingress("/old", "1")
    writes = asyncio.create_task(controller.status_work.run())
    try:
        await asyncio.wait_for(controller.sync(), 10)
        await asyncio.wait_for(client.entered.wait(), 10)  # the status PUT is under way, and held
        controller.ingresses.store[INGRESS] = _ingress("/new", "2")  # a change comes meanwhile
        await asyncio.wait_for(controller.sync(), 10)  # synced without waiting for that PUT
        assert len(nginx.applied) == 2 and 'location = "/new"' in nginx.applied[1]
        assert client.bodies == []
        controller.ingresses.store[INGRESS] = _ingress("/new", "3")  # written by someone since
        client.release.set()
        await asyncio.wait_for(controller.status_work.idle(), 10)
    finally:
        writes.cancel()
        await asyncio.gather(writes, return_exceptions=True)
    # The held PUT went out as it began; the next carries the object as cached when it is written, not
    # as the sync saw it (no stale resourceVersion, so no conflict).
    assert [b["metadata"]["resourceVersion"] for b in client.bodies] == ["1", "3"]
    assert {b["status"]["loadBalancer"]["ingress"][0]["ip"] for b in client.bodies} == {"192.0.2.10"}


async def test_status_work_writes_the_newest_hand_over_and_no_stale_one() -> None:
    release, taken = asyncio.Event(), asyncio.Event()
    written: list[int] = []

    async def write(item: int) -> None:
        taken.set()
        await release.wait()
        written.append(item)

    work: StatusWork[int] = StatusWork(write)
    runner = asyncio.create_task(work.run())
    try:
        work.hand_over(1)
        await asyncio.wait_for(taken.wait(), 10)  # the writer took 1 and waits
        for item in (2, 3, 4):  # handed over while 1 is written: only the newest is
            work.hand_over(item)
        release.set()
        await asyncio.wait_for(work.idle(), 10)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    assert written == [1, 4] and work.passes == 2


def test_a_change_after_a_quiet_spell_is_synced_at_once() -> None:
    assert settle_delay(last_sync_end=100.0, now=101.0) == 0.0
    assert settle_delay(last_sync_end=100.0, now=100.0) == pytest.approx(
        COALESCE
    )  # right after a sync: a burst's rest
    assert 0.0 < settle_delay(last_sync_end=100.0, now=100.0 + COALESCE / 2) < COALESCE


def test_in_a_burst_the_next_sync_waits_as_long_as_the_last_one_took() -> None:
    # Changes came during a sync that took 0.8 s: the next waits 0.8 s after it, so nginx reloads at
    # most half the time; a quiet spell that long still syncs at once.
    assert settle_delay(last_sync_end=100.0, now=100.0, spacing=0.8) == pytest.approx(0.8)
    assert settle_delay(last_sync_end=100.0, now=100.5, spacing=0.8) == pytest.approx(0.3)
    assert settle_delay(last_sync_end=100.0, now=101.0, spacing=0.8) == 0.0
    assert settle_delay(last_sync_end=100.0, now=100.0, spacing=0.01) == pytest.approx(COALESCE)


def test_cached_objects_are_frozen_out_of_full_collections_as_the_caches_grow(tmp_path: Path) -> None:
    controller = _controller(_HeldStatusClient(), tmp_path)
    try:
        controller.freeze_if_grown()  # after the first sync: what is cached then is frozen
        first = gc.get_freeze_count()
        assert first > 0 and controller.frozen_at == 0
        controller.ingresses.store.update({f"web/r{i}": _ingress(f"/a{i}", "1") for i in range(50)})
        controller.freeze_if_grown()  # 50 more: not worth a collection yet
        assert controller.frozen_at == 0
        controller.ingresses.store.update({f"web/s{i}": _ingress(f"/b{i}", "1") for i in range(1000)})
        controller.freeze_if_grown()
        assert controller.frozen_at == 1050 and gc.get_freeze_count() > first
        cached = controller.ingresses.get("web/s999")
        assert not any(o is cached for o in gc.get_objects())  # frozen: no full pass scans it
    finally:
        gc.unfreeze()
