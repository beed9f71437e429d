"""/healthz, /livez and /readyz as kube-apiserver answers them: named checks, `?verbose` listing each
("[+]ping ok" ... "readyz check passed"), `?exclude=NAME`, one path per check (`/readyz/etcd`), and on any
failure a 500 naming the failed checks with the reason withheld (the reason goes to our log only).

The checks say what is true of this server: the store answers a read within the health timeout (etcd's
`/registry/health` key, as upstream's etcd check reads it), the watch cache is fed, each start-up step
the server takes is done, and the server is not shutting down."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from controlplane.storage.interface import Store

log = logging.getLogger("controlplane.apiserver.health")

STORE_TIMEOUT = 2.0  # upstream's --etcd-healthcheck-timeout and --etcd-readycheck-timeout
ENDPOINTS = ("healthz", "livez", "readyz")

Probe = Callable[[], Awaitable[None]]  # raises (any error) when the check fails


@dataclass(frozen=True)
class Check:
    name: str
    probe: Probe
    ready_only: bool = False  # listed by /readyz alone (upstream's AddReadyzChecks)


@dataclass
class Steps:
    """Start-up steps done (upstream's post-start hooks) and whether shutdown began."""

    done: set[str] = field(default_factory=set)
    shutting_down: bool = False

    def hook(self, name: str) -> Probe:
        async def probe() -> None:
            if name not in self.done:
                raise RuntimeError(f"{name} not finished")

        return probe

    async def not_shutting_down(self) -> None:
        if self.shutting_down:
            raise RuntimeError("process is shutting down")


# The start-up steps this server takes, named as upstream's post-start hooks that do the same.
INFORMER_SYNC = "informer-sync"  # the watch cache holds the store's state
BOOTSTRAP_ROLES = "poststarthook/rbac/bootstrap-roles"
BOOTSTRAP_CONTROLLER = "poststarthook/bootstrap-controller"
AUTOREGISTRATION = "poststarthook/kube-apiserver-autoregistration"
AUTOREGISTER_COMPLETION = "autoregister-completion"


def standard_checks(store: Store, steps: Steps) -> list[Check]:
    async def ok() -> None:
        return None

    async def store_answers() -> None:
        async with asyncio.timeout(STORE_TIMEOUT):
            await store.get("/health")

    return [
        Check("ping", ok),
        Check("log", ok),
        Check("etcd", store_answers),
        Check("etcd-readiness", store_answers, ready_only=True),
        Check(INFORMER_SYNC, steps.hook(INFORMER_SYNC), ready_only=True),
        Check(BOOTSTRAP_ROLES, steps.hook(BOOTSTRAP_ROLES)),
        Check(BOOTSTRAP_CONTROLLER, steps.hook(BOOTSTRAP_CONTROLLER)),
        Check(AUTOREGISTRATION, steps.hook(AUTOREGISTRATION)),
        Check(AUTOREGISTER_COMPLETION, steps.hook(AUTOREGISTER_COMPLETION)),
        Check("shutdown", steps.not_shutting_down, ready_only=True),
    ]


def _text(body: str, status: int = 200) -> web.Response:
    response = web.Response(status=status, body=body.encode())
    response.headers["Content-Type"] = "text/plain; charset=utf-8"
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


async def _failure(check: Check) -> str | None:
    try:
        await check.probe()
    except Exception as err:  # any error fails the check; its text is for our log only
        return f"{type(err).__name__}: {err}" if not str(err) else str(err)
    return None


class HealthHandler:
    """Serves the three endpoints and their per-check paths from one list of checks."""

    def __init__(self, checks: list[Check]) -> None:
        self.checks = checks

    def of(self, endpoint: str) -> list[Check]:
        return [c for c in self.checks if endpoint == "readyz" or not c.ready_only]

    async def root(self, request: web.Request) -> web.Response:
        endpoint = request.path.strip("/")
        excluded = set(request.query.getall("exclude", []))
        lines, failed = [], []
        for check in self.of(endpoint):
            if check.name in excluded:
                excluded.discard(check.name)
                lines.append(f"[+]{check.name} excluded: ok")
                continue
            reason = await _failure(check)
            if reason is None:
                lines.append(f"[+]{check.name} ok")
            else:
                lines.append(f"[-]{check.name} failed: reason withheld")
                failed.append(f"[-]{check.name} failed: {reason}")
        if excluded:
            names = ",".join(f'"{n}"' for n in sorted(excluded))
            lines.append(f"warn: some health checks cannot be excluded: no matches for {names}")
        if failed:
            log.warning("endpoint=%s checks-failed=%s", endpoint, "; ".join(failed))
            # Go's http.Error: the text and a newline, always verbose.
            return _text("\n".join(lines) + f"\n{endpoint} check failed\n", 500)
        if "verbose" not in request.query:
            return _text("ok")
        return _text("\n".join(lines) + f"\n{endpoint} check passed\n")

    async def single(self, request: web.Request) -> web.Response:
        endpoint = request.path.strip("/").split("/", 1)[0]
        name = request.match_info["check"]
        check = next((c for c in self.of(endpoint) if c.name == name), None)
        if check is None:
            raise web.HTTPNotFound()
        reason = await _failure(check)
        if reason is not None:
            return _text(f"internal server error: {reason}\n", 500)
        return _text("ok")
