"""Leader election: two schedulers, one decides; the other takes over when the first stops or dies."""

from __future__ import annotations

import signal
import time

import pytest

from tests.scheduler.conftest import scheduler_config

pytestmark = pytest.mark.integration

SHORT_LEASE = {"leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "500ms"}


def wait_for_log(proc, text: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in proc.log():
        assert time.monotonic() < deadline, f"{text!r} not in log:\n{proc.log()[-3000:]}"
        time.sleep(0.05)


def lease_holder(v1) -> str:
    from kubernetes import client

    lease = client.CoordinationV1Api(v1.api_client).read_namespaced_lease("kube-scheduler", "kube-system")
    return str(lease.spec.holder_identity or "")


def test_one_leader_schedules_and_a_clean_stop_hands_over_at_once(cluster, start_scheduler):
    node = cluster.add_node("n")
    # A lease far longer than the wait below: the successor can only take over because it was released.
    long_lease = {"leaseDuration": "120s", "renewDeadline": "60s", "retryPeriod": "500ms"}
    settings = {**scheduler_config(), "leaderElection": long_lease}
    first = start_scheduler(settings)
    second = start_scheduler.background(settings)
    wait_for_log(second, "waiting, lease held by")
    cluster.create(cluster.pod("a"))
    assert cluster.wait_bound("a") == node
    assert "bound pod" in first.log() and "bound pod" not in second.log()
    assert first.stop() == 0  # releases the lease on the way out
    assert "released lease" in first.log()
    wait_for_log(second, "caches synced", timeout=60)
    cluster.create(cluster.pod("b"))
    assert cluster.wait_bound("b") == node
    assert "bound pod" in second.log()


def test_a_dead_leader_is_replaced_after_its_lease_expires(cluster, start_scheduler, v1):
    node = cluster.add_node("n")
    settings = {**scheduler_config(), "leaderElection": SHORT_LEASE}
    first = start_scheduler(settings)
    second = start_scheduler.background(settings)
    wait_for_log(second, "waiting, lease held by")
    held_by = lease_holder(v1)
    first.process.send_signal(signal.SIGKILL)  # no release: the lease must expire
    first.process.wait()
    wait_for_log(second, "caches synced", timeout=20)
    assert lease_holder(v1) not in ("", held_by)
    cluster.create(cluster.pod("after"))
    assert cluster.wait_bound("after") == node


def test_without_leader_election(cluster, start_scheduler):
    node = cluster.add_node("n")
    proc = start_scheduler({**scheduler_config(), "leaderElection": {"leaderElect": False}})
    cluster.create(cluster.pod("p"))
    assert cluster.wait_bound("p") == node
    assert "leader election" not in proc.log()
