"""kubeadm's token discovery (pykubelet.discovery) against the real API server with bootstrap tokens on and
the real bootstrapsigner signing cluster-info: a signing token yields the server and the pinned CA; a
token without a signature, a wrong token secret, a CA that does not match the pin and a server that is
not there (or never answers) are each refused with kubeadm's text, within a bound. No host lock: API only."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kubeclient import bootstraptoken as bt
from pykubelet.discovery import DiscoveryError, discover, parse_endpoint, parse_pins
from pykubelet.rig.apiserver import ApiServer
from tests.controllers.conftest import eventually, running
from tests.controlplane.joinutil import admin, put_token

pytestmark = pytest.mark.integration  # real servers, etcd or processes


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("join-api"), extra_args=["--enable-bootstrap-token-auth"]) as s:
        yield s


@pytest.fixture(scope="module")
async def signer(server: ApiServer) -> AsyncIterator[None]:
    async with running(server, "bootstrapsigner"):
        yield


def _signed_for(server: ApiServer, token_id: str) -> bool:
    status, cm = admin(
        server, "GET", f"/api/v1/namespaces/{bt.CLUSTER_INFO_NAMESPACE}/configmaps/{bt.CLUSTER_INFO}"
    )
    return status == 200 and f"{bt.JWS_PREFIX}{token_id}" in (cm.get("data") or {})


async def _signing_token(server: ApiServer) -> str:
    token = bt.generate()
    put_token(server, token)
    await eventually(lambda: _signed_for(server, token[:6]), what="cluster-info signed for the token")
    return token


def _pin(server: ApiServer) -> str:
    return bt.ca_cert_hash(server.ca_cert.read_bytes())


async def test_signed_cluster_info_with_the_right_pin_is_trusted(server: ApiServer, signer: None) -> None:
    token = await _signing_token(server)
    info = await asyncio.to_thread(discover, server.url, token, [_pin(server)])
    assert info.ca_pem.strip() == server.ca_cert.read_bytes().strip()
    assert info.ca_hash == _pin(server)
    assert parse_endpoint(info.server) == parse_endpoint(server.url)
    # kubeadm's bare HOST:PORT form works as well.
    bare = server.url.removeprefix("https://")
    assert (
        await asyncio.to_thread(discover, bare, token, [_pin(server).upper().replace("SHA256", "sha256")])
    ).ca_hash


async def test_token_without_a_signature_is_refused(server: ApiServer, signer: None) -> None:
    signing = await _signing_token(server)  # cluster-info is signed, just not for the token below
    assert signing
    unsigned = bt.generate()
    put_token(server, unsigned, usages=("authentication",))
    with pytest.raises(DiscoveryError) as err:
        await asyncio.to_thread(discover, server.url, unsigned, [_pin(server)])
    assert (
        f'could not find a JWS signature in the cluster-info ConfigMap for token ID "{unsigned[:6]}"'
        in str(err.value)
    )
    assert unsigned[7:] not in str(err.value)  # never the token secret


async def test_wrong_token_secret_is_refused(server: ApiServer, signer: None) -> None:
    token = await _signing_token(server)
    forged = token[:7] + ("a" if token[7] != "a" else "b") + token[8:]
    with pytest.raises(
        DiscoveryError,
        match="failed to verify JWS signature of received cluster info object, can't trust this API Server",
    ):
        await asyncio.to_thread(discover, server.url, forged, [_pin(server)])


async def test_ca_that_does_not_match_the_pin_is_refused_naming_both(server: ApiServer, signer: None) -> None:
    token = await _signing_token(server)
    wrong = "sha256:" + "0" * 64
    with pytest.raises(DiscoveryError) as err:
        await asyncio.to_thread(discover, server.url, token, [wrong])
    text = str(err.value)
    assert "cluster CA found in cluster-info ConfigMap is invalid" in text
    assert _pin(server) in text and wrong in text


def test_unreachable_server_fails_fast_naming_the_address() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    token = bt.generate()
    with pytest.raises(DiscoveryError) as err:
        discover(f"https://127.0.0.1:{port}", token, ["sha256:" + "1" * 64], timeout=2)
    assert f"127.0.0.1:{port}" in str(err.value) and "refused" in str(err.value).lower()


def test_server_that_never_answers_fails_within_the_bound() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # the kernel completes the handshake; nobody ever speaks TLS
        port = listener.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(DiscoveryError) as err:
            discover(f"127.0.0.1:{port}", bt.generate(), ["sha256:" + "1" * 64], timeout=1)
        elapsed = time.monotonic() - started
    assert elapsed < 5, elapsed
    assert f"127.0.0.1:{port}" in str(err.value) and "no answer within 1 s" in str(err.value)


@pytest.mark.parametrize(
    "pins, message",
    [
        ([], "without --discovery-token-ca-cert-hash is not supported"),
        (["md5:abcd"], 'invalid hash "md5:abcd"'),
        (["sha256:12"], 'invalid hash "sha256:12"'),
    ],
)
def test_bad_pins_are_refused(pins: list[str], message: str) -> None:
    with pytest.raises(DiscoveryError, match=message):
        parse_pins(pins)


@pytest.mark.parametrize(
    "endpoint", ["http://h:6443", "https://h:6443/api", "https://:6443", "https://h:port"]
)
def test_bad_endpoints_are_refused(endpoint: str) -> None:
    with pytest.raises(DiscoveryError, match="invalid API server endpoint"):
        parse_endpoint(endpoint)


def _join(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pykubelet", "join", *args], capture_output=True, text=True, timeout=60
    )


async def test_join_with_a_wrong_ca_hash_refuses_and_writes_nothing(
    server: ApiServer, signer: None, tmp_path: Path
) -> None:
    token = await _signing_token(server)
    root = tmp_path / "node"
    wrong = "sha256:" + "ab" * 32
    done = await asyncio.to_thread(
        _join, server.url, "--token", token, "--discovery-token-ca-cert-hash", wrong, "--root-dir", str(root)
    )
    assert done.returncode == 1, done.stderr
    assert "error execution phase preflight: couldn't validate the identity of the API Server" in done.stderr
    assert _pin(server) in done.stderr and wrong in done.stderr
    assert not root.exists() and list(tmp_path.iterdir()) == []


async def test_join_with_an_unsigned_token_refuses_and_writes_nothing(
    server: ApiServer, signer: None, tmp_path: Path
) -> None:
    root = tmp_path / "node"
    stranger = bt.generate()  # no Secret at all: cluster-info carries no signature for it
    done = await asyncio.to_thread(
        _join,
        server.url,
        "--token",
        stranger,
        "--discovery-token-ca-cert-hash",
        _pin(server),
        "--root-dir",
        str(root),
    )
    assert done.returncode == 1
    assert f'token id "{stranger[:6]}" is invalid for this cluster or it has expired' in done.stderr
    assert stranger[7:] not in done.stderr
    assert not root.exists()


def test_join_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("no systemd-analyze")
    from pykubelet.join import AGENT_UNIT, NETPOLICY_UNIT, netpolicy_argv, units
    from pykubelet.rig.nodeplan import NodePlan, agent_argv

    plan = NodePlan(tmp_path, "n1", "10.244.9.0/24", "pykbr9", 10250, "pause", "", False)
    containerd = ["/usr/bin/containerd", "--config", "/x.toml"]
    written = units(plan, containerd, agent_argv(plan, "unix:///s"), netpolicy_argv(plan))
    assert "--nft-table pykubelet-netpol-pykbr9" in written[NETPOLICY_UNIT]
    for name, text in written.items():
        (tmp_path / name).write_text(text)
    done = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            str(tmp_path / AGENT_UNIT),
            str(tmp_path / "pykubelet-containerd.service"),
            str(tmp_path / NETPOLICY_UNIT),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "pykubelet" not in done.stderr, done.stderr


def test_join_with_a_label_a_kubelet_may_not_set_refuses_and_writes_nothing(tmp_path: Path) -> None:
    """Refused before discovery: the agent would refuse to start with it (agent.nodelabels)."""
    root = tmp_path / "node"
    done = _join(
        "https://127.0.0.1:1", "--token", bt.generate(), "--discovery-token-ca-cert-hash", "sha256:" + "1" * 64,
        "--root-dir", str(root), "--node-labels", "topology.kubernetes.io/zone=a,node-role.kubernetes.io/x=",
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith(
        "pykubelet join: unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: "
        "[node-role.kubernetes.io/x]\n"
    ), done.stderr
    assert not root.exists()
