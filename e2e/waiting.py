"""Waiting for the cluster to reach a state, the way a user re-running `kubectl get` would.

Scenarios read only what the API shows, so they poll the object with a deadline; the deadline is
generous (the condition usually holds in a second or two) and the failure names what never happened.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(fn: Callable[[], Any], timeout: float = 60.0, interval: float = 0.25, what: str = "") -> Any:
    """fn() until it returns something truthy, which is returned; AssertionError after timeout seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what or fn}; last={last!r}")


def finished(kube: Any, namespace: str, name: str, timeout: float = 60.0) -> Any:
    """The pod (official client object) once its phase is Succeeded or Failed."""

    def check() -> Any:
        pod = kube.read_namespaced_pod(name, namespace)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    return wait_for(check, timeout=timeout, what=f"pod {name} to finish")
