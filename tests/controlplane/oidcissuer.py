"""An OIDC issuer for tests: an aiohttp HTTPS server (its own CA, from webhookserver.make_tls) in a thread,
serving the discovery document and the JWKS of an RSA key it signs ID tokens with."""

from __future__ import annotations

import asyncio
import base64
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.controlplane.webhookserver import make_tls


def _b64(n: int) -> str:
    return base64.urlsafe_b64encode(n.to_bytes((n.bit_length() + 7) // 8, "big")).rstrip(b"=").decode()


class Issuer:
    def __init__(self, ca_pem: bytes) -> None:
        self.ca_pem = ca_pem
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "test-key-1"
        self.port = 0
        self.fetches = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def token(self, lifetime: int = 600, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.url, "iat": now, "exp": now + lifetime, **claims}
        return jwt.encode(body, self.key, algorithm="RS256", headers={"kid": self.kid})

    async def discovery(self, request: web.Request) -> web.Response:
        self.fetches += 1
        return web.json_response(
            {
                "issuer": self.url,
                "jwks_uri": f"{self.url}/keys",
                "id_token_signing_alg_values_supported": ["RS256"],
            }
        )

    async def keys(self, request: web.Request) -> web.Response:
        numbers = self.key.public_key().public_numbers()
        jwk = {
            "kty": "RSA",
            "use": "sig",
            "alg": "RS256",
            "kid": self.kid,
            "n": _b64(numbers.n),
            "e": _b64(numbers.e),
        }
        return web.json_response({"keys": [jwk]})


@contextmanager
def issuer(directory: Path) -> Iterator[Issuer]:
    ca_pem, cert, key = make_tls(directory, ["127.0.0.1"])
    served = Issuer(ca_pem)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    runners: list[web.AppRunner] = []

    async def start() -> None:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", served.discovery)
        app.router.add_get("/keys", served.keys)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        assert site._server is not None
        served.port = site._server.sockets[0].getsockname()[1]
        runners.append(runner)

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name="oidc issuer", daemon=True)
    thread.start()
    assert started.wait(10), "the issuer did not start"
    try:
        yield served
    finally:
        asyncio.run_coroutine_threadsafe(runners[0].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
