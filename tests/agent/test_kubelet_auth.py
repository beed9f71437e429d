"""The kubelet API's authentication and authorization (agent/server/auth.py, through KubeletServer over
TLS), against a small aiohttp stand-in for the API server's TokenReview and SubjectAccessReview whose
answers the test chooses: the deny path, the attribute mapping, the caches and upstream's answers."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agent.kube.tokens import CredentialClient
from agent.server.auth import KubeletAuth, TTLCache, User, request_attributes
from agent.server.http import KubeletServer
from agent.server.tls import ensure_self_signed, server_context
from kubeclient.client import KubeClient
from kubeclient.config import ClusterConfig
from tests.clientpki import client_pki

GOOD_TOKEN = "good-token-value-0123456789"
NODE = "n1"


@dataclass
class StandIn:
    """The API server's review endpoints, answering as told and recording what they were asked."""

    users: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            GOOD_TOKEN: {
                "username": "system:serviceaccount:ns:sa",
                "uid": "u-1",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/pod-name": ["p"]},
            }
        }
    )
    allow: set[str] = field(default_factory=set)  # user names the SAR allows
    broken: bool = False
    token_reviews: list[dict[str, Any]] = field(default_factory=list)
    access_reviews: list[dict[str, Any]] = field(default_factory=list)

    async def token_review(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.token_reviews.append(body["spec"])
        user = self.users.get(body["spec"]["token"])
        status = (
            {"authenticated": True, "user": user}
            if user
            else {"authenticated": False, "error": "invalid bearer token"}
        )
        return web.json_response({**body, "status": status}, status=201)

    async def access_review(self, request: web.Request) -> web.Response:
        if self.broken:
            return web.json_response(
                {"kind": "Status", "code": 500, "reason": "InternalError", "message": "boom"}, status=500
            )
        body = await request.json()
        self.access_reviews.append(body["spec"])
        allowed = body["spec"]["user"] in self.allow
        status = {"allowed": allowed, "reason": "" if allowed else "no RBAC policy matched"}
        return web.json_response({**body, "status": status}, status=201)


@dataclass
class Rig:
    api: StandIn
    base: str
    pki: dict[str, Path]
    auth: KubeletAuth

    def tls(self, with_cert: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        if with_cert:
            context.load_cert_chain(self.pki["cert"], self.pki["key"])
        return context

    async def get(
        self, path: str, token: str | None = None, with_cert: bool = False, method: str = "GET"
    ) -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with (
            aiohttp.ClientSession() as http,
            http.request(
                method, self.base + path, headers=headers, ssl=self.tls(with_cert), allow_redirects=False
            ) as resp,
        ):
            return resp.status, await resp.text()


async def _rig(tmp_path: Path, **auth_options: Any) -> AsyncIterator[Rig]:
    api = StandIn()
    app = web.Application()
    app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", api.token_review)
    app.router.add_post("/apis/authorization.k8s.io/v1/subjectaccessreviews", api.access_review)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = KubeClient(ClusterConfig(server=f"http://127.0.0.1:{port}"), max_attempts=1)
    credentials = CredentialClient(client)
    pki = client_pki(tmp_path, "kube-apiserver-kubelet-client", ("system:masters",), "client-ca")
    auth = KubeletAuth(
        NODE, review_token=credentials.review_token, review_access=credentials.review_access, **auth_options
    )
    cert, key = ensure_self_signed(tmp_path / "pki", NODE, ["127.0.0.1"])
    server = KubeletServer(
        None,
        lambda ns, name: None,
        lambda: [{"metadata": {"name": "p"}}],  # type: ignore[arg-type]
        auth=auth,
        ssl_context=server_context(cert, key, str(pki["ca"])),
    )
    await server.start("127.0.0.1", 0)
    try:
        yield Rig(api, f"https://127.0.0.1:{server.port}", pki, auth)
    finally:
        await server.stop()
        await client.close()
        await runner.cleanup()


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async for r in _rig(tmp_path):
        yield r


async def test_no_credentials_or_a_bad_token_is_401(rig: Rig):
    assert await rig.get("/pods") == (401, "Unauthorized")
    assert await rig.get("/healthz") == (401, "Unauthorized")  # the secure port's healthz is no exception
    assert await rig.get("/pods", token="wrong") == (401, "Unauthorized")
    assert rig.api.access_reviews == []  # nothing to authorize


async def test_the_review_says_no_403_with_upstreams_text(rig: Rig):
    status, text = await rig.get("/pods", token=GOOD_TOKEN)
    assert (status, text) == (
        403,
        "Forbidden (user=system:serviceaccount:ns:sa, verb=get, resource=nodes, subresource=proxy)",
    )
    assert rig.api.access_reviews == [
        {
            "resourceAttributes": {
                "verb": "get",
                "version": "v1",
                "resource": "nodes",
                "subresource": "proxy",
                "name": NODE,
            },
            "user": "system:serviceaccount:ns:sa",
            "uid": "u-1",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"],
            "extra": {"authentication.kubernetes.io/pod-name": ["p"]},
        }
    ]
    rig.api.allow.add("system:serviceaccount:ns:sa")
    # The denial is remembered for cacheUnauthorizedTTL: still 403 without asking again.
    assert (await rig.get("/pods", token=GOOD_TOKEN))[0] == 403 and len(rig.api.access_reviews) == 1


async def test_allowed_requests_and_the_caches(rig: Rig):
    rig.api.allow.add("system:serviceaccount:ns:sa")
    status, text = await rig.get("/pods", token=GOOD_TOKEN)
    assert status == 200 and '"name": "p"' in text
    assert (await rig.get("/pods", token=GOOD_TOKEN))[0] == 200
    # One TokenReview and one SubjectAccessReview for both requests, and the token was asked as is.
    assert rig.api.token_reviews == [{"token": GOOD_TOKEN}] and len(rig.api.access_reviews) == 1


async def test_client_certificates_are_authorized_with_their_groups(rig: Rig):
    rig.api.allow.add("kube-apiserver-kubelet-client")
    assert (await rig.get("/pods", with_cert=True))[0] == 200
    review = rig.api.access_reviews[0]
    assert review["user"] == "kube-apiserver-kubelet-client" and review["groups"] == [
        "system:masters",
        "system:authenticated",
    ]
    assert rig.api.token_reviews == []
    # exec is a POST: verb create on nodes/proxy (404 here: no such pod, but only after authorization;
    # a stream is asked for, else upstream's kubelet refuses the options first, 400).
    assert (await rig.get("/exec/ns/p/c?command=true&output=1", with_cert=True, method="POST"))[0] == 404
    assert rig.api.access_reviews[-1]["resourceAttributes"]["verb"] == "create"


async def test_authorization_errors_are_500(rig: Rig):
    rig.api.broken = True
    status, text = await rig.get("/pods", with_cert=True)
    assert (status, text) == (
        500,
        "Authorization error (user=kube-apiserver-kubelet-client, verb=get, resource=nodes, subresource=proxy)",
    )
    rig.api.broken = False
    rig.api.allow.add("kube-apiserver-kubelet-client")
    assert (await rig.get("/pods", with_cert=True))[0] == 200  # errors are not remembered


async def test_anonymous_when_enabled_is_still_authorized(tmp_path: Path):
    async for rig in _rig(tmp_path, anonymous=True):
        assert (await rig.get("/pods"))[0] == 403
        assert rig.api.access_reviews[0]["user"] == "system:anonymous"
        assert rig.api.access_reviews[0]["groups"] == ["system:unauthenticated"]


def test_attribute_mapping_is_upstreams():
    user = User("u")
    cases = {
        ("GET", "/stats/summary"): ("get", "stats"),
        ("GET", "/stats"): ("get", "stats"),
        ("GET", "/metrics"): ("get", "metrics"),
        ("GET", "/metrics/probes"): ("get", "metrics"),
        ("GET", "/metrics/cadvisor"): ("get", "metrics"),
        ("GET", "/logs/"): ("get", "log"),
        ("GET", "/statsx"): ("get", "proxy"),
        ("GET", "/containerLogs/ns/p/c"): ("get", "proxy"),
        ("GET", "/pods"): ("get", "proxy"),
        ("POST", "/exec/ns/p/c"): ("create", "proxy"),
        ("GET", "/exec/ns/p/c"): ("get", "proxy"),
        ("POST", "/attach/ns/p/c"): ("create", "proxy"),
        ("POST", "/portForward/ns/p"): ("create", "proxy"),
        ("GET", "/portForward/ns/p"): ("get", "proxy"),
        ("POST", "/run/ns/p/c"): ("create", "proxy"),
        ("PUT", "/x"): ("update", "proxy"),
        ("PATCH", "/x"): ("patch", "proxy"),
        ("DELETE", "/x"): ("delete", "proxy"),
    }
    for (method, path), expected in cases.items():
        attrs = request_attributes(user, method, path, "n1")
        assert (attrs.verb, attrs.subresource) == expected, (method, path)
        assert attrs.review_spec()["resourceAttributes"]["name"] == "n1"


def test_ttl_cache_expires_and_stays_bounded():
    now = [0.0]
    cache = TTLCache(lambda: now[0], limit=8)
    cache.put("a", True, 5)
    assert cache.get("a") == (True, True)
    now[0] = 5.0
    assert cache.get("a") == (False, None)
    for i in range(20):
        cache.put(str(i), i, 100)
    assert len(cache._entries) <= 8
