"""A supervised child that outlived its parent before it could be told: exit at start.

A component its API server runs as a child gets the kernel's parent-death signal (PR_SET_PDEATHSIG, set
before exec), so it stops when the server dies. The signal is armed a moment after the fork, though: a
server that dies inside that moment (killed, or failing at start right after spawning it) leaves a child
that will never be signalled, reparented to init, and still holding its leader lease with a kubeconfig
aimed at a dead server. The parent names itself in the child's environment; once the signal is armed,
the child compares: another parent means the moment was missed, and it exits. It keeps comparing once a
second while it runs (`watch_parent`), so a child left behind for any other reason also goes, through its
own SIGTERM path (and at once if that has not ended it ten seconds later).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

PARENT_ENV = "PYKUBELET_SUPERVISOR_PID"


def parent_environment() -> dict[str, str]:
    """What a supervising parent adds to its child's environment."""
    return {PARENT_ENV: str(os.getpid())}


def exit_if_orphaned(component: str) -> None:
    """Exit (code 1) when started by a supervising parent that is no longer our parent."""
    expected = os.environ.get(PARENT_ENV)
    if not expected:
        return
    if str(os.getppid()) != expected:
        print(
            f"{component}: the API server that started this process (pid {expected}) is gone; exiting",
            file=sys.stderr,
        )
        sys.exit(1)


def watch_parent(component: str, interval: float = 1.0, grace: float = 10.0) -> threading.Thread | None:
    """A daemon thread that SIGTERMs this process when its supervising parent is gone (and exits it
    `grace` seconds later if it is still there). None when no supervisor started it."""
    expected = os.environ.get(PARENT_ENV)
    if not expected:
        return None

    def watch() -> None:
        while str(os.getppid()) == expected:
            time.sleep(interval)
        logging.getLogger(component).warning("the API server that started this process is gone; stopping")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace)
        os._exit(1)

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread
