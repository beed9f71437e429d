"""Waiting for the cluster to reach a state, the way a user re-running `kubectl get` would.

Scenarios read only what the API shows, so they poll the object with a deadline; the deadline is
generous (the condition usually holds in a second or two) and the failure names what never happened.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


def wait_for(
    fn: Callable[[], Any],
    timeout: float = 60.0,
    interval: float = 0.25,
    what: str = "",
    retrying: tuple[type[BaseException], ...] = (),
) -> Any:
    """fn() until it returns something truthy, which is returned; AssertionError after timeout seconds.

    An exception of a type in `retrying` (an API error while a member or a replica is down) counts as
    not yet until the deadline; past it, it is raised as it was (or chained to the timeout)."""
    deadline = time.monotonic() + timeout
    last = None
    error: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            last, error = fn(), None
        except retrying as exc:
            if time.monotonic() >= deadline:
                raise
            last, error = None, exc
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what or fn}; last={last!r}") from error


async def wait_for_async(
    fn: Callable[[], Awaitable[Any]], timeout: float = 60.0, interval: float = 0.25, what: str = ""
) -> Any:
    """wait_for for a coroutine check (tests that poll from inside the event loop): await fn() until it
    is truthy, which is returned; AssertionError after timeout seconds. The loop sleeps between tries."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await fn()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what or fn}; last={last!r}")


def finished(kube: Any, namespace: str, name: str, timeout: float = 60.0) -> Any:
    """The pod (official client object) once its phase is Succeeded or Failed."""

    def check() -> Any:
        pod = kube.read_namespaced_pod(name, namespace)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    return wait_for(check, timeout=timeout, what=f"pod {name} to finish")


def gone(read: Callable[[], Any]) -> bool:
    """Whether `read()` (an official-client read) answers 404 Not Found; other errors are raised."""
    from kubernetes.client.rest import ApiException

    try:
        read()
    except ApiException as err:
        if err.status == 404:
            return True
        raise
    return False
