"""The simulated pods' and nodes' rules, without a server: stages, statuses, addresses, the Node."""

from __future__ import annotations

from typing import Any

import pytest

from nodesim import podstatus, stages
from nodesim.addressing import Addresses
from nodesim.nodeobjects import lease_object, node_object
from nodesim.settings import SimSettings
from nodesim.stages import PodRecord

SETTINGS = SimSettings(nodes=3, start_delay=1.5, job_duration=2.0)


def pod(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "0123456789ab", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }


def job_pod() -> dict[str, Any]:
    p = pod()
    p["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "j", "uid": "u", "controller": True}]
    return p


def test_start_delay_comes_from_the_settings_unless_the_pod_says_otherwise() -> None:
    assert stages.start_delay(pod(), SETTINGS) == 1.5
    assert stages.start_delay(pod({stages.START_DELAY: "250ms"}), SETTINGS) == 0.25
    assert stages.start_delay(pod({stages.START_DELAY: "soon"}), SETTINGS) == 1.5


def test_only_job_pods_and_annotated_pods_exit() -> None:
    assert stages.run_for(pod(), SETTINGS) is None
    assert stages.run_for(job_pod(), SETTINGS) == 2.0
    assert stages.run_for(pod({stages.RUN_FOR: "5s"}), SETTINGS) == 5.0
    assert stages.exit_code(pod({stages.EXIT_CODE: "3"})) == 3
    assert stages.exit_code(pod()) == 0


@pytest.mark.parametrize(
    ("policy", "code", "restarts"),
    [
        ("Always", 0, True),
        ("Always", 1, True),
        ("OnFailure", 0, False),
        ("OnFailure", 1, True),
        ("Never", 0, False),
        ("Never", 1, False),
        (None, 0, True),  # the default restartPolicy is Always
    ],
)
def test_restart_policy_decides_what_an_exit_leads_to(policy: str | None, code: int, restarts: bool) -> None:
    spec = {"restartPolicy": policy} if policy else {}
    assert stages.restarts_after_exit(pod(**spec), code) is restarts


def test_crash_backoff_doubles_from_ten_seconds_to_five_minutes() -> None:
    assert [stages.crash_backoff(n) for n in range(7)] == [10, 20, 40, 80, 160, 300, 300]


def test_a_deleted_pod_stops_at_once_unless_it_ignores_sigterm() -> None:
    p = pod(terminationGracePeriodSeconds=12)
    assert stages.termination_wait(p) == 0
    stubborn = pod({stages.IGNORE_SIGTERM: "true"}, terminationGracePeriodSeconds=12)
    assert stages.termination_wait(stubborn) == 12
    stubborn["metadata"]["deletionGracePeriodSeconds"] = 3
    assert stages.termination_wait(stubborn) == 3


def test_a_running_pod_is_ready_with_its_ip_and_restart_count() -> None:
    record = PodRecord(
        node="sim-0", seen_at=0, ip="100.64.0.7", start_stamp="2026-01-01T00:00:00Z", restarts=2
    )
    status = podstatus.running(pod(), record, "198.18.0.1", "2026-01-01T00:00:01Z")
    assert status["phase"] == "Running"
    assert status["podIP"] == "100.64.0.7" and status["hostIP"] == "198.18.0.1"
    ready = {c["type"]: c["status"] for c in status["conditions"]}
    assert ready == {
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
    }
    (container,) = status["containerStatuses"]
    assert container["restartCount"] == 2 and container["ready"] and container["started"]
    assert container["state"] == {"running": {"startedAt": "2026-01-01T00:00:00Z"}}


def test_a_host_network_pod_has_the_node_address() -> None:
    record = PodRecord(node="sim-0", seen_at=0, start_stamp="t")
    status = podstatus.running(pod(hostNetwork=True), record, "198.18.0.1", "t")
    assert status["podIP"] == "198.18.0.1"


def test_an_ended_pod_succeeds_on_zero_and_fails_otherwise() -> None:
    record = PodRecord(node="sim-0", seen_at=0, ip="100.64.0.7", start_stamp="s")
    done = podstatus.ended(pod(), record, "198.18.0.1", "f", 0)
    assert done["phase"] == "Succeeded"
    assert done["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    ready = next(c for c in done["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "PodCompleted"
    failed = podstatus.ended(pod(), record, "198.18.0.1", "f", 2)
    assert failed["phase"] == "Failed"
    assert failed["containerStatuses"][0]["state"]["terminated"] == {
        "exitCode": 2,
        "reason": "Error",
        "startedAt": "s",
        "finishedAt": "f",
        "containerID": failed["containerStatuses"][0]["containerID"],
    }


def test_a_pod_in_crash_backoff_shows_its_last_exit() -> None:
    record = PodRecord(
        node="sim-0", seen_at=0, ip="i", start_stamp="s2", restarts=1, last_exit=(1, "s1", "f1")
    )
    status = podstatus.backing_off(pod(), record, "h", "t")
    (container,) = status["containerStatuses"]
    assert container["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert container["lastState"]["terminated"]["exitCode"] == 1
    assert container["restartCount"] == 1 and not container["ready"]


def test_addresses_are_unique_per_node_and_reused_once_released() -> None:
    addresses = Addresses("198.18.0.0", "100.64.0.0")
    assert addresses.node_ip(0) == "198.18.0.1" and addresses.node_ip(300) == "198.18.1.45"
    assert addresses.pod_cidr(2) == "100.64.2.0/24"
    first, second = addresses.take_pod_ip(2), addresses.take_pod_ip(2)
    assert (first, second) == ("100.64.2.1", "100.64.2.2")
    addresses.release_pod_ip(2, first)
    assert addresses.take_pod_ip(2) == first
    assert addresses.take_pod_ip(3) == "100.64.3.1"


def test_a_node_has_the_kubelets_conditions_and_this_simulations_mark() -> None:
    node = node_object(SETTINGS, "sim-1", "198.18.0.2", "100.64.1.0/24", "sim-")
    assert node["metadata"]["annotations"]["nodesim.pykubelet.io/simulation"] == "sim-"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "sim-1"
    conditions = {c["type"]: (c["status"], c["reason"]) for c in node["status"]["conditions"]}
    assert conditions == {
        "MemoryPressure": ("False", "KubeletHasSufficientMemory"),
        "DiskPressure": ("False", "KubeletHasNoDiskPressure"),
        "PIDPressure": ("False", "KubeletHasSufficientPID"),
        "Ready": ("True", "KubeletReady"),
    }
    assert node["status"]["allocatable"]["pods"] == "110"
    lease = lease_object("sim-1", "uid-1", 40)
    assert lease["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert lease["spec"]["leaseDurationSeconds"] == 40


def test_node_names_sort_in_creation_order() -> None:
    assert SimSettings(nodes=12, prefix="s-").node_names()[:3] == ["s-00", "s-01", "s-02"]
