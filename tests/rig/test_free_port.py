"""The rig's ports: never one an outgoing connection could take before the daemon binds it (outside the
kernel's ephemeral range), never a node port, and never one somebody holds."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from pykubelet.rig import process
from pykubelet.rig.process import RIG_PORTS, free_port


def test_picks_lie_below_the_ephemeral_range_and_the_node_ports() -> None:
    low, _high = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    picks = {free_port() for _ in range(50)}
    assert all(p in RIG_PORTS and p < low and p < 30000 for p in picks), sorted(picks)


def test_a_held_port_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    free = (p for p in RIG_PORTS if process.bindable("127.0.0.1", p))
    taken, spare = next(free), next(free)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:  # UDP alone: DNS needs both free
        held.bind(("127.0.0.1", taken))
        choices = iter([taken, taken, spare])
        monkeypatch.setattr(random.SystemRandom, "randrange", lambda self, a, b: next(choices))
        assert free_port() == spare
