"""The webhook token authenticator on the real API server through the real kubectl: a bearer token no
other authenticator claims is sent to a TokenReview webhook written for the test (HTTPS, its own CA); its
answer is the user; a webhook that cannot be reached costs only its tokens a 401."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from pykubelet.rig.apiserver import ApiServer
from tests.controlplane.conftest import KUBECTL, Kubectl
from tests.controlplane.webhookserver import serving_in_thread

pytestmark = pytest.mark.integration


class TokenReviewer:
    """Answers TokenReviews: `good-token` is dave in group reviewers, anything else is refused."""

    def __init__(self, ca_pem: bytes) -> None:
        self.ca_pem = ca_pem
        self.port = 0
        self._stop: asyncio.Event | None = None
        self.reviews: list[dict[str, Any]] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        review = await request.json()
        self.reviews.append(review)
        token = review["spec"]["token"]
        status: dict[str, Any] = {"authenticated": False, "error": "unknown token"}
        if token == "good-token":
            status = {
                "authenticated": True,
                "user": {
                    "username": "dave",
                    "uid": "d-1",
                    "groups": ["reviewers"],
                    "extra": {"team": ["blue"]},
                },
            }
        return web.json_response(
            {"apiVersion": review["apiVersion"], "kind": "TokenReview", "status": status}
        )


def kubeconfig(path: Path, server: str, ca_pem: bytes) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "w",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": "w", "user": {}}],
        "contexts": [{"name": "w", "context": {"cluster": "w", "user": "w"}}],
        "current-context": "w",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApiServer, TokenReviewer, Kubectl]]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    d = tmp_path_factory.mktemp("tokenwebhook")
    with serving_in_thread(TokenReviewer, d, "127.0.0.1", (), "token webhook") as reviewer:
        config = kubeconfig(
            d / "webhook.kubeconfig", f"https://127.0.0.1:{reviewer.port}/review", reviewer.ca_pem
        )
        api = ApiServer(d / "server", extra_args=["--authentication-token-webhook-config-file", str(config)])
        api.start()
        try:
            yield api, reviewer, Kubectl(api.kubeconfig, d)
        finally:
            api.stop()
    assert not api.running


def test_the_webhook_names_the_user(setup: tuple[ApiServer, TokenReviewer, Kubectl]) -> None:
    _, reviewer, kubectl = setup
    proc = kubectl.run("auth", "whoami", "--token", "good-token", "-o", "json")
    assert json.loads(proc.stdout)["status"]["userInfo"] == {
        "username": "dave",
        "uid": "d-1",
        "groups": ["reviewers", "system:authenticated"],
        "extra": {"team": ["blue"]},
    }
    assert reviewer.reviews[-1]["apiVersion"] == "authentication.k8s.io/v1"
    asked = len(reviewer.reviews)
    kubectl("auth", "whoami", "--token", "good-token")
    assert len(reviewer.reviews) == asked  # the answer is kept (--authentication-token-webhook-cache-ttl)
    proc = kubectl.run("auth", "whoami", "--token", "bad-token", check=False)
    assert proc.returncode == 1 and "Unauthorized" in proc.stderr


def test_an_unreachable_webhook_costs_only_its_tokens(tmp_path: Path) -> None:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    config = kubeconfig(tmp_path / "webhook.kubeconfig", "https://127.0.0.1:9/review", b"")
    with ApiServer(
        tmp_path / "server", extra_args=["--authentication-token-webhook-config-file", str(config)]
    ) as api:
        kubectl = Kubectl(api.kubeconfig, tmp_path)
        proc = kubectl.run("auth", "whoami", "--token", "good-token", check=False)
        assert proc.returncode == 1 and "Unauthorized" in proc.stderr
        assert kubectl.run("get", "namespaces").returncode == 0
