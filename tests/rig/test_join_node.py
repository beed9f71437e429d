"""A second node joined to the rig's stack the way a person would: `pykubelet token create
--print-join-command` on the control plane, that command (plus a node name, a root dir, its own pod
network, kubelet port and the stack's registry as mirror) run with `--foreground`. The joined node runs
its own containerd under its root dir; its Node goes Ready, its credential is a certificate for
system:node:<name> issued through an approved CSR its bootstrap token posted; its network-policy agent,
on that credential, puts a pod of that node under a policy into its nftables table; then `pykubelet reset`
(with the join still running) leaves nothing on the host, that table included. Real containerd: run under the host lock."""

from __future__ import annotations

import base64
import os
import re
import shlex
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID
from kubernetes import client

from pykubelet.rig.leaks import Scope
from pykubelet.rig.netlease import lease_network
from pykubelet.rig.process import free_port

pytestmark = pytest.mark.integration
NODE = "joined-node"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    if os.geteuid() != 0:
        pytest.skip("the stack needs root")
    from pykubelet.rig.stack import Stack, StackConfig, proxy_table

    with lease_network("c") as net:
        config = StackConfig(
            state_dir=tmp_path_factory.mktemp("join-stack"),
            node_name="cp-node",
            bridge=net.bridge,
            pod_cidr=net.pod_cidr,
            verify_kubelets=True,  # --kubelet-certificate-authority: kubectl logs verifies the kubelet
        )
        scope = Scope.of(
            config.state_dir,
            bridges=[net.bridge],
            pod_cidrs=[net.pod_cidr],
            nft_tables=[f"ip {proxy_table(net.bridge)}"],
        )
        s = Stack(config)
        s.start()
        try:
            yield s
        finally:
            problems = s.stop()
            assert not problems, problems
            assert not scope.leaked()


def _pykubelet(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pykubelet", *args], capture_output=True, text=True, timeout=timeout
    )


def _join_command(stack) -> list[str]:  # type: ignore[no-untyped-def]
    made = _pykubelet("token", "create", "--print-join-command", "--kubeconfig", str(stack.kubeconfig))
    assert made.returncode == 0, made.stderr
    argv = shlex.split(made.stdout.strip())
    assert argv[:2] == ["pykubelet", "join"], argv
    return argv[2:]


def _node_ready(core: client.CoreV1Api, name: str) -> bool:
    try:
        node = core.read_node(name)
    except client.exceptions.ApiException as err:
        if err.status == 404:
            return False
        raise
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def _join_stages(log: Path) -> list[str]:
    """The stages join reported finished (pykubelet.progress: one line each, with its seconds)."""
    return re.findall(r"^pykubelet join: (\S.*?) +\d+\.\d s$", log.read_text(), re.M)


def _wait(what: str, probe, proc: subprocess.Popen, log: Path, timeout: float = 150) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"join exited ({proc.returncode}) before {what}:\n{log.read_text()[-3000:]}")
        if probe():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


def _client_cert(root: Path) -> x509.Certificate:
    doc = yaml.safe_load((root / "agent" / "kubeconfig").read_text())
    (user,) = doc["users"]
    return x509.load_pem_x509_certificate(Path(user["user"]["client-certificate"]).read_bytes())


def test_join_a_second_node_then_reset_leaves_nothing(stack, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    join = _join_command(stack)
    token_id = join[join.index("--token") + 1][:6]
    root = tmp_path / "node2"
    log = tmp_path / "join.log"
    core = stack.core_api()
    with lease_network("j") as net:
        table = f"pykubelet-netpol-{net.bridge}"
        scope = Scope.of(root, bridges=[net.bridge], pod_cidrs=[net.pod_cidr], nft_tables=[f"inet {table}"])
        argv = [
            sys.executable, "-m", "pykubelet", "join", *join,
            "--node-name", NODE, "--root-dir", str(root), "--foreground",
            "--pod-cidr", net.pod_cidr, "--bridge", net.bridge, "--port", str(free_port()),
            "--sandbox-image", stack.images.pause, "--registry-mirror", stack.registry.address,
            "--server-tls-bootstrap",
        ]  # fmt: skip
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            _wait(f"node {NODE} Ready", lambda: _node_ready(core, NODE), proc, log)
            # join showed each stage as it finished, the TLS bootstrap last.
            stages = [
                "packages",
                "node files",
                "containerd",
                f"TLS bootstrap of node {NODE}",
                "network policies",
            ]
            _wait("join's stage lines", lambda: len(_join_stages(log)) == 6, proc, log)
            assert _join_stages(log)[0].startswith("discovery of https://")
            assert _join_stages(log)[1:] == stages, log.read_text()

            # Its credential: a certificate for system:node:<name> from the cluster CA, issued through
            # a CSR its bootstrap token posted and the approver approved.
            cert = _client_cert(root)
            cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
            assert cn == f"system:node:{NODE}"
            cert.verify_directly_issued_by(
                x509.load_pem_x509_certificate(stack.apiserver.ca_cert.read_bytes())
            )
            csrs = client.CertificatesV1Api(core.api_client).list_certificate_signing_request().items
            (csr,) = [c for c in csrs if c.spec.username == f"system:bootstrap:{token_id}"]
            assert [(c.type, c.reason) for c in csr.status.conditions] == [("Approved", "AutoApproved")]
            assert x509.load_pem_x509_certificate(base64.b64decode(csr.status.certificate)) == cert
            # The files join wrote, where it said.
            boot = yaml.safe_load((root / "agent" / "bootstrap-kubelet.conf").read_text())
            assert boot["users"][0]["user"]["token"].startswith(token_id + ".")
            assert (root / "agent" / "bootstrap-kubelet.conf").stat().st_mode & 0o077 == 0
            assert (root / "containerd" / "containerd.sock").exists()
            assert scope.owned()  # the node's processes and bridge are there now
            _logs_through_a_serving_bootstrapped_kubelet(stack, core)
            _a_policy_reaches_the_joined_nodes_table(stack, core, table)
        finally:
            reset = _pykubelet("reset", "--root-dir", str(root), timeout=180)
            proc.wait(timeout=60)
        assert reset.returncode == 0, reset.stderr
        assert not root.exists()
        assert scope.leaked() == {}
    core.delete_node(NODE)


def _kubectl(stack, *args: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(stack.kubeconfig), *args], capture_output=True, text=True, timeout=60
    )


def _serving_csr(certs: client.CertificatesV1Api):  # type: ignore[no-untyped-def]
    for csr in certs.list_certificate_signing_request().items:
        if (
            csr.spec.signer_name == "kubernetes.io/kubelet-serving"
            and csr.spec.username == f"system:node:{NODE}"
        ):
            return csr
    return None


def _eventually(what: str, probe, timeout: float = 90):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last={last!r}")


def _logs_through_a_serving_bootstrapped_kubelet(stack, core: client.CoreV1Api) -> None:  # type: ignore[no-untyped-def]
    """serverTLSBootstrap: the kubelet-serving CSR waits for an administrator; once approved with
    kubectl, the API server (verifying kubelets with the cluster CA) streams the pod's log from it."""
    certs = client.CertificatesV1Api(core.api_client)
    csr = _eventually("the joined kubelet's serving CSR", lambda: _serving_csr(certs))
    assert not (csr.status.conditions or [])  # never approved automatically
    approved = _kubectl(stack, "certificate", "approve", csr.metadata.name)
    assert approved.returncode == 0, approved.stderr
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "joined-logs"},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "c",
                    "image": stack.images.busybox,
                    "command": ["sh", "-c", "echo hello from the joined node"],
                }
            ],
        },
    }
    core.create_namespaced_pod("default", pod)
    try:
        _eventually(
            "the pod to succeed",
            lambda: core.read_namespaced_pod("joined-logs", "default").status.phase == "Succeeded",
        )

        def logs() -> str:
            got = _kubectl(stack, "logs", "joined-logs")
            return got.stdout if got.returncode == 0 else ""

        assert (
            _eventually("kubectl logs through the verified kubelet", logs) == "hello from the joined node\n"
        )
        served = ssl.get_server_certificate(_kubelet_address(core))
        cert = x509.load_pem_x509_certificate(served.encode())
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(stack.apiserver.ca_cert.read_bytes()))
    finally:
        core.delete_namespaced_pod("joined-logs", "default", grace_period_seconds=0)


def _a_policy_reaches_the_joined_nodes_table(stack, core: client.CoreV1Api, table: str) -> None:  # type: ignore[no-untyped-def]
    """A pod of the joined node selected by a default deny: its address in the verdict map of the joined
    node's own agent (on the node's credential; the stack's agent leaves that node's pods alone)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "joined-policed", "labels": {"joined": "policed"}},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "c", "image": stack.images.busybox, "command": ["sleep", "3600"]}],
        },
    }
    deny = {
        "metadata": {"name": "joined-deny"},
        "spec": {"podSelector": {"matchLabels": {"joined": "policed"}}},
    }
    net = client.NetworkingV1Api(core.api_client)
    core.create_namespaced_pod("default", pod)
    net.create_namespaced_network_policy("default", deny)
    try:
        ip = _eventually(
            "the pod's address", lambda: core.read_namespaced_pod("joined-policed", "default").status.pod_ip
        )

        def mapped() -> bool:
            listed = subprocess.run(
                ["nft", "list", "map", "inet", table, "ingress-pods"],
                capture_output=True,
                text=True,
                check=False,
            )
            return f"{ip} : jump ingress-default/joined-policed" in listed.stdout

        _eventually("the pod in the joined node's policy table", mapped)
    finally:
        net.delete_namespaced_network_policy("joined-deny", "default")
        core.delete_namespaced_pod("joined-policed", "default", grace_period_seconds=0)


def _kubelet_address(core: client.CoreV1Api) -> tuple[str, int]:
    node = core.read_node(NODE)
    ip = next(a.address for a in node.status.addresses if a.type == "InternalIP")
    return ip, node.status.daemon_endpoints.kubelet_endpoint.port


def test_a_join_killed_half_way_can_be_run_again(stack, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL the join once containerd runs (its containerd and agent are orphaned, the node not yet
    Ready): the same command again stops what the first left, finishes the join, and reset cleans up."""
    join = _join_command(stack)
    name = "rejoined-node"
    root = tmp_path / "node3"
    core = stack.core_api()
    with lease_network("k") as net:
        table = f"pykubelet-netpol-{net.bridge}"
        scope = Scope.of(root, bridges=[net.bridge], pod_cidrs=[net.pod_cidr], nft_tables=[f"inet {table}"])
        argv = [
            sys.executable, "-m", "pykubelet", "join", *join,
            "--node-name", name, "--root-dir", str(root), "--foreground",
            "--pod-cidr", net.pod_cidr, "--bridge", net.bridge, "--port", str(free_port()),
            "--sandbox-image", stack.images.pause, "--registry-mirror", stack.registry.address,
        ]  # fmt: skip
        first_log, second_log = tmp_path / "join1.log", tmp_path / "join2.log"
        with open(first_log, "wb") as out:
            first = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        second = None
        try:
            _wait(
                "containerd of the first join",
                (root / "containerd" / "containerd.sock").exists,
                first,
                first_log,
            )
            first.kill()
            first.wait(timeout=10)
            orphans = scope.owned().as_dict().get("processes", [])
            assert any("containerd" in p for p in orphans), orphans
            with open(second_log, "wb") as out:
                second = subprocess.Popen(
                    argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                )
            # The first join's agent may have created the Node Ready already (an agent creates its Node
            # with its status), so Ready alone does not show the second join's work: wait for its own
            # containerd and agent (pids the first did not leave) beside a Ready node.
            orphan_pids = {p.split()[0] for p in orphans}

            def second_join_running() -> bool:
                procs = scope.owned().as_dict().get("processes", [])
                fresh = [p for p in procs if p.split()[0] not in orphan_pids]
                return (
                    any(" agent " in f" {p} " for p in fresh)
                    and any("/usr/bin/containerd" in p for p in fresh)
                    and _node_ready(core, name)
                )

            _wait(f"node {name} Ready on the second join's agent", second_join_running, second, second_log)
            # One containerd and one agent for the node: the first join's were stopped.
            procs = scope.owned().as_dict()["processes"]
            assert not {p.split()[0] for p in procs} & orphan_pids, (orphans, procs)
            assert sum(" agent " in f" {p} " for p in procs) == 1, procs
            assert sum("/usr/bin/containerd" in p for p in procs) == 1, procs
        finally:
            reset = _pykubelet("reset", "--root-dir", str(root), timeout=180)
            if second is not None:
                second.wait(timeout=60)
        assert reset.returncode == 0, reset.stderr
        assert not root.exists()
        assert scope.leaked() == {}
    core.delete_node(name)
