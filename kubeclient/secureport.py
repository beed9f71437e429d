"""A control-plane component's secure port, as k8s.io/component-base and the generic API server's
delegating options give kube-scheduler (10259) and kube-controller-manager (10257): HTTPS with
/healthz, /livez and /readyz (open to anonymous callers, upstream's default
--authorization-always-allow-paths) and /metrics, whose callers are authenticated by client
certificate, front-proxy headers or a TokenReview, and authorized by a SubjectAccessReview (a
nonResourceURL `get` on /metrics).

Without --tls-cert-file the serving certificate is self-signed, kept in --cert-dir, or in a temporary
directory removed on close (upstream keeps it in memory).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from kubeclient.client import KubeClient
from kubeclient.delegatedauth import delegated_auth
from kubeclient.exposition import CONTENT_TYPE
from kubeclient.httpserve import serve
from kubeclient.serving import ensure_self_signed

log = logging.getLogger("kubeclient.secureport")


@dataclass
class SecureServingOptions:
    """upstream's SecureServingOptions and the delegating authentication flags that go with them."""

    secure_port: int
    bind_address: str = "0.0.0.0"
    cert_dir: Path | None = None
    tls_cert_file: Path | None = None
    tls_private_key_file: Path | None = None
    client_ca_file: Path | None = None
    requestheader_client_ca_file: Path | None = None
    requestheader_allowed_names: str = ""


@dataclass
class SecurePort:
    runner: web.AppRunner
    port: int
    _temp_dir: str | None = None

    async def close(self) -> None:
        await self.runner.cleanup()
        if self._temp_dir is not None:
            await asyncio.to_thread(shutil.rmtree, self._temp_dir, True)


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


def health_and_metrics_app(metrics: Callable[[], bytes]) -> web.Application:
    """/healthz, /livez, /readyz ("ok") and /metrics (the component's exposition)."""

    async def serve_metrics(_request: web.Request) -> web.Response:
        return web.Response(body=metrics(), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    for path in ("/healthz", "/livez", "/readyz"):
        app.router.add_get(path, _ok)
    app.router.add_get("/metrics", serve_metrics)
    return app


async def serve_secure_port(
    client: KubeClient, options: SecureServingOptions, name: str, metrics: Callable[[], bytes]
) -> SecurePort | None:
    """Serve the component's health and metrics on its secure port (None when --secure-port=0)."""
    if not options.secure_port:
        return None
    temp_dir = None
    if options.tls_cert_file and options.tls_private_key_file:
        cert, key = options.tls_cert_file, options.tls_private_key_file
    else:
        cert_dir = options.cert_dir
        if cert_dir is None:
            temp_dir = await asyncio.to_thread(tempfile.mkdtemp, prefix=f"{name}-")
            cert_dir = Path(temp_dir)
        ips = [options.bind_address] if options.bind_address not in ("0.0.0.0", "::") else []
        cert, key = await asyncio.to_thread(ensure_self_signed, cert_dir, name, ips, name)
    auth = await delegated_auth(
        client,
        options.requestheader_client_ca_file,
        options.requestheader_allowed_names,
        options.client_ca_file,
    )
    app = health_and_metrics_app(metrics)
    app.middlewares.append(auth.middleware())
    context = await asyncio.to_thread(auth.ssl_context, cert, key)
    try:
        runner, port = await serve(app, f"{options.bind_address}:{options.secure_port}", context)
    except BaseException:
        if temp_dir is not None:
            await asyncio.to_thread(shutil.rmtree, temp_dir, True)
        raise
    log.info("serving securely on %s:%d", options.bind_address, port)
    return SecurePort(runner, port, temp_dir)
