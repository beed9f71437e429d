"""Health check node ports (upstream's pkg/proxy/healthcheck service health server): for every Service
with externalTrafficPolicy Local and a `spec.healthCheckNodePort`, the proxy serves HTTP on that port
so an external load balancer sends traffic only to nodes holding a ready endpoint of it. Any path
answers 200 when this node has local ready endpoints and the proxy is healthy, 503 otherwise, with
kube-proxy's body and its `X-Load-Balancing-Endpoint-Weight` header (the local endpoint count).

Servers listen on the NodePort addresses (every address when those are all local ones), are opened
when a Service gets such a port and closed when it loses it; a port that cannot be bound is logged and
retried on the next sync, as upstream does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from serviceproxy.model import Endpoint, ServicePort, ServicePortName, categorize

log = logging.getLogger("proxy")
NamespacedName = tuple[str, str]


def body(namespace: str, name: str, count: int, healthy: bool) -> str:
    """kube-proxy's response text, byte for byte (tab-indented JSON)."""
    return (
        "{\n"
        '\t"service": {\n'
        f'\t\t"namespace": "{namespace}",\n'
        f'\t\t"name": "{name}"\n'
        "\t},\n"
        f'\t"localEndpoints": {count},\n'
        f'\t"serviceProxyHealthy": {"true" if healthy else "false"}\n'
        "}"
    )


def wanted_ports(ports: list[ServicePort]) -> dict[NamespacedName, int]:
    return {
        (p.name.namespace, p.name.name): p.health_check_node_port
        for p in ports
        if p.health_check_node_port and p.external_local
    }


def local_ready_counts(
    ports: list[ServicePort], endpoints: dict[ServicePortName, tuple[Endpoint, ...]], node: str
) -> dict[NamespacedName, int]:
    """Distinct ready endpoints on this node per Service (upstream's LocalReadyEndpoints)."""
    seen: dict[NamespacedName, set[str]] = {}
    for svc in ports:
        if not svc.health_check_node_port:
            continue
        bucket = seen.setdefault((svc.name.namespace, svc.name.name), set())
        cat = categorize(svc, endpoints.get(svc.name, ()), node)
        bucket.update(e.address for e in cat.local if e.ready)
    return {name: len(addresses) for name, addresses in seen.items()}


@dataclass
class _Server:
    port: int
    runner: web.AppRunner


@dataclass
class ServiceHealthServers:
    hosts: tuple[str, ...] | None  # None: every address
    proxy_healthy: Callable[[], bool]
    servers: dict[NamespacedName, _Server] = field(default_factory=dict)
    counts: dict[NamespacedName, int] = field(default_factory=dict)

    def _app(self, name: NamespacedName) -> web.Application:
        async def handle(_request: web.Request) -> web.Response:
            count = self.counts.get(name, 0)
            healthy = self.proxy_healthy()
            return web.Response(
                status=200 if count and healthy else 503,
                text=body(name[0], name[1], count, healthy),
                content_type="application/json",
                headers={"X-Content-Type-Options": "nosniff", "X-Load-Balancing-Endpoint-Weight": str(count)},
            )

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        return app

    async def sync(self, wanted: dict[NamespacedName, int], counts: dict[NamespacedName, int]) -> None:
        self.counts = {name: counts.get(name, 0) for name in wanted}
        for name, server in list(self.servers.items()):
            if wanted.get(name) != server.port:
                await server.runner.cleanup()
                del self.servers[name]
                log.info("closed health check service=%s/%s port=%d", *name, server.port)
        for name, port in wanted.items():
            if name not in self.servers:
                await self._open(name, port)

    async def _open(self, name: NamespacedName, port: int) -> None:
        runner = web.AppRunner(self._app(name), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            for host in self.hosts if self.hosts is not None else ("0.0.0.0",):
                await web.TCPSite(runner, host, port, reuse_address=True).start()
        except OSError as err:
            await runner.cleanup()
            log.error("failed to start health check service=%s/%s port=%d error=%s", *name, port, err)
            return
        self.servers[name] = _Server(port, runner)
        log.info("opened health check service=%s/%s port=%d", *name, port)

    async def close(self) -> None:
        for server in self.servers.values():
            await server.runner.cleanup()
        self.servers.clear()
