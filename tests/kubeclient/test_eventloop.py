"""The components' event loop: uvloop unless PYKUBELET_EVENT_LOOP=asyncio says otherwise."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from kubeclient.eventloop import loop_factory


def run_on_component_loop() -> type:
    async def loop_type() -> type:
        return type(asyncio.get_running_loop())

    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(loop_type())


def test_components_run_on_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYKUBELET_EVENT_LOOP", raising=False)
    assert issubclass(run_on_component_loop(), uvloop.Loop)


def test_the_standard_loop_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYKUBELET_EVENT_LOOP", "asyncio")
    loop = run_on_component_loop()
    assert not issubclass(loop, uvloop.Loop)
    assert issubclass(loop, asyncio.BaseEventLoop)
