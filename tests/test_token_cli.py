"""`pykubelet token create|list|delete` as a person runs it, against the real API server with bootstrap
token auth: kubeadm's output shapes, the join command's CA hash, a created token authenticating as its
bootstrap identity, validation of flags, and delete by id or whole token."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from kubeclient import bootstraptoken as bt
from pykubelet.rig.apiserver import ApiServer
from tests.controlplane.joinutil import whoami

pytestmark = pytest.mark.integration  # real servers, etcd or processes


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("token-api"), extra_args=["--enable-bootstrap-token-auth"]) as s:
        yield s


def token_cmd(server: ApiServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(server.kubeconfig)}
    return subprocess.run(
        [sys.executable, "-m", "pykubelet", "token", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_create_prints_the_token_which_authenticates(server: ApiServer) -> None:
    proc = token_cmd(server, "create", "--description", "for node 2")
    assert proc.returncode == 0, proc.stderr
    token = proc.stdout.strip()
    assert bt.TOKEN_RE.match(token), proc.stdout
    status, review = whoami(server, token)
    assert status == 201
    assert review["status"]["userInfo"]["groups"][:2] == ["system:bootstrappers", bt.KUBEADM_DEFAULT_GROUP]


def test_print_join_command(server: ApiServer) -> None:
    proc = token_cmd(server, "create", "abcdef.0123456789abcdef", "--ttl", "1h", "--print-join-command")
    assert proc.returncode == 0, proc.stderr
    expected_hash = bt.ca_cert_hash(server.ca_cert.read_bytes())
    assert proc.stdout == (
        f"pykubelet join {server.url} --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash {expected_hash}\n"
    )
    again = token_cmd(server, "create", "abcdef.0123456789abcdef")
    assert again.returncode == 1
    assert again.stderr.strip() == 'error: a token with id "abcdef" already exists'


def test_list_shows_kubeadms_table(server: ApiServer) -> None:
    token = "zyxwvu.0123456789abcdef"
    assert (
        token_cmd(server, "create", token, "--ttl", "2h", "--groups", "system:bootstrappers:x").returncode
        == 0
    )
    forever = "qwerty.0123456789abcdef"
    assert (
        token_cmd(server, "create", forever, "--ttl", "0", "--usages", "signing", "--groups", "").returncode
        == 0
    )
    proc = token_cmd(server, "list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["TOKEN", "TTL", "EXPIRES", "USAGES", "DESCRIPTION", "EXTRA", "GROUPS"]
    row = next(line for line in lines if line.startswith(token))
    cells = row.split()
    assert cells[1] in ("1h", "2h")
    expires = dt.datetime.fromisoformat(cells[2].replace("Z", "+00:00"))
    assert abs((expires - dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)).total_seconds()) < 120
    assert cells[3:] == ["authentication,signing", "<none>", "system:bootstrappers:x"]
    other = next(line for line in lines if line.startswith(forever)).split()
    assert other[1:] == ["<forever>", "<never>", "signing", "<none>", "<none>"]
    # Columns line up as tabwriter's do.
    assert row.index("authentication") == lines[0].index("USAGES")


@pytest.mark.parametrize(
    "args, message",
    [
        (("create", "not-a-token"), 'error: the bootstrap token "not-a-token" was not of the form'),
        (("create", "--groups", "system:masters"), "error: bootstrap group 'system:masters' is invalid"),
        (("create", "--usages", "signing,flying"), "error: invalid bootstrap token usage string: flying"),
        (("delete", "nope"), "error: given token didn't match pattern"),
        (("delete", "aaaaaa"), 'error: bootstrap token "aaaaaa" not found'),
    ],
)
def test_bad_input_is_refused_clearly(server: ApiServer, args: tuple[str, ...], message: str) -> None:
    proc = token_cmd(server, *args)
    assert proc.returncode == 1, proc.stdout
    assert proc.stderr.startswith(message), proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_bad_ttl_is_refused_as_a_flag_value(server: ApiServer) -> None:
    """--ttl is a Go duration: a bad one is a flag error naming it (exit 2, Go's message)."""
    proc = token_cmd(server, "create", "--ttl", "soon")
    assert proc.returncode == 2
    assert 'argument --ttl: time: invalid duration "soon"' in proc.stderr


def test_delete_by_id_and_by_token(server: ApiServer) -> None:
    first, second = bt.generate(), bt.generate()
    for token in (first, second):
        assert token_cmd(server, "create", token).returncode == 0
    proc = token_cmd(server, "delete", first[:6], second)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f'bootstrap token "{first[:6]}" deleted\nbootstrap token "{second[:6]}" deleted\n'
    assert whoami(server, first)[0] == 401
    assert first[:6] not in token_cmd(server, "list").stdout
