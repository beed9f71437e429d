"""Which failed calls the client sends again, as client-go decides: a write only when nothing reached
the server or the server asked for it with Retry-After (a 429 or 5xx); a read also on a 5xx, a broken
connection or a timeout. A PATCH is not idempotent (a JSON patch `add` to a list appends once per
delivery), so a 503 or a timeout never applies it twice."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from kubeclient.client import JSON_PATCH, retryable_answer
from kubeclient.errors import ApiError
from tests.kubeclient.conftest import served

PATH = "/api/v1/namespaces/d/configmaps/c"
PATCH = [{"op": "add", "path": "/data/k", "value": "v"}]


class Scripted:
    """Answers each request with the next of `script` ("503", "503+retry-after", "slow", "ok") and
    records the methods it was asked."""

    def __init__(self, *script: str) -> None:
        self.script, self.methods = list(script), []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.methods.append(request.method)
        step = self.script.pop(0) if self.script else "ok"
        if step == "slow":
            await asyncio.sleep(2)
        if step.startswith("503"):
            headers = {"Retry-After": "0"} if step.endswith("retry-after") else {}
            body = {"kind": "Status", "status": "Failure", "reason": "ServiceUnavailable", "code": 503}
            return web.json_response(body, status=503, headers=headers)
        return web.json_response({"kind": "ConfigMap", "metadata": {"name": "c"}})


@pytest.mark.parametrize("step", ["503", "slow"])
async def test_a_patch_is_not_sent_again_after_a_5xx_or_a_timeout(step: str) -> None:
    server = Scripted(step)
    async with served(server.handle, max_attempts=3, request_timeout=0.5) as client:
        with pytest.raises(ApiError) as err:
            await client.patch(PATH, PATCH, content_type=JSON_PATCH)
        assert err.value.status == (503 if step == "503" else 0)
        assert server.methods == ["PATCH"]


@pytest.mark.parametrize("step", ["503", "slow"])
async def test_a_get_is_sent_again_after_a_5xx_or_a_timeout(step: str) -> None:
    server = Scripted(step)
    async with served(server.handle, max_attempts=3, request_timeout=0.5) as client:
        assert (await client.get(PATH))["kind"] == "ConfigMap"
        assert server.methods == ["GET", "GET"]


async def test_a_patch_is_sent_again_when_the_server_asks_with_retry_after() -> None:
    server = Scripted("503+retry-after")
    async with served(server.handle, max_attempts=3) as client:
        assert (await client.patch(PATH, PATCH, content_type=JSON_PATCH))["kind"] == "ConfigMap"
        assert server.methods == ["PATCH", "PATCH"]


def test_the_retry_rule_is_client_gos() -> None:
    for write in ("POST", "PUT", "PATCH", "DELETE"):
        assert not retryable_answer(write, 503, None) and not retryable_answer(write, 500, None)
        assert not retryable_answer(write, 429, None)  # checkWait needs the header
        assert retryable_answer(write, 429, 1.0) and retryable_answer(write, 500, 0.0)
        assert not retryable_answer(write, 409, 1.0)
    assert retryable_answer("GET", 503, None) and not retryable_answer("GET", 404, None)
