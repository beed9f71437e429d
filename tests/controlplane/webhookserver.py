"""A real admission webhook for tests: an aiohttp HTTPS server on the host with its own CA (generated
here), answering AdmissionReview v1 by path: /mutate adds the label `webhook=seen` by JSONPatch,
/deny refuses objects labelled `deny=yes`, /warn allows with a warning, /refuse refuses everything, /add-fields
adds `spec.name` and `spec.undeclared`, and the broken answers the bad
input tests need (/garbage, /wronguid, /badpatch, /hang). It records every review it got."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

Obj = dict[str, Any]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_tls(directory: Path, hosts: list[str]) -> tuple[bytes, Path, Path]:
    """(CA PEM, server cert, server key) for `hosts` (IPs or DNS names)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("webhook-test-ca"))
        .issuer_name(_name("webhook-test-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    cert_path, key_path = directory / "webhook.crt", directory / "webhook.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return ca_pem, cert_path, key_path


def _answer(request: Obj, **response: Any) -> Obj:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": request["uid"], **response},
    }


def _patch(ops: list[Obj]) -> str:
    return base64.b64encode(json.dumps(ops).encode()).decode()


def _labels(obj: Obj | None) -> Obj:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


@dataclass
class ReviewServer:
    """What the admission and the conversion test webhooks share: where they listen, their CA, the
    reviews they got (by path) and the event that releases the requests they hold."""

    host: str
    port: int = 0
    ca_pem: bytes = b""
    reviews: list[Obj] = field(default_factory=list)
    _stop: asyncio.Event | None = None

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_pem).decode()

    def url(self, path: str) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}{path}"

    def got(self, path: str) -> list[Obj]:
        return [r["request"] for r in self.reviews if r["path"] == path]

    async def _received(self, http: web.Request) -> tuple[Obj, Obj, str]:
        """The review posted (recorded), its request and the path it came to."""
        review = await http.json()
        self.reviews.append({"path": http.path, "request": review["request"], "query": dict(http.query)})
        return review, review["request"], http.path

    async def _held(self) -> None:
        """Wait until the server stops (the /hang paths)."""
        assert self._stop is not None
        await self._stop.wait()


class WebhookServer(ReviewServer):
    async def _handle(self, http: web.Request) -> web.StreamResponse:
        _, req, path = await self._received(http)
        obj = req.get("object")
        if path == "/mutate":
            ops = (
                [{"op": "add", "path": "/metadata/labels/webhook", "value": "seen"}]
                if _labels(obj)
                else [{"op": "add", "path": "/metadata/labels", "value": {"webhook": "seen"}}]
            )
            return web.json_response(_answer(req, allowed=True, patchType="JSONPatch", patch=_patch(ops)))
        if path == "/annotate":  # an annotation, on whatever object it is sent
            annotations = ((obj or {}).get("metadata") or {}).get("annotations")
            ops = (
                [{"op": "add", "path": "/metadata/annotations/webhook", "value": "seen"}]
                if annotations
                else [{"op": "add", "path": "/metadata/annotations", "value": {"webhook": "seen"}}]
            )
            return web.json_response(_answer(req, allowed=True, patchType="JSONPatch", patch=_patch(ops)))
        if path == "/mutate-again":  # changes the object every time it sees no `again` label
            if _labels(obj).get("again") == "yes":
                return web.json_response(_answer(req, allowed=True))
            ops = [{"op": "add", "path": "/metadata/labels/again", "value": "yes"}]
            if not _labels(obj):
                ops = [{"op": "add", "path": "/metadata/labels", "value": {"again": "yes"}}]
            return web.json_response(_answer(req, allowed=True, patchType="JSONPatch", patch=_patch(ops)))
        if path == "/deny":  # a DELETE is judged by the object it removes
            if _labels(obj if obj is not None else req.get("oldObject")).get("deny") == "yes":
                return web.json_response(
                    _answer(
                        req,
                        allowed=False,
                        status={"code": 403, "message": "objects labelled deny=yes are refused"},
                    )
                )
            return web.json_response(_answer(req, allowed=True))
        if path == "/refuse":  # refuses whatever it is sent
            return web.json_response(
                _answer(req, allowed=False, status={"code": 403, "message": "connections are refused"})
            )
        if path == "/add-fields":  # a field the schema declares and one it does not
            ops = [
                {"op": "add", "path": "/spec/name", "value": "hooked"},
                {"op": "add", "path": "/spec/undeclared", "value": "x"},
            ]
            return web.json_response(_answer(req, allowed=True, patchType="JSONPatch", patch=_patch(ops)))
        if path == "/warn":
            return web.json_response(_answer(req, allowed=True, warnings=["this webhook warns"]))
        if path == "/garbage":
            return web.Response(body=b"this is not json", content_type="application/json")
        if path == "/wronguid":
            return web.json_response(
                {**_answer(req, allowed=True), "response": {"uid": "not-the-uid", "allowed": True}}
            )
        if path == "/badpatch":
            patch = base64.b64encode(json.dumps({"op": "add"}).encode()).decode()
            return web.json_response(_answer(req, allowed=True, patchType="JSONPatch", patch=patch))
        if path == "/badop":
            ops = [{"op": "remove", "path": "/metadata/nothing/here"}]
            return web.json_response(_answer(req, allowed=True, patchType="JSONPatch", patch=_patch(ops)))
        if path == "/tamper":  # tries to change what only the server sets
            ops = [{"op": "add", "path": "/metadata/uid", "value": "not-a-real-uid"}]
            return web.json_response(_answer(req, allowed=True, patchType="JSONPatch", patch=_patch(ops)))
        if path == "/move":
            ops = [{"op": "add", "path": "/metadata/namespace", "value": "elsewhere"}]
            return web.json_response(_answer(req, allowed=True, patchType="JSONPatch", patch=_patch(ops)))
        if path == "/error":
            return web.Response(status=500, text="boom")
        if path == "/truncate":  # promises a body, sends part of it, hangs up
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.content_length = 1000
            await resp.prepare(http)
            await resp.write(b'{"apiVersion":')
            assert http.transport is not None
            http.transport.close()
            return resp
        if path == "/hang":
            await self._held()
            return web.json_response(_answer(req, allowed=True))
        return web.json_response(_answer(req, allowed=True))


class Handler(Protocol):
    """What `serving_in_thread` runs: a POST handler, the event that releases hung requests, the port."""

    port: int
    _stop: asyncio.Event | None

    async def _handle(self, request: web.Request) -> web.StreamResponse: ...


H = TypeVar("H", bound=Handler)


@contextmanager
def serving_in_thread(
    make: Callable[[bytes], H], directory: Path, host: str, names: tuple[str, ...], what: str
) -> Iterator[H]:
    """Run `make(ca_pem)` over HTTPS on `host` (a free port; its certificate also for `names`) in a
    thread with its own event loop, every POST path to its handler; stopped and closed on exit."""
    ca_pem, cert, key = make_tls(directory, [host, *names])
    server = make(ca_pem)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    runner_box: list[web.AppRunner] = []

    async def start() -> None:
        server._stop = asyncio.Event()
        app = web.Application()
        app.router.add_post("/{tail:.*}", server._handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, host, 0, ssl_context=ctx)
        await site.start()
        assert site._server is not None
        server.port = site._server.sockets[0].getsockname()[1]
        runner_box.append(runner)

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name=what, daemon=True)
    thread.start()
    assert started.wait(10), f"the {what} did not start"
    try:
        yield server
    finally:

        async def stop() -> None:
            assert server._stop is not None
            server._stop.set()
            await runner_box[0].cleanup()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def serving(
    directory: Path, host: str = "127.0.0.1", names: tuple[str, ...] = ()
) -> AbstractContextManager[WebhookServer]:
    """Run a WebhookServer on `host` (a free port) in a thread with its own event loop."""
    return serving_in_thread(
        lambda ca: WebhookServer(host, ca_pem=ca), directory, host, names, "webhook server"
    )
