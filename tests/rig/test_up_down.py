"""The README's main command: `pykubelet up` brings the cluster up with the sample pod Running, and
`pykubelet down` takes all of it away again."""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import subprocess
from pathlib import Path

import pytest

from pykubelet.rig.leaks import Scope
from pykubelet.rig.netlease import lease_network
from pykubelet.rig.process import free_port, pid_alive
from pykubelet.rig.stack import StackRecord, netpolicy_table, proxy_table

pytestmark = pytest.mark.integration


# `up`'s stages as it reports them, in order (pykubelet.progress): one line each with its seconds.
STAGES = [
    "packages",
    "registry",
    "images",
    "containerd",
    "API server",
    "DNS",
    "node up-test",
    "scheduler",
    "controllers",
    "service proxy",
    "network policies",
    "metrics server",
    "ingress controller",
    "CSI driver",
    "supervisor",
    "sample pod",
]


def stage_lines(stderr: str) -> list[str]:
    return re.findall(r"^pykubelet: (\S.*?) +\d+\.\d s$", stderr, re.M)


def run_down(state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["pykubelet", "down", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def net():
    with lease_network("u") as lease:
        yield lease


def test_up_runs_the_sample_pod_and_down_cleans_up(tmp_path: Path, net) -> None:
    state = tmp_path / "state"
    scope = Scope.of(
        state,
        bridges=[net.bridge],
        pod_cidrs=[net.pod_cidr],
        nft_tables=[f"ip {proxy_table(net.bridge)}", f"inet {netpolicy_table(net.bridge)}"],
    )
    up = subprocess.run(
        [
            "pykubelet",
            "up",
            "--state-dir",
            str(state),
            "--api-port",
            str(free_port()),
            "--node-name",
            "up-test",
            "--pod-cidr",
            net.pod_cidr,
            "--bridge",
            net.bridge,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    record = StackRecord.load(state)
    try:
        assert up.returncode == 0, up.stderr
        assert record is not None
        assert record.ready == [
            "registry",
            "containerd",
            "apiserver",
            "dns",
            "agent",
            "proxy",
            "netpolicy",
            "metrics-server",
            "ingress",
            "csi-driver",
        ]
        kubeconfig = record.kubeconfig
        assert up.stdout.strip() == f"export KUBECONFIG={kubeconfig}"
        assert "pod default/hello is Running and Ready" in up.stderr  # its readiness probe passed
        assert stage_lines(up.stderr) == STAGES, up.stderr
        # The daemons outlive the `up` command, and kubectl sees the node and the pod.
        assert all(pid_alive(pid) for pid in record.pids.values()), record.pids
        pods = subprocess.run(
            [
                "kubectl",
                "--kubeconfig",
                kubeconfig,
                "get",
                "pod",
                "hello",
                "-o",
                "jsonpath={.spec.nodeName} {.status.phase} {.status.podIP}",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        node, phase, pod_ip = pods.stdout.split()
        assert (node, phase) == ("up-test", "Running")  # bound by the server's scheduler, run by our agent
        # kubectl logs goes server -> agent: httpd logged the readiness probe's GET.
        logs = subprocess.run(
            ["kubectl", "--kubeconfig", kubeconfig, "logs", "hello"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert "response:200" in logs.stdout
        # The address comes from the pod network the agent runs: our plugin on the range given to `up`.
        assert ipaddress.ip_address(pod_ip) in ipaddress.ip_network(net.pod_cidr)
        conflist = json.loads(next((state / "cni" / "net.d").glob("*.conflist")).read_text())
        assert [p["type"] for p in conflist["plugins"]][0] == "pykubelet-cni"
        nodes = subprocess.run(
            ["kubectl", "--kubeconfig", kubeconfig, "get", "node", "up-test", "-o", "name"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert nodes.stdout.strip() == "node/up-test"
    finally:
        down = run_down(state)
    assert down.returncode == 0, down.stderr
    assert StackRecord.load(state) is None
    assert record is not None and not any(pid_alive(pid) for pid in record.pids.values())
    leaked = scope.leaked()
    assert not leaked, f"`pykubelet down` left {leaked}"


def test_up_on_etcd_owns_a_local_etcd_and_down_stops_it(tmp_path: Path, net) -> None:
    """`--store etcd`: up starts an etcd of its own (data dir and certificates under the state dir)
    before the API server, the cluster lives in it, and down stops it with the rest."""
    import asyncio

    from controlplane.apiserver.kindparts import builtin_table
    from controlplane.storage.etcd import EtcdConfig, EtcdStore

    state = tmp_path / "state"
    scope = Scope.of(
        state,
        bridges=[net.bridge],
        pod_cidrs=[net.pod_cidr],
        nft_tables=[f"ip {proxy_table(net.bridge)}", f"inet {netpolicy_table(net.bridge)}"],
    )
    up = subprocess.run(
        [
            "pykubelet",
            "up",
            "--state-dir",
            str(state),
            "--api-port",
            str(free_port()),
            "--node-name",
            "up-etcd",
            "--pod-cidr",
            net.pod_cidr,
            "--bridge",
            net.bridge,
            "--store",
            "etcd",
            "--no-example",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    record = StackRecord.load(state)
    try:
        assert up.returncode == 0, up.stderr
        assert record is not None
        assert record.ready == [
            "registry",
            "containerd",
            "etcd",
            "apiserver",
            "dns",
            "agent",
            "proxy",
            "netpolicy",
            "metrics-server",
            "ingress",
            "csi-driver",
        ]
        assert all(pid_alive(pid) for pid in record.pids.values()), record.pids
        assert not (state / "apiserver" / "state.db").exists()
        pki = state / "etcd" / "pki"
        cmdline = Path(f"/proc/{record.pids['etcd']}/cmdline").read_bytes().split(b"\0")
        url = cmdline[cmdline.index(b"--listen-client-urls") + 1].decode()

        async def node_in_etcd() -> bytes | None:
            store = EtcdStore(
                EtcdConfig(
                    (url,),
                    pki / "ca.crt",
                    pki / "apiserver-etcd-client.crt",
                    pki / "apiserver-etcd-client.key",
                ),
                builtin_table().etcd_layout(),  # where the API server keeps each resource
            )
            await store.start()
            try:
                kv = await store.get("/nodes/up-etcd")
                return kv.value if kv else None
            finally:
                await store.close()

        value = asyncio.run(node_in_etcd())
        assert value is not None and json.loads(value)["metadata"]["name"] == "up-etcd"
    finally:
        down = run_down(state)
    assert down.returncode == 0, down.stderr
    assert StackRecord.load(state) is None
    assert record is not None and not any(pid_alive(pid) for pid in record.pids.values())
    leaked = scope.leaked()
    assert not leaked, f"`pykubelet down` left {leaked}"


def test_up_names_the_stage_that_failed_with_its_log(tmp_path: Path, net) -> None:
    """The API server's port is taken: `up` names that stage, shows the end of the server's log (the
    bind error) and its path, exits 1 having stopped what it started, and down leaves nothing."""
    state = tmp_path / "state"
    scope = Scope.of(
        state,
        bridges=[net.bridge],
        pod_cidrs=[net.pod_cidr],
        nft_tables=[f"ip {proxy_table(net.bridge)}", f"inet {netpolicy_table(net.bridge)}"],
    )
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        up = subprocess.run(
            ["pykubelet", "up", "--state-dir", str(state), "--api-port", str(port), "--node-name", "up-fail",
             "--pod-cidr", net.pod_cidr, "--bridge", net.bridge],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    try:
        assert up.returncode == 1, up.stderr
        log = state / "apiserver" / "apiserver.log"
        assert re.search(
            r"^pykubelet: API server FAILED after \d+\.\d s: pykubelet server exited", up.stderr, re.M
        ), up.stderr
        assert "pykubelet: the last " in up.stderr and f" lines of {log}:" in up.stderr
        tail = up.stderr.split(f" lines of {log}:\n", 1)[1]
        assert "address already in use" in tail.lower(), up.stderr
        assert f"pykubelet: API server log: {log}\n" in up.stderr
        assert stage_lines(up.stderr) == STAGES[:4]  # the stages before it finished
        assert "Traceback" not in up.stderr
        assert not scope.owned()  # up stopped what it had started
    finally:
        down = run_down(state)
    assert down.returncode == 0, down.stderr
    leaked = scope.leaked()
    assert not leaked, f"`pykubelet down` left {leaked}"
