"""--authentication-config on the real API server through the real kubectl: a token of an OIDC issuer
written for the test (discovery + JWKS over its own CA) logs in with the username and groups the claim
mappings make; a CEL claim rule and a user rule refuse what they should; an issuer that cannot be reached
only costs its own tokens a 401; a bad file stops the start naming the field."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
import yaml

from e2e.waiting import wait_for
from pykubelet.rig.apiserver import ApiServer
from tests.controlplane.conftest import KUBECTL, Kubectl
from tests.controlplane.oidcissuer import Issuer, issuer

pytestmark = pytest.mark.integration


def config(issuer: Issuer) -> dict:
    return {
        "apiVersion": "apiserver.config.k8s.io/v1beta1",
        "kind": "AuthenticationConfiguration",
        "jwt": [
            {
                "issuer": {
                    "url": issuer.url,
                    "audiences": ["kubernetes"],
                    "certificateAuthority": issuer.ca_pem.decode(),
                },
                "claimValidationRules": [
                    {
                        "expression": 'claims.hd == "example.com"',
                        "message": "the hosted domain must be example.com",
                    }
                ],
                "claimMappings": {
                    "username": {"claim": "email", "prefix": "oidc:"},
                    "groups": {"claim": "groups", "prefix": "oidc:"},
                    "uid": {"claim": "sub"},
                    "extra": [{"key": "example.com/tenant", "valueExpression": "claims.tenant"}],
                },
                "userValidationRules": [
                    {"expression": "!user.username.startsWith('oidc:root')", "message": "no root"}
                ],
            },
            {
                "issuer": {
                    "url": "https://127.0.0.1:9",
                    "audiences": ["kubernetes"],
                },  # nothing listens there
                "claimMappings": {"username": {"claim": "sub", "prefix": ""}},
            },
        ],
    }


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApiServer, Issuer, Kubectl]]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    d = tmp_path_factory.mktemp("authn")
    with issuer(d) as served:
        (d / "authn.yaml").write_text(yaml.safe_dump(config(served)))
        api = ApiServer(d / "server", extra_args=["--authentication-config", str(d / "authn.yaml")])
        api.start()
        try:
            yield api, served, Kubectl(api.kubeconfig, d)
        finally:
            api.stop()
    assert not api.running


def whoami(kubectl: Kubectl, token: str) -> subprocess.CompletedProcess[str]:
    return kubectl.run("auth", "whoami", "--token", token, "-o", "yaml", check=False)


def login(kubectl: Kubectl, token: str, timeout: float = 30) -> dict:
    """The user the token logs in as, once the server has the issuer's keys (fetched at start)."""

    def logged_in() -> dict | None:
        proc = whoami(kubectl, token)
        return yaml.safe_load(proc.stdout)["status"]["userInfo"] if proc.returncode == 0 else None

    return wait_for(logged_in, timeout, 0.2, "a login with the token")


def test_an_external_token_logs_in_with_the_mapped_user(setup: tuple[ApiServer, Issuer, Kubectl]) -> None:
    _, served, kubectl = setup
    token = served.token(
        aud="kubernetes",
        sub="u-123",
        email="alice@example.com",
        email_verified=True,
        hd="example.com",
        groups=["dev", "ops"],
        tenant="blue",
    )
    user = login(kubectl, token)
    assert user == {
        "username": "oidc:alice@example.com",
        "uid": "u-123",
        "groups": ["oidc:dev", "oidc:ops", "system:authenticated"],
        "extra": {"example.com/tenant": ["blue"]},
    }
    # The mapped user is what RBAC sees: nothing is granted to it yet.
    proc = kubectl.run("get", "pods", "--token", token, check=False)
    assert 'User "oidc:alice@example.com" cannot list resource "pods"' in proc.stderr


def test_rules_refuse_and_other_tokens_get_401(setup: tuple[ApiServer, Issuer, Kubectl]) -> None:
    _, served, kubectl = setup
    good = {
        "aud": "kubernetes",
        "sub": "u-1",
        "email": "bob@example.com",
        "hd": "example.com",
        "tenant": "red",
    }
    login(kubectl, served.token(**good))  # the keys are there
    for claims in (
        {**good, "hd": "evil.com"},  # the CEL claim rule
        {**good, "email": "root@example.com"},  # the user rule
        {**good, "aud": "someone-else"},  # not our audience
        {**good, "email_verified": False},  # the email claim needs a verified email
        {k: v for k, v in good.items() if k != "tenant"},  # an extra mapping's expression fails: refused
    ):
        proc = whoami(kubectl, served.token(**claims))
        assert proc.returncode == 1 and "Unauthorized" in proc.stderr, claims
    proc = whoami(kubectl, served.token(lifetime=-120, **good))  # expired
    assert proc.returncode == 1
    # A token of the issuer nobody can reach: 401, and the API goes on for everyone else.
    unreachable = jwt.encode(
        {**good, "iss": "https://127.0.0.1:9", "exp": int(time.time()) + 60}, served.key, algorithm="RS256"
    )
    assert whoami(kubectl, unreachable).returncode == 1
    assert kubectl.run("get", "namespaces").returncode == 0


def test_the_file_is_reloaded_when_it_changes(setup: tuple[ApiServer, Issuer, Kubectl]) -> None:
    server, served, kubectl = setup
    path = server.data_dir.parent / "authn.yaml"
    original = path.read_text()
    claims = {"aud": "kubernetes", "email": "carol@example.com", "hd": "example.com", "tenant": "t"}
    assert login(kubectl, served.token(sub="c-1", **claims))["username"] == "oidc:carol@example.com"
    changed = config(served)
    changed["jwt"][0]["claimMappings"]["username"]["prefix"] = "sso:"
    try:
        path.write_text("jwt: [unclosed")  # a broken edit: refused, the last good configuration stays
        path.write_text(yaml.safe_dump(changed))
        wait_for(
            lambda: login(kubectl, served.token(sub="c-2", **claims))["username"] == "sso:carol@example.com",
            30,
            0.2,
            "the changed file reloaded",
        )
    finally:
        path.write_text(original)
        deadline = time.monotonic() + 30
        while login(kubectl, served.token(sub="c-3", **claims))["username"] != "oidc:carol@example.com":
            assert time.monotonic() < deadline, "the original file was not reloaded"
            time.sleep(0.2)


def test_a_bad_file_stops_the_start_naming_the_field(tmp_path: Path) -> None:
    bad = {
        "apiVersion": "apiserver.config.k8s.io/v1beta1",
        "kind": "AuthenticationConfiguration",
        "jwt": [
            {
                "issuer": {"url": "http://issuer.example.com", "audiences": []},
                "claimMappings": {
                    "username": {"claim": "email"},
                    "groups": {"expression": "claims.groups +"},
                },
            }
        ],
    }
    path = tmp_path / "authn.yaml"
    path.write_text(yaml.safe_dump(bad))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pykubelet",
            "server",
            "--data-dir",
            str(tmp_path / "d"),
            "--authentication-config",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    err = proc.stderr
    assert "--authentication-config" in err
    assert 'jwt[0].issuer.url: Invalid value: "http://issuer.example.com": URL scheme must be https' in err
    assert "jwt[0].issuer.audiences: Required value: at least one jwt[0].issuer.audiences is required" in err
    assert "jwt[0].claimMappings.username.prefix: Required value: prefix is required when claim is set" in err
    assert "jwt[0].claimMappings.groups.expression: Invalid value:" in err and "compilation failed" in err
