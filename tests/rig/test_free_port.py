"""The rig's ports: never one an outgoing connection could take before the daemon binds it (outside the
kernel's ephemeral range), never a node port, and never one somebody holds."""

from __future__ import annotations

import os
import random
import socket
import time
from pathlib import Path

import pytest

from pykubelet.rig import process
from pykubelet.rig.process import RIG_PORTS, free_port


def test_picks_lie_below_the_ephemeral_range_and_the_node_ports() -> None:
    low, _high = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    picks = {free_port() for _ in range(50)}
    assert all(p in RIG_PORTS and p < low and p < 30000 for p in picks), sorted(picks)


@pytest.fixture(autouse=True)
def reservations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A reservation folder of the test's own: the host's holds other sessions' live picks."""
    folder = tmp_path / "reservations"
    monkeypatch.setattr(process, "RESERVATIONS", folder)
    return folder


def test_a_held_port_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    free = (p for p in RIG_PORTS if process.bindable("127.0.0.1", p))
    taken, spare = next(free), next(free)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:  # UDP alone: DNS needs both free
        held.bind(("127.0.0.1", taken))
        choices = iter([taken, taken, spare])
        monkeypatch.setattr(random.SystemRandom, "randrange", lambda self, a, b: next(choices))
        assert free_port() == spare


def test_a_port_handed_out_is_not_handed_out_again_until_its_reservation_expires(
    monkeypatch: pytest.MonkeyPatch, reservations: Path
) -> None:
    """Two picks (in this process or another session's) never get the same port while the first daemon
    may still be on its way to binding it; an expired reservation frees the port again."""
    free = (p for p in RIG_PORTS if process.bindable("127.0.0.1", p))
    first, spare = next(free), next(free)
    choices = iter([first, first, spare, first])
    monkeypatch.setattr(random.SystemRandom, "randrange", lambda self, a, b: next(choices))
    assert free_port() == first
    assert free_port() == spare  # `first` is nobody's socket yet, but it was handed out
    old = time.time() - process.RESERVATION_SECONDS - 1
    os.utime(reservations / str(first), (old, old))
    assert free_port() == first


def test_expired_reservations_are_deleted_and_live_ones_kept(
    monkeypatch: pytest.MonkeyPatch, reservations: Path
) -> None:
    """Reservations do not pile up: a process's first pick (and `pykubelet down`) deletes the expired."""
    reservations.mkdir()
    old = time.time() - process.RESERVATION_SECONDS - 1
    for port in (20001, 20002):
        (reservations / str(port)).touch()
        os.utime(reservations / str(port), (old, old))
    (reservations / "20003").touch()
    monkeypatch.setattr(process, "_swept", False)
    picked = free_port()
    assert sorted(p.name for p in reservations.iterdir()) == sorted(["20003", str(picked)])
    assert process.forget_expired_reservations() == 0
