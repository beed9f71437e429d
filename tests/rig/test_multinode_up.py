"""`pykubelet up --nodes 2`: two nodes on this machine, each with its own containerd, root dir, kubelet
port and bridge, both Ready with a pod CIDR the node IPAM gave them from --cluster-cidr, labelled at
registration with `--zones` (one each) and `--node-labels`, both joined by TLS bootstrap (a bootstrap
token's CSR, approved and signed) and running as system:node:<name>; an expired bootstrap token cannot
join; `pykubelet down` then leaves nothing: no process, mount or netns under the state dir, neither
bridge, no route into the cluster range, no NAT entry, no proxy table.
Real containerd: run under the host lock."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID
from kubernetes import client, config

from kubeclient import bootstraptoken as bt
from pykubelet.rig.leaks import Scope
from pykubelet.rig.netlease import lease_cluster_network
from pykubelet.rig.nodes import node_bridge
from pykubelet.rig.process import free_port
from pykubelet.rig.stack import StackRecord, proxy_table
from tests.rig.stacks import run_pykubelet as _pykubelet
from tests.rig.stacks import up_cluster

pytestmark = pytest.mark.integration
FIRST = "mn"
SECOND = f"{FIRST}-2"


def _routes_into(cidr: str) -> list[str]:
    out = subprocess.run(["ip", "-j", "-4", "route", "show", "table", "all"], capture_output=True, text=True)
    net = ipaddress.IPv4Network(cidr)
    return [
        f"{r['dst']} dev {r.get('dev', '')}"
        for r in json.loads(out.stdout or "[]")
        if r.get("dst", "default") != "default"
        and ipaddress.IPv4Network(r["dst"], strict=False).overlaps(net)
    ]


def _client_cn(kubeconfig: Path) -> str:
    doc = yaml.safe_load(kubeconfig.read_text())
    (user,) = doc["users"]
    cert = x509.load_pem_x509_certificate(Path(user["user"]["client-certificate"]).read_bytes())
    return cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value


def test_up_two_nodes_ipam_bootstrap_identities_then_down_leaves_nothing(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    tmp_path = tmp_path_factory.mktemp("mn")  # short: containerd's socket paths are limited to 104 bytes
    state = tmp_path / "s"
    with lease_cluster_network("u") as lease:
        up, scope, bridges = up_cluster(
            state, lease, FIRST, 2, "--zones", "zone-a,zone-b", "--node-labels", "example.com/pool=blue"
        )
        try:
            assert up.returncode == 0, up.stderr[-4000:]
            kubeconfig = state / "apiserver" / "admin.kubeconfig"
            core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
            _check_nodes(core, state, lease.pod_cidr, bridges)
            _expired_token_cannot_join(core, tmp_path)
        finally:
            down = _pykubelet("down", "--state-dir", str(state), timeout=300)
        assert down.returncode == 0, down.stderr[-4000:]
        assert scope.leaked() == {}
        assert _routes_into(lease.pod_cidr) == []


def _check_nodes(core: client.CoreV1Api, state: Path, cluster_cidr: str, bridges: list[str]) -> None:
    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert sorted(nodes) == [FIRST, SECOND]
    cidrs = []
    for name, node in nodes.items():
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions), name
        # The node IPAM's: a /24 of the cluster range, in both fields.
        assert node.spec.pod_cidrs == [node.spec.pod_cidr], name
        block = ipaddress.IPv4Network(node.spec.pod_cidr)
        assert block.prefixlen == 24 and block.subnet_of(ipaddress.IPv4Network(cluster_cidr)), block
        cidrs.append(block)
    assert cidrs[0] != cidrs[1]
    # Each agent registered its Node with up's labels (--node-labels): the zones dealt in turn.
    for name, zone in ((FIRST, "zone-a"), (SECOND, "zone-b")):
        labels = nodes[name].metadata.labels
        assert (labels["topology.kubernetes.io/zone"], labels["example.com/pool"]) == (zone, "blue"), labels
    # A pod on each node takes an address of its node's block; each node's bridge on the host then
    # carries its block's gateway: the host's route to that node's pods, the way between the networks.
    image = f"{StackRecord.load(state).registry}/library/busybox:latest"
    for name in (FIRST, SECOND):
        core.create_namespaced_pod("default", _sleeper(f"on-{name}", name, image))
    for bridge, name in zip(bridges, (FIRST, SECOND), strict=True):
        block = ipaddress.IPv4Network(nodes[name].spec.pod_cidr)
        ip = _wait_pod_ip(core, f"on-{name}")
        assert ipaddress.IPv4Address(ip) in block, (name, ip, block)
        assert f"{block} dev {bridge}" in _routes_into(str(block)), (bridge, _routes_into(str(block)))
    # Their own ports and containerds.
    ports = {n.status.daemon_endpoints.kubelet_endpoint.port for n in nodes.values()}
    assert len(ports) == 2
    assert (state / "containerd" / "containerd.sock").exists()
    assert (state / "nodes" / SECOND / "containerd" / "containerd.sock").exists()
    # Both joined by TLS bootstrap: a CSR each, from a bootstrap token, approved and signed, and the
    # agents run on certificates for system:node:<name>.
    csrs = client.CertificatesV1Api(core.api_client).list_certificate_signing_request().items
    client_csrs = [c for c in csrs if c.spec.signer_name == "kubernetes.io/kube-apiserver-client-kubelet"]
    subjects = set()
    for csr in client_csrs:
        assert csr.spec.username.startswith("system:bootstrap:"), csr.spec.username
        assert [(c.type, c.reason) for c in csr.status.conditions] == [("Approved", "AutoApproved")]
        cert = x509.load_pem_x509_certificate(base64.b64decode(csr.status.certificate))
        subjects.add(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)
    assert subjects == {f"system:node:{FIRST}", f"system:node:{SECOND}"}
    assert _client_cn(state / "agent" / "kubeconfig") == f"system:node:{FIRST}"
    assert _client_cn(state / "nodes" / SECOND / "agent" / "kubeconfig") == f"system:node:{SECOND}"


def _sleeper(name: str, node: str, image: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": image, "command": ["sleep", "3600"]}],
        },
    }


def _wait_pod_ip(core: client.CoreV1Api, name: str, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    pod = None
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, "default")
        if pod.status.phase == "Running" and pod.status.pod_ip:
            return pod.status.pod_ip
        time.sleep(0.5)
    raise AssertionError(f"pod {name} not Running with an IP: {pod.status if pod else None}")


def _expired_token_cannot_join(core: client.CoreV1Api, tmp_path: Path) -> None:
    """A token past its expiration: its bearer gets 401, and join refuses with kubeadm's discovery
    message (the cluster-info ConfigMap carries no signature for it), writing nothing."""
    import datetime as dt

    token = bt.generate()
    an_hour_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    core.create_namespaced_secret(bt.NAMESPACE, bt.token_secret(token, 600, now=an_hour_ago))
    server = core.api_client.configuration.host
    bearer = subprocess.run(
        ["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "-H", f"Authorization: Bearer {token}",
         f"{server}/api/v1/namespaces/default/pods"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert bearer.stdout == "401"
    ca_hash = bt.ca_cert_hash(Path(core.api_client.configuration.ssl_ca_cert).read_bytes())
    root = tmp_path / "expired-node"
    joined = _pykubelet(
        "join", server, "--token", token, "--discovery-token-ca-cert-hash", ca_hash,
        "--node-name", "expired-node", "--root-dir", str(root), "--foreground", "--discovery-timeout", "3s",
        timeout=60,
    )  # fmt: skip
    assert joined.returncode == 1, joined.stderr
    assert "couldn't validate the identity of the API Server" in joined.stderr, joined.stderr
    assert token.split(".")[1] not in joined.stderr
    assert not root.exists()


def test_down_after_up_of_two_nodes_was_killed_while_the_second_joined(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """SIGKILL `up --nodes 2` once the second node's agent exists (its containerd running, its TLS
    bootstrap under way): nothing stopped the stack, and `down` still leaves nothing."""
    import signal

    tmp_path = tmp_path_factory.mktemp("mk")
    state = tmp_path / "s"
    node_record = state / "nodes" / SECOND
    with lease_cluster_network("k") as lease:
        bridges = [lease.bridge, node_bridge(lease.bridge, 2)]
        scope = Scope.of(
            state, bridges=bridges, pod_cidrs=[lease.pod_cidr], nft_tables=[f"ip {proxy_table(lease.bridge)}"]
        )
        log = tmp_path / "up.log"
        argv = [
            sys.executable, "-m", "pykubelet", "up", "--state-dir", str(state), "--api-port", str(free_port()),
            "--node-name", FIRST, "--nodes", "2", "--cluster-cidr", lease.pod_cidr, "--bridge", lease.bridge,
            "--no-example",
        ]  # fmt: skip
        with open(log, "wb") as out:
            up = subprocess.Popen(argv, stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + 300
            while not ((r := StackRecord.load(node_record)) is not None and "agent" in r.pids):
                assert up.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.05)
            up.send_signal(signal.SIGKILL)
            up.wait(timeout=30)
            left = scope.owned().as_dict().get("processes", [])
            assert any(str(node_record / "containerd") in p for p in left), left
        finally:
            if up.poll() is None:
                up.kill()
                up.wait()
            down = _pykubelet("down", "--state-dir", str(state), timeout=300)
        assert down.returncode == 0, down.stderr[-4000:]
        assert scope.leaked() == {}
        assert _routes_into(lease.pod_cidr) == []


def test_the_multinode_e2e_scenarios_on_three_nodes_in_two_zones(tmp_path: Path) -> None:
    """e2e/test_multinode.py skips on the one-node stack the suite's e2e session runs; here it runs on a
    stack of its own of three nodes in zones a, b, a (PYKUBE_NODES=3 and PYKUBE_ZONES, the e2e conftest's
    multi-node mode, with its leak check) so cross-node pod-to-pod and pod-to-Service traffic, drain moving
    a Deployment within its PDB, a DaemonSet on every node, the scheduler's anti-affinity, spread across
    the zones and preemption decisions (e2e/test_scheduling_multinode.py, with upstream's messages for three
    nodes) and NetworkPolicy enforced across nodes (e2e/test_networkpolicy_multinode.py) are checked on
    every run, not only by hand."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "PYTEST_ADDOPTS")}
    env["PYKUBE_NODES"] = "3"
    env["PYKUBE_ZONES"] = "zone-a,zone-b"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rs",
            "e2e/test_multinode.py",
            "e2e/test_scheduling_multinode.py",
            "e2e/test_networkpolicy_multinode.py",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = done.stdout[-6000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert "8 passed" in done.stdout and "skipped" not in done.stdout, tail
