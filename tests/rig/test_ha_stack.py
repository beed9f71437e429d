"""The whole stack on 3 etcd members and 3 API servers (`pykubelet up --store etcd --etcd-members 3
--apiservers 3`), losing parts as a machine would lose them, real processes throughout:

- a pod reaches the API through the `kubernetes` Service (https://kubernetes.default.svc with its own
  token) whichever replica the proxy picks;
- the API server the agent is connected to is killed (with its scheduler and controller manager) while
  the agent's and the controllers' watches are open, and an etcd member with it: the agent and the
  controllers fail over, the node stays Ready, a Deployment scaled during the outage converges, the
  Service's endpoints drop the dead replica and the pod's requests all succeed again;
- a second etcd member stops (no quorum): a write fails within a bounded time with a retryable 5xx
  instead of hanging, and the running pods keep running (their processes untouched);
- the member comes back: writes go through, the Deployment scales again, the node never left Ready;
- `pykubelet down` leaves nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest
from kubernetes import client
from kubernetes import config as kconfig
from kubernetes.client.rest import ApiException

from e2e.waiting import wait_for
from pykubelet.rig.netlease import lease_network
from tests.etcdmembers import (
    assert_down_left_nothing,
    deployment,
    deployment_ready,
    lose_first_machine,
    pause_member,
    resume_member,
    stack_down,
    stack_scope,
    stack_up,
)

# Counted as "not yet" while polling: an API error while etcd or a replica is down.
RETRY = (ApiException,)


MARKER = "pykube-ha-probe"
# Every half second: one request to the API through the Service, one line "ok|fail <unix time>" (busybox
# 1.35's `wget -T` crashes, so `timeout` bounds each).
PROBE = (
    f": {MARKER}; token=$(cat /var/run/secrets/kubernetes.io/serviceaccount/token); while true; do "
    'if timeout 3 wget -q --no-check-certificate --header "Authorization: Bearer $token" -O /dev/null '
    "https://kubernetes.default.svc/version; then echo ok $(date +%s); else echo fail $(date +%s); fi; "
    "sleep 0.5; done"
)


def probe_pod() -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "api-probe"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "probe", "image": "busybox:latest", "command": ["sh", "-c", PROBE]}],
        },
    }


def probe_lines(core: client.CoreV1Api) -> list[tuple[str, int]]:
    log = core.read_namespaced_pod_log("api-probe", "default")
    words = (line.split() for line in log.splitlines())
    return [(w[0], int(w[1])) for w in words if len(w) == 2 and w[0] in ("ok", "fail") and w[1].isdigit()]


def all_ok_since(core: client.CoreV1Api, since: float, count: int) -> bool:
    """At least `count` probe lines after `since`, every one of them a success."""
    after = [verdict for verdict, at in probe_lines(core) if at > since]
    return len(after) >= count and all(v == "ok" for v in after)


def endpoint_ips(core: client.CoreV1Api) -> list[str]:
    eps = core.read_namespaced_endpoints("kubernetes", "default")
    return [a.ip for s in eps.subsets or [] for a in s.addresses or []]


def ready_condition(core: client.CoreV1Api, node: str) -> tuple[str, object]:
    cond = next(c for c in core.read_node(node).status.conditions if c.type == "Ready")
    return cond.status, cond.last_transition_time


def probe_pids() -> set[int]:
    return {p.pid for p in psutil.process_iter(["cmdline"]) if MARKER in " ".join(p.info["cmdline"] or [])}


@pytest.mark.integration
def test_three_by_three_stack_survives_losing_an_api_server_an_etcd_member_and_quorum(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with lease_network("h") as net:
        scope = stack_scope(state, net)
        up, record = stack_up(state, net, "ha3-node", apiservers=3, timeout=400)
        stopped: list[int] = []
        try:
            assert up.returncode == 0, up.stderr[-3000:]
            assert record is not None
            assert {"etcd-m0", "etcd-m1", "etcd-m2", "apiserver", "apiserver-1", "apiserver-2"} <= set(
                record.pids
            )
            # The test's own client talks to the third replica, which stays up throughout.
            third = state / "apiserver" / "replica-2" / "admin.kubeconfig"
            api = kconfig.new_client_from_config(config_file=str(third))
            core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
            assert endpoint_ips(core) == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
            status, since = ready_condition(core, "ha3-node")
            assert status == "True"

            # A pod reaches the API through the kubernetes Service, whichever replica answers.
            core.create_namespaced_pod("default", probe_pod())
            started = time.time()
            wait_for(lambda: all_ok_since(core, started, 6), timeout=120, interval=1.0, retrying=RETRY)
            apps.create_namespaced_deployment("default", deployment("ha3", 1))

            def ready(n: int) -> bool:
                return deployment_ready(apps, "ha3", n)

            wait_for(lambda: ready(1), timeout=90, interval=0.5, retrying=RETRY)
            pids = probe_pids()
            assert len(pids) == 1, pids

            # The replica the agent talks to dies with its scheduler and controller manager, and an etcd
            # member with it.
            lose_first_machine(record)
            wait_for(
                lambda: apps.patch_namespaced_deployment_scale("ha3", "default", {"spec": {"replicas": 3}}),
                timeout=20,
                interval=0.5,
                retrying=RETRY,
            )
            wait_for(lambda: ready(3), timeout=120, interval=1.0, retrying=RETRY)
            wait_for(
                lambda: endpoint_ips(core) == ["127.0.0.2", "127.0.0.3"],
                timeout=40,
                interval=1.0,
                retrying=RETRY,
            )
            dropped = time.time()
            # Connections the proxy opens from now on go to live replicas only.
            wait_for(lambda: all_ok_since(core, dropped + 1, 6), timeout=30, interval=1.0, retrying=RETRY)
            assert ready_condition(core, "ha3-node") == ("True", since)

            # A second member stops: no quorum. A write fails within a bounded time, retryably.
            pause_member(record.pids["etcd-m1"])
            stopped.append(record.pids["etcd-m1"])
            began = time.monotonic()
            with pytest.raises(ApiException) as err:
                core.create_namespaced_config_map(
                    "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="no-quorum"))
                )
            took = time.monotonic() - began
            assert 500 <= err.value.status < 600 and took < 20, (err.value.status, took, err.value.body)
            assert json.loads(err.value.body)["message"], err.value.body
            # Running pods keep running: the probe's process is the same one, ten seconds on.
            time.sleep(10)  # the length of the outage is what is under test, not a stand-in for a condition
            assert probe_pids() == pids

            # The member is back: writes go through, the Deployment scales, the node never left Ready.
            resume_member(record.pids["etcd-m1"])
            stopped.clear()
            wait_for(
                lambda: apps.patch_namespaced_deployment_scale("ha3", "default", {"spec": {"replicas": 2}}),
                timeout=30,
                interval=0.5,
                retrying=RETRY,
            )
            wait_for(lambda: ready(2), timeout=90, interval=1.0, retrying=RETRY)
            assert ready_condition(core, "ha3-node") == ("True", since)
            assert probe_pids() == pids
            restored = time.time()
            wait_for(lambda: all_ok_since(core, restored, 4), timeout=30, interval=1.0, retrying=RETRY)
        finally:
            for pid in stopped:
                resume_member(pid)
            down = stack_down(state)
        assert_down_left_nothing(down, record, scope)
