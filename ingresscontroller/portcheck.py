"""Which ports of the controller's address another process holds, checked before nginx is asked to
listen on them: nginx's own check comes late (the master retries `bind()` for 2.5 s, then refuses the
whole configuration), while a port found taken here only costs its Gateway listener (PortUnavailable)."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable


def held_elsewhere(address: str, ports: Iterable[int]) -> dict[int, str]:
    """port -> why nginx could not listen on it at `address` ("" = every address), for those it could not."""
    where = address or "0.0.0.0"
    taken: dict[int, str] = {}
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as nginx: TIME_WAIT is no owner
            try:
                probe.bind((where, port))
            except OSError as err:
                if err.errno == errno.EADDRINUSE:
                    taken[port] = f"port {port} on {where} is in use by another process"
                else:
                    taken[port] = f"port {port} on {where} cannot be bound: {err.strerror}"
    return taken
