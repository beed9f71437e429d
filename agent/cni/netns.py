"""Run a function inside another network namespace without forking.

setns(CLONE_NEWNET) only moves the calling thread, so a short-lived thread that enters the pod's
namespace and opens its netlink socket there costs microseconds, where pyroute2's own netns support
forks a helper process per socket (milliseconds). The thread never returns to the host namespace: it
simply ends, so a failure cannot leave a pooled thread in the wrong namespace.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from agent.cni import errors
from agent.cni.errors import CniError

CLONE_NEWNET = 0x40000000
T = TypeVar("T")
_libc = ctypes.CDLL(None, use_errno=True)


def open_netns(path: str) -> int:
    """Open a netns path (/var/run/netns/x, /proc/PID/ns/net); the caller closes the fd."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise CniError(errors.INVALID_ENV, "network namespace does not exist", path) from exc
    except OSError as exc:
        raise CniError(errors.INVALID_ENV, "cannot open network namespace", f"{path}: {exc}") from exc


def in_netns(fd: int, fn: Callable[[], T]) -> T:
    """Call fn() in a new thread that has joined the namespace behind fd, and return its result."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise CniError(errors.INVALID_ENV, "setns failed", os.strerror(err))
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="cni-netns", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
