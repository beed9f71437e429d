"""What the etcd-backed tests (tests/rig/test_ha_stack.py, tests/rig/test_etcd_cluster.py,
tests/controlplane/test_apiserver_etcd.py) do to a store and its members, written once: lose the first
"machine" of a stack (its API server's process group and etcd member m0), pause and resume a member,
read from the watch cache while etcd is away, and take the stack down and check it left nothing. Members started by
the rig itself are driven with pykubelet.rig.etcd's Etcd.kill()/start(); these are for the PIDs a
`pykubelet up` stack records."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from kubernetes import client

from e2e import manifests
from pykubelet.rig.leaks import Scope
from pykubelet.rig.netlease import NetworkLease
from pykubelet.rig.process import free_port, pid_alive
from pykubelet.rig.stack import StackRecord, proxy_table


def read_from_cache(v1: client.CoreV1Api, name: str, ns: str) -> client.V1ConfigMap:
    """GET with resourceVersion=0: served from the API server's watch cache, as upstream's (a GET with
    no resourceVersion is a consistent read, which needs etcd)."""
    api = v1.api_client
    request = api.param_serialize(
        "GET",
        "/api/v1/namespaces/{namespace}/configmaps/{name}",
        path_params={"namespace": ns, "name": name},
        query_params=[("resourceVersion", "0")],
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request)
    response.read()
    return api.response_deserialize(response, {"200": "V1ConfigMap"}).data


def deployment(name: str, replicas: int) -> dict:
    """A Deployment of busybox sleepers that stop at once (grace 1 s)."""
    sleeper = {"name": "c", "image": "busybox:latest", "command": ["sleep", "3600"]}
    return manifests.deployment(name, [sleeper], replicas)


def deployment_ready(apps: client.AppsV1Api, name: str, n: int) -> bool:
    """The Deployment in default has n ready and n updated replicas."""
    got = apps.read_namespaced_deployment(name, "default").status
    return got is not None and (got.ready_replicas or 0) == n and (got.updated_replicas or 0) == n


def lose_first_machine(record: StackRecord) -> None:
    """The first API server's machine is gone: it, its scheduler and controller manager (its process
    group), and etcd member m0 with it; and the stack's supervisor, which would otherwise start that API
    server again at once (a lost machine's own supervisor is lost with it)."""
    if "supervisor" in record.pids:
        os.kill(record.pids["supervisor"], signal.SIGKILL)
    os.killpg(record.pids["apiserver"], signal.SIGKILL)
    os.kill(record.pids["etcd-m0"], signal.SIGKILL)


def pause_member(pid: int) -> None:
    """The member stops answering (SIGSTOP) without leaving the cluster; resume_member brings it back."""
    os.kill(pid, signal.SIGSTOP)


def resume_member(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


def stack_scope(state: Path, net: NetworkLease) -> Scope:
    """What a stack in state on the leased network may create, for the leak check after down."""
    return Scope.of(
        state,
        bridges=[net.bridge],
        pod_cidrs=[net.pod_cidr],
        nft_tables=[f"ip {proxy_table(net.bridge)}"],
    )


def stack_up(
    state: Path, net: NetworkLease, node: str, apiservers: int, timeout: float
) -> tuple[subprocess.CompletedProcess[str], StackRecord | None]:
    """`pykubelet up` on 3 etcd members and `apiservers` API servers; its result and the stack's record."""
    argv = ["pykubelet", "up", "--state-dir", str(state), "--api-port", str(free_port()), "--node-name",
            node, "--pod-cidr", net.pod_cidr, "--bridge", net.bridge, "--store", "etcd",
            "--etcd-members", "3", "--apiservers", str(apiservers), "--no-example"]  # fmt: skip
    up = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    return up, StackRecord.load(state)


def stack_down(state: Path) -> subprocess.CompletedProcess[str]:
    """`pykubelet down` on the stack in state (run in a finally: its verdict is checked after)."""
    return subprocess.run(
        ["pykubelet", "down", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def assert_down_left_nothing(
    down: subprocess.CompletedProcess[str], record: StackRecord | None, scope: Scope
) -> None:
    """`pykubelet down` exited 0, every process the stack recorded is gone and nothing is leaked."""
    assert down.returncode == 0, down.stderr
    assert record is not None and not any(pid_alive(pid) for pid in record.pids.values())
    leaked = scope.leaked()
    assert not leaked, f"`pykubelet down` left {leaked}"
