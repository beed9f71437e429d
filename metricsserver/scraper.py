"""Scraping every node's kubelet, as metrics-server's scraper (pkg/scraper): each round (every
--metric-resolution) GETs https://<node address>:<kubelet port>/metrics/resource from all nodes at once,
with the metrics server's own credentials (the kubelet authorizes nodes/metrics by SubjectAccessReview)
and a per-node timeout; a node that fails is left out of that round and logged."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from kubeclient.config import ClusterConfig
from metricsserver.metrics import MetricsServerMetrics
from metricsserver.points import NodeSample, parse

log = logging.getLogger("metricsserver.scraper")
Obj = dict[str, Any]
DEFAULT_ADDRESS_TYPES = ("Hostname", "InternalDNS", "InternalIP", "ExternalDNS", "ExternalIP")


@dataclass(frozen=True)
class KubeletOptions:
    address_types: tuple[str, ...] = DEFAULT_ADDRESS_TYPES
    use_node_status_port: bool = False
    port: int = 10250
    insecure_tls: bool = False
    ca_file: str | None = None
    timeout: float = 10.0


def node_url(node: Obj, options: KubeletOptions) -> str | None:
    addresses = (node.get("status") or {}).get("addresses") or []
    for wanted in options.address_types:
        for addr in addresses:
            if addr.get("type") == wanted and addr.get("address"):
                host = addr["address"]
                port = options.port
                if options.use_node_status_port:
                    endpoint = ((node.get("status") or {}).get("daemonEndpoints") or {}).get(
                        "kubeletEndpoint"
                    ) or {}
                    port = int(endpoint.get("Port") or port)
                netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                return f"https://{netloc}/metrics/resource"
    return None


def kubelet_context(config: ClusterConfig, options: KubeletOptions) -> ssl.SSLContext:
    """TLS towards kubelets: verified with --kubelet-certificate-authority (else the kubeconfig's CA), or
    not at all with --kubelet-insecure-tls; the kubeconfig's client certificate when it has one."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if options.insecure_tls:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif options.ca_file:
        ctx.load_verify_locations(cafile=options.ca_file)
    elif config.ca_data:
        ctx.load_verify_locations(cadata=config.ca_data.decode())
    elif config.ca_file:
        ctx.load_verify_locations(cafile=config.ca_file)
    if config.client_cert_data and config.client_key_data:
        with tempfile.TemporaryDirectory(prefix="metrics-server-cred-") as tmp:
            cert, key = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
            for path, data in ((cert, config.client_cert_data), (key, config.client_key_data)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            ctx.load_cert_chain(str(cert), str(key))
    return ctx


class Scraper:
    def __init__(
        self, config: ClusterConfig, options: KubeletOptions, metrics: MetricsServerMetrics | None = None
    ) -> None:
        self.config = config
        self.options = options
        self.metrics = metrics or MetricsServerMetrics()
        self._ssl = kubelet_context(config, options)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _headers(self) -> dict[str, str]:
        token = self.config.bearer_token()
        return {"Authorization": f"Bearer {token}"} if token else {}

    async def scrape_node(self, node: Obj) -> NodeSample | None:
        name = node["metadata"]["name"]
        started, began = time.time(), time.monotonic()
        sample = await self._scrape_node(name, node)
        self.metrics.kubelet_request(name, started, time.monotonic() - began, sample is not None)
        return sample

    async def _scrape_node(self, name: str, node: Obj) -> NodeSample | None:
        url = node_url(node, self.options)
        if url is None:
            log.warning("event=scrape-failed node=%s cause=no-usable-address", name)
            return None
        if self._session is None:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.get(
                url,
                ssl=self._ssl,
                headers=self._headers(),
                timeout=aiohttp.ClientTimeout(total=self.options.timeout),
            ) as resp:
                text = await resp.text()
                if resp.status != 200:
                    log.warning("event=scrape-failed node=%s status=%d", name, resp.status)
                    return None
        except (aiohttp.ClientError, OSError, TimeoutError, ssl.SSLError) as err:
            log.warning("event=scrape-failed node=%s cause=%r", name, err)
            return None
        try:
            return parse(text)
        except ValueError as err:
            log.warning("event=scrape-failed node=%s cause=%s", name, err)
            return None

    async def scrape(self, nodes: list[Obj]) -> dict[str, NodeSample]:
        results = await asyncio.gather(*(self.scrape_node(n) for n in nodes))
        return {n["metadata"]["name"]: r for n, r in zip(nodes, results, strict=True) if r is not None}
